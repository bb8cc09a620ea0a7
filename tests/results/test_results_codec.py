"""Results stored by older dlperf versions, kept as fixtures (tests/fixtures/results/, each named by
the commit whose shape it imitates), read through the one reader (dlperf.results.codec) into
typed results as the current version reads them; and the one writer, which must not change the
stored format: writing what was read stores the same JSON text.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest

from dlperf import scaling
from dlperf.results import codec
from dlperf.results.model import Result
from dlperf.spec import Case
from dlperf.store import Store

FIXTURES = Path(__file__).parents[1] / "fixtures" / "results"
NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))

#: per fixture: the typed fields the reader must give (what each older version lacked, derived)
EXPECTED = {
    # the first results: no resolved device, no ranks, no environment, an 11-field case
    "bc6b9ea-core.json": dict(device="cpu", status="ok", median=21.5, params=25557032,
                              devices=1, launcher="native", environment_name="torch",
                              framework_version="2.1.0", run_label=None, ranks=0,
                              emulated_hosts=None, speedup=None),
    # multi-process: ranks and speedup, the device only in the backend's info ("cuda:1")
    "f253f3d-ranks.json": dict(device="cuda:1 NVIDIA A100-SXM4-40GB", status="ok", median=1500.0,
                               params=25557032, devices=2, launcher="native",
                               environment_name="torch", framework_version="2.1.0",
                               run_label=None, ranks=2, emulated_hosts=None, speedup=1.92),
    # a failure before the worker reported, on a GPU host: "cuda", no figure
    "f253f3d-failed-on-gpu-host.json": dict(device="cuda", status="crash", median=None,
                                            params=None, devices=1, launcher="native",
                                            environment_name="torch", framework_version=None,
                                            run_label=None, ranks=0, emulated_hosts=None,
                                            speedup=None),
    # the resolved device stored, no environment block yet: the version from the worker's info
    "4ae3983-device.json": dict(device="cpu", status="ok", median=88.0, params=1200000,
                                devices=1, launcher="native", environment_name="jax",
                                framework_version="0.4.30", run_label=None, ranks=1,
                                emulated_hosts=None, speedup=1.0),
    # today's: environment block, emulated hosts in the launch facts, a full case
    "6eb7158-current.json": dict(device="cuda:0 NVIDIA H100 80GB HBM3", status="ok",
                                 median=6000.0, params=25557032, devices=4, launcher="native",
                                 environment_name="torch", framework_version="2.4.0",
                                 run_label=None, ranks=4,
                                 emulated_hosts={"hosts": 2, "link": "10gbit"}, speedup=3.84),
}


def stored(tmp_path: Path, *names: str) -> Path:
    """A results file holding each fixture's text as an older dlperf wrote it (a real store for
    the tables, the rows inserted as they were)."""
    path = tmp_path / "results.db"
    Store(path).close()
    db = sqlite3.connect(path)
    with db:
        for name in names:
            data = json.loads((FIXTURES / name).read_text())
            db.execute("INSERT INTO runs (case_key, label, case_json, env_json, started_at, "
                       "finished_at, status, error, result_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (data["case_key"], data["label"], json.dumps(data["case"]),
                        json.dumps(data["env"]), "2026-11-20T00:00:00+00:00",
                        "2026-11-20T00:01:00+00:00", data["status"], data["error"],
                        json.dumps(data)))
    db.close()
    return path


def fields(result: Result) -> dict[str, object]:
    return {f.name: getattr(result, f.name) for f in dataclasses.fields(result) if f.name != "raw"}


@pytest.mark.parallel
def test_every_fixture_has_its_expectations():
    assert NAMES == sorted(EXPECTED)


@pytest.mark.parallel
@pytest.mark.parametrize("name", NAMES)
def test_an_older_row_reads_as_the_current_version_reads_it(tmp_path, name):
    with Store(stored(tmp_path, name), readonly=True) as store:
        [result] = store.typed_results()
    want = EXPECTED[name]
    got = dict(device=result.device, status=result.status, median=result.median,
               params=result.params, devices=result.devices, launcher=result.launcher,
               environment_name=result.environment_name,
               framework_version=result.framework_version, run_label=result.run_label,
               ranks=len(result.ranks), emulated_hosts=result.emulated_hosts,
               speedup=result.speedup)
    assert got == want
    # every case field the current version has: the old row's missing ones at their defaults
    assert {f.name for f in dataclasses.fields(Case)} <= set(result.case)
    assert result.case["launcher"] == "native" and result.case["allocator"] == ""
    assert result.case["link"] == ("10gbit" if name.startswith("6eb7158") else "")


@pytest.mark.parallel
@pytest.mark.parametrize("name", NAMES)
def test_writing_what_was_read_stores_the_same_json(tmp_path, name):
    text = (FIXTURES / name).read_text()
    original = json.loads(text)
    read = codec.read_result(original)
    assert codec.write_result(read) == json.dumps(original)  # byte-identical to dlperf's dump
    assert original == json.loads(text), "reading changed the object it read"
    # through the store: finish_run writes it, the column holds the same text, reading it
    # again gives the same typed result
    path = tmp_path / "round.db"
    with Store(path) as store:
        run_id = store.start_run(original["case_key"], original["label"], original["case"],
                                 original["env"])
        store.finish_run(run_id, read.raw)  # type: ignore[arg-type]
        [row] = list(store.runs())
        assert row["result_json"] == json.dumps(original)
        again = store.result(row)
    assert fields(again) == fields(read)
    # the JSON contract's readers get the derived device, and nothing else added
    as_dict = codec.to_dict(read)
    assert set(as_dict) - set(original) <= {"device"}
    assert as_dict["device"] == EXPECTED[name]["device"]


@pytest.mark.parallel
def test_the_ranks_of_an_older_multiprocess_row_are_typed():
    result = codec.read_result(json.loads((FIXTURES / "f253f3d-ranks.json").read_text()))
    assert [r.rank for r in result.ranks] == [0, 1]
    assert result.ranks[0].allreduce_s == (0.004, 0.005) and result.ranks[0].slowest_in == 2
    # the slowest rank per repeat (0.006, 0.005), their median
    assert scaling.allreduce_seconds(result) == pytest.approx(0.0055)
    assert scaling.allreduce_seconds(result.raw) == scaling.allreduce_seconds(result)


@pytest.mark.parallel
def test_an_older_one_device_row_is_the_baseline_of_a_new_multidevice_result(tmp_path):
    # the first version's 1-device CPU row lacks today's case fields and the device: the
    # reader fills both, so a new 2-device result of the same configuration scales over it
    path = stored(tmp_path, "bc6b9ea-core.json", "f253f3d-ranks.json")
    old = json.loads((FIXTURES / "bc6b9ea-core.json").read_text())
    new = {**old, "run_id": None, "case": {**Case.from_dict(old["case"]).to_dict(), "devices": 2,
                                           "knobs": {}},
           "throughput": {**old["throughput"], "median": 40.0}}
    with Store(path, readonly=True) as store:
        figures = scaling.scaling(new, store)
        assert figures["speedup_baseline"]["run_id"] == old["run_id"]
        assert figures["speedup_baseline"]["device"] == "cpu"
        assert figures["speedup"] == pytest.approx(40.0 / 21.5)
        assert figures["scaling_efficiency"] == pytest.approx(40.0 / 21.5 / 2)
        # the same configuration resolved to a GPU: the old CPU row is never its baseline
        gpu = {**new, "device": "cuda:0 NVIDIA H100 80GB HBM3"}
        assert scaling.scaling(gpu, store)["speedup_note"] == scaling.NO_BASELINE


@pytest.mark.parallel
def test_the_reader_reads_what_a_file_holds_without_raising():
    # a result file `dlperf compare` reads is checked field by field after it is read: the
    # reader itself must take any JSON object, leaving what it cannot type out
    odd = {"status": "ok", "case": {"framework": "x", "devices": 2}, "label": 7,
           "throughput": {"median": 5.0, "ci95": "wide", "n": "3", "repeats": {"a": 1}},
           "ranks": [{"rank": "zero", "slowest_in": None}, "not a rank"], "model": 3,
           "env": {"cpu": {"flags": [{"a": 1}, "avx2"]}, "gpus": "none"},
           "profile": [], "roofline": "n/a", "launch": 3}
    result = codec.read_result(odd)
    assert result.median == 5.0 and result.throughput is not None
    assert result.throughput.ci95 is None and result.throughput.n == 0
    assert result.throughput.repeats == ()
    assert [r.rank for r in result.ranks] == [0] and result.ranks[0].slowest_in == 0
    assert result.cpu_flags == frozenset({"avx2"}) and result.devices == 2
    assert result.profile is None and result.roofline is None and result.launch is None
    assert result.device == "cpu" and result.label == "7"


@pytest.mark.parallel
def test_the_report_figures_fields_are_typed():
    # what the report's figures, compare and capacity read: memory, iteration time and unit
    # from every fixture, the latency, profile and roofline blocks from a result that has them
    current = codec.read_result(json.loads((FIXTURES / "6eb7158-current.json").read_text()))
    assert (current.unit, current.iteration_ms, current.latency_ms) == ("samples/s", 21.33, {})
    assert (current.peak_host_bytes, current.peak_device_bytes) == (4000000000, 30000000000)
    core = codec.read_result(json.loads((FIXTURES / "bc6b9ea-core.json").read_text()))
    assert (core.iteration_ms, core.peak_device_bytes) == (None, None)
    infer = codec.read_result({
        "status": "ok", "case": {"task": "infer"}, "latency_ms": {"mean": 2.5, "p99": 4.0},
        "profile": {"categories": {"gemm": 0.01}, "step_s": 0.02, "coverage": 0.9,
                    "tool": {"name": "torch.profiler", "version": "2"}},
        "roofline": {"intensity": 10.0, "ridge": 20.0, "bound": "memory", "of_roof": 0.5,
                     "peak_flops_per_s": 1e12, "bandwidth_bytes_per_s": 5e10,
                     "roof_flops_per_s": 5e11}})
    assert infer.unit == "samples/s" and infer.latency_ms == {"mean": 2.5, "p99": 4.0}
    assert infer.profile is not None and infer.profile.coverage == 0.9
    assert infer.profile.tool["name"] == "torch.profiler" and infer.profile.why_not is None
    assert infer.roofline is not None and infer.roofline.roof_flops_per_s == 5e11
    assert (infer.roofline.peak_flops_per_s, infer.roofline.bandwidth_bytes_per_s) == (1e12, 5e10)
    failed = codec.read_result({"status": "ok", "profile": {"error": "no profiler here"},
                                "memory": "n/a", "latency_ms": [1]})
    assert failed.profile is not None and failed.profile.why_not == "no profiler here"
    assert failed.peak_host_bytes is None and failed.latency_ms == {}


@pytest.mark.parallel
def test_the_report_tables_fields_are_typed():
    # what the report's tables and its CSV read: global batch, arithmetic, warnings, a sweep's
    # fallback, the tune configuration and the host facts, from a fixture and from a row that
    # has each; a malformed block reads as absent
    current = codec.read_result(json.loads((FIXTURES / "6eb7158-current.json").read_text()))
    assert current.global_batch == 128 and current.warnings == ()
    assert current.flops is not None
    assert (current.flops.per_sample, current.flops.achieved_per_s, current.flops.mfu) == (
        24600000000.0, 147600000000000.0, 0.0527)
    assert current.fallback_from_batch_size is None and current.config_which is None
    assert current.env["hostname"] and "gpus" in current.env
    tuned = codec.read_result({"status": "ok", "warnings": ["loss did not move"],
                               "fallback": {"from_batch_size": 256},
                               "config": {"from": "tune", "which": "best", "study": 3}})
    assert tuned.warnings == ("loss did not move",) and tuned.fallback_from_batch_size == 256
    assert (tuned.config_which, tuned.config_study) == ("best", 3)
    assert tuned.flops is None and tuned.global_batch is None and tuned.env == {}
    odd = codec.read_result({"flops": [1], "fallback": "yes", "config": {"which": ""},
                             "warnings": "one", "env": None, "global_batch": "8"})
    assert odd.flops is None and odd.fallback_from_batch_size is None
    assert odd.config_which is None and odd.warnings == () and odd.global_batch is None
