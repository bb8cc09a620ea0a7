"""Measured peaks turn achieved FLOP/s into MFU; unprobed machines say so instead of guessing."""

from __future__ import annotations

import json

import pytest

from conftest import CUT_RESNET50_FLAGS, TINY_RESNET, dlperf, load

# the machine's matmul peaks, probed on every CPU: `make test` runs this file last, alone on the
# machine
pytestmark = pytest.mark.whole_machine


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The first measuring command on a machine never probed (an empty DLPERF_CACHE): it probes
    once. Shared by the two tests below, so the module pays for that probe once, not twice."""
    tmp = tmp_path_factory.mktemp("peak")
    env = {"DLPERF_CACHE": str(tmp / "cache")}
    out = tmp / "before.json"
    proc = dlperf("run", *TINY_RESNET, *CUT_RESNET50_FLAGS, "--repeats", "1",
                  "--db", str(tmp / "a.db"), "--json", str(out), env=env, check=True)
    return tmp, env, proc, load(out)


def test_probe_is_cached_and_used_for_mfu(first_run):
    tmp_path, env, proc, before = first_run
    # a machine never probed is probed once by the first measuring command, so MFU is there
    assert "probing this machine's matmul peaks once" in proc.stderr
    before = before["flops"]
    assert before["peak_per_s"] > 1e8 and before["mfu"] == pytest.approx(
        before["achieved_per_s"] / before["peak_per_s"])

    info = json.loads(dlperf("sysinfo", "--probe", "--json", env=env, check=True).stdout)
    fp32_peak = info["peaks"]["flops_per_s"]["float32"]
    assert fp32_peak > 1e8 and info["peaks"]["host_copy_bytes_per_s"] > 1e8
    assert info["peaks"]["flops_per_s"]["int8"] > 1e8  # int8 inference has its ceiling too
    assert json.loads(dlperf("sysinfo", "--json", env=env, check=True).stdout)["peaks"] == \
        info["peaks"]

    out = tmp_path / "after.json"
    proc = dlperf("run", *TINY_RESNET, *CUT_RESNET50_FLAGS, "--repeats", "1",
                  "--db", str(tmp_path / "a.db"), "--json", str(out), env=env, check=True)
    assert "probing" not in proc.stderr  # re-measured by --probe: reused, not probed again
    flops = load(out)["flops"]
    assert flops["peak_per_s"] == fp32_peak
    assert flops["mfu"] == pytest.approx(flops["achieved_per_s"] / fp32_peak)


def test_the_first_measuring_command_probes_once_and_then_reuses_it(first_run, monkeypatch):
    """`peak.ensure` (what every measuring command calls): the first command's probe said so
    exactly once and cached every dtype; ensure in this process then reuses the cache (the
    same peaks, nothing said, no second probe)."""
    from dlperf.host import peak, sysinfo

    _, env_vars, proc, _ = first_run
    monkeypatch.setenv("DLPERF_CACHE", env_vars["DLPERF_CACHE"])
    assert proc.stderr.count("probing this machine's matmul peaks once") == 1
    env = sysinfo.capture()
    first = peak.cached(env)  # this machine's probe: the first command's, or --probe's since
    assert first["flops_per_s"]["float32"] > 0 and first["flops_per_s"]["int8"] > 0
    said = []
    again = peak.ensure(env, say=said.append)
    assert again == first and said == []  # cached: no second probe


@pytest.mark.parallel
def test_gpu_datasheet_peaks_are_found_by_nvml_name():
    from dlperf.host import peak

    assert peak.datasheet("NVIDIA H100 80GB HBM3")["bfloat16"] == 989.4e12
    assert peak.datasheet("NVIDIA A100-SXM4-80GB")["tf32"] == 156e12
    assert "bfloat16" not in peak.datasheet("Tesla V100-SXM2-16GB")
    assert peak.datasheet("NVIDIA GeForce RTX 4090") is None
    # the most specific whole-word key: the PCIe V100 and the V100S are not the SXM2 card
    assert peak.datasheet("Tesla V100-PCIE-16GB")["float32"] == 14e12
    assert peak.datasheet("V100 PCIe")["float16"] == 112e12
    assert peak.datasheet("Tesla V100S-PCIE-32GB")["float32"] == 16.4e12
    assert peak.datasheet("NVIDIA DGX-1 8x V100-SXM2 16GB")["float32"] == 15.7e12
    assert peak.datasheet("Tesla T4")["int8"] == 130e12
    assert peak.datasheet("NVIDIA RTX T400") is None


@pytest.mark.parallel
def test_cpu_processes_share_their_nodes_peak_and_gpus_each_have_one():
    from dlperf.result import peak_units
    from dlperf.spec import Case

    two_by_two = Case(framework="torch", model="resnet50", batch_size=2, devices=2, nnodes=2)
    assert peak_units(two_by_two, {"gpus": []}) == 2  # the probe used all of a node's cores
    assert peak_units(two_by_two, {"gpus": [{"name": "NVIDIA H100"}]}) == 4
    on_cpu = Case(framework="torch", model="resnet50", batch_size=2, devices=2, device="cpu")
    assert peak_units(on_cpu, {"gpus": [{"name": "NVIDIA H100"}]}) == 1


def _probed(tmp_path, monkeypatch, rates):
    """A machine whose cached probe holds ``rates`` (FLOP/s per dtype)."""
    from dlperf.host import peak

    monkeypatch.setenv("DLPERF_CACHE", str(tmp_path))
    env = {"hostname": "h", "cpu": {"model": "x", "logical_cores": 2}, "gpus": []}
    (tmp_path / "peaks.json").write_text(json.dumps(
        {peak.machine_id(env): {"flops_per_s": rates}}))
    return env


@pytest.mark.parallel
def test_a_rate_above_the_probed_peak_gives_no_mfu_and_says_why(tmp_path, monkeypatch):
    from dlperf import result
    from dlperf.spec import Case

    env = _probed(tmp_path, monkeypatch, {"float32": 1.0e10, "bfloat16": 2.0e10})
    case = Case(framework="torch", model="bert-base", batch_size=4, precision="amp-bf16")
    below = result.flops_block(1.0e9, 1.0e10, case, env)
    assert below["mfu"] == 0.5 and below["peak_source"] == "dlperf sysinfo --probe (matmul)"
    above = result.flops_block(1.0e9, 4.0e10, case, env)
    assert above["mfu"] is None and above["achieved_per_s"] == 4.0e10
    assert "below the achieved rate (200% of it)" in above["peak_source"]


@pytest.mark.parallel
def test_a_reduced_precision_slower_than_fp32_is_bounded_by_fp32(tmp_path, monkeypatch):
    """On a CPU that emulates bf16 (its bf16 GEMM 4x slower than fp32), a framework computing
    its bf16 in fp32 would read ~100% MFU against the bf16 probe: fp32's peak is the ceiling."""
    from dlperf.host import peak
    from dlperf import result
    from dlperf.spec import Case

    env = _probed(tmp_path, monkeypatch,
                  {"float32": 4.0e10, "bfloat16": 1.0e10, "int8": 1.0e9})
    bf16 = Case(framework="tensorflow", model="bert-base", batch_size=4, precision="amp-bf16")
    block = result.flops_block(1.0e9, 1.0e10, bf16, env)
    assert block["peak_per_s"] == 4.0e10 and block["mfu"] == 0.25
    assert "float32: the bfloat16 GEMM here is slower" in block["peak_source"]
    assert peak.ceiling("fp32", env) == (4.0e10, "float32")
    assert peak.ceiling("int8", env) == (1.0e9, "int8")  # OP/s of integers: no fp32 fallback
    assert peak.ceiling("amp-fp16", env) == (4.0e10, "float32")  # fp16 not probed: fp32 bounds it


@pytest.mark.parallel  # stand-in callables: measures nothing, starts no framework
def test_the_probe_budget_includes_the_warm_up():
    """A dtype whose one GEMM outlasts the budget (fp16 on a CPU: seconds) is timed once, its
    warm-up being the measurement; a fast one gets its timed repeats."""
    import time

    from dlperf.host import peak

    calls = []

    def slow() -> None:
        calls.append(1)
        time.sleep(0.2)

    assert 0 < peak._best_rate(slow, 1.0, repeats=10, budget_s=0.1) <= 5.0
    assert len(calls) == 1
    calls.clear()
    assert peak._best_rate(lambda: calls.append(1), 1.0, repeats=3, budget_s=60.0) > 0
    assert len(calls) == 4


@pytest.mark.parallel  # measures nothing
def test_a_probe_taken_on_a_busier_host_than_now_is_replaced():
    """A probe run while other work held the CPUs measured too low a peak (and every MFU over
    it too high): ensure re-probes when the cached probe ran oversubscribed (load average above
    twice the CPU count) and busier than today by more than the CPU count; else it keeps it."""
    from dlperf.host.peak import busier_than_now

    assert busier_than_now({"load_average": 7.0}, 0.3, cpus=2)
    assert not busier_than_now({"load_average": 2.2}, 0.3, cpus=2)  # a suite's other phase
    assert not busier_than_now({"load_average": 2.0}, 1.5, cpus=2)  # as busy as now
    assert not busier_than_now({"load_average": 4.5}, 3.0, cpus=2)  # busy now too
    assert not busier_than_now({"load_average": 3.5}, 0.2, cpus=2)  # not oversubscribed
    assert busier_than_now({"load_average": 40.0}, 1.0, cpus=16)
    assert not busier_than_now({"load_average": 20.0}, 1.0, cpus=16)
    assert not busier_than_now({}, 0.3)  # a probe from before loads were recorded: kept
    assert not busier_than_now({"load_average": 7.0}, None)  # no load average here


@pytest.mark.parallel
def test_a_probe_held_to_some_cpus_is_kept_apart_from_the_machines(tmp_path):
    """Under ``taskset`` the machine description says how many CPUs the process may use, and a
    peak probed there is cached under its own key: the whole machine's entry keeps its key."""
    import subprocess
    import sys

    from dlperf.host import peak

    proc = subprocess.run(["taskset", "-c", "0", sys.executable, "-c",
                           "from dlperf.host import sysinfo; "
                           "print(sysinfo.capture()['cpu']['allowed_cores'])"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "1"
    whole = {"hostname": "h", "cpu": {"model": "x", "logical_cores": 2}, "gpus": []}
    every = {**whole, "cpu": {**whole["cpu"], "allowed_cores": 2}}
    one = {**whole, "cpu": {**whole["cpu"], "allowed_cores": 1}}
    assert peak.machine_id(every) == peak.machine_id(whole)  # the key results were stored under
    assert peak.machine_id(one) != peak.machine_id(whole)
