"""Why A is faster than B (issue 27): the attribution of operators to categories, the findings'
rules on constructed profiles, the roofline, `dlperf explain` of two real torch results
(fp32 against amp-bf16) and of one stored run, and its refusals of bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import CUT_RESNET50_FLAGS, dlperf, dlperf_main
from dlperf.explain import findings, roofline
from dlperf.explain.diff import differ
from dlperf.spec import Case
from dlperf.worker import profile
from dlperf.worker.profile import CATEGORIES, UNATTRIBUTED, Event

TABLE = profile.rules([
    (r"^step$", "optimizer", profile.ENCLOSES),
    (r"^empty$", None),
    (r"conv", "convolution"),
    (r"mm", "matmul"),
    (r"relu", "elementwise"),
])


@pytest.mark.parallel  # measures nothing
def test_the_innermost_operator_owns_its_time_and_the_rest_is_unattributed():
    events = [Event("conv2d", 1, 0.0, 0.5), Event("mkldnn_conv", 1, 0.1, 0.3),
              Event("relu", 1, 0.5, 0.1), Event("empty", 1, 0.7, 0.1)]
    out = profile.attribute(events, TABLE, steps=1, step_s=1.0)
    cats = out["categories"]
    assert cats["convolution"] == pytest.approx(0.5)  # the outer conv2d and the inner one
    assert cats["elementwise"] == pytest.approx(0.1)
    assert cats[UNATTRIBUTED] == pytest.approx(0.4)  # 0.6-1.0 ("empty" alone owns nothing)
    assert sum(cats.values()) == pytest.approx(1.0)
    assert out["coverage"] == pytest.approx(0.6)
    assert out["top_ops"][0]["name"] == "mkldnn_conv" and out["unmapped"] == []


@pytest.mark.parallel  # measures nothing
def test_an_enclosing_range_claims_its_children_and_concurrent_threads_share():
    events = [Event("step", 1, 0.0, 0.4), Event("relu", 1, 0.1, 0.2),  # relu inside the update
              Event("mm", 2, 0.2, 0.4), Event("conv", 3, 0.2, 0.4),  # two threads at once
              Event("mystery_op", 1, 0.8, 0.2)]
    out = profile.attribute(events, TABLE, steps=2, step_s=0.5)
    cats = out["categories"]
    # 0.0-0.2 the update alone; 0.2-0.4 three ops share; 0.4-0.6 two share
    assert cats["optimizer"] == pytest.approx((0.2 + 0.2 / 3) / 2)
    assert cats["matmul"] == pytest.approx((0.2 / 3 + 0.1) / 2)
    assert cats["convolution"] == pytest.approx(cats["matmul"])
    assert cats["elementwise"] == 0
    assert cats["other"] == pytest.approx(0.1)
    assert cats[UNATTRIBUTED] == pytest.approx(0.1)  # 0.6-0.8 nothing ran
    assert sum(cats.values()) == pytest.approx(0.5)
    assert out["unmapped"] == [{"name": "mystery_op", "s_per_step": pytest.approx(0.1)}]
    # operators that own time, per step: the relu inside the update owns none
    assert out["counts"]["optimizer"] == 0.5 and out["counts"]["elementwise"] == 0


class _Workload:
    """A stand-in for a backend's workload: the profiled-step driver is what is tested."""

    def __init__(self, profiler: Any) -> None:
        self._profiler = profiler
        self.steps = 0

    def profiler(self) -> Any:
        if isinstance(self._profiler, Exception):
            raise self._profiler
        return self._profiler

    def step(self) -> None:
        self.steps += 1

    def sync(self) -> None:
        pass


class _Broken(profile.Profiler):
    tool = {"name": "broken", "version": "0"}

    def start(self) -> None:
        pass

    def stop(self) -> list[Event]:
        raise RuntimeError("the profiler's own bug")


@pytest.mark.parallel  # measures nothing
def test_a_profiler_that_fails_or_is_missing_is_recorded_never_raised():
    assert profile.profile(_Workload(_Broken()), 2, 0.1, None) == {
        "error": "RuntimeError: the profiler's own bug", "tool": {"name": "broken",
                                                                  "version": "0"}}
    why = profile.ProfileUnavailable("no operators on this device")
    assert profile.profile(_Workload(why), 2, 0.1, None) == {
        "unavailable": "no operators on this device"}


def block(step_ms: float, **ms: float) -> dict[str, Any]:
    """A constructed profile: categories in ms/step, the rest of the step unattributed."""
    cats = {name: ms.get(name, 0.0) / 1e3 for name in CATEGORIES}
    cats[UNATTRIBUTED] = step_ms / 1e3 - sum(cats.values())
    return {"categories": cats, "step_s": step_ms / 1e3, "measured_step_s": step_ms / 1e3,
            "overhead": 0.0, "top_ops": [], "unmapped": [], "tool": {"name": "t",
                                                                     "version": "1"}}


def result(profile_block: dict[str, Any], precision: str = "fp32", cv: float = 0.01,
           devices: int = 1, compiled: bool = False, flags: tuple[str, ...] = ()
           ) -> dict[str, Any]:
    return {"label": f"fw resnet50 {precision}", "status": "ok", "profile": profile_block,
            "case": {"framework": "fw", "model": "resnet50", "precision": precision,
                     "batch_size": 8, "devices": devices, "nnodes": 1, "compile": compiled},
            "throughput": {"median": 100.0, "cv": cv, "ci95": [99.0, 101.0], "n": 3},
            "model": {"params": 25557032}, "device": "cpu",
            "env": {"cpu": {"flags": list(flags)}}}


def rules_of(found: list[findings.Finding]) -> list[str]:
    return [f.rule for f in found]


@pytest.mark.parallel  # measures nothing
def test_each_rule_fires_where_its_share_is_large_and_not_below():
    assert rules_of(findings.of_result(result(block(100, convolution=90)))) == []
    assert rules_of(findings.of_result(result(block(100, convolution=60)))) == ["unattributed"]
    dispatch = findings.of_result(result(block(100, convolution=60)))[0]
    assert "40%" in dispatch.text and "40.0 ms/step" in dispatch.text
    assert "batch 8" in dispatch.text and dispatch.figures["share"] == pytest.approx(0.4)
    compiled = findings.of_result(result(block(100, convolution=60), compiled=True))[0]
    assert "inside compiled code" in compiled.text
    assert rules_of(findings.of_result(result(block(100, convolution=70, layout=22)))) == [
        "layout"]
    assert rules_of(findings.of_result(result(block(100, convolution=70, layout=14)))) == []
    # collective communication is a finding of a job of several processes only
    assert rules_of(findings.of_result(result(block(100, convolution=60, communication=35),
                                              devices=2))) == ["communication"]
    assert rules_of(findings.of_result(result(block(100, convolution=60, communication=35)))) \
        == []
    assert rules_of(findings.of_result(result(block(100, convolution=70, optimizer=25)))) == [
        "optimizer"]
    assert rules_of(findings.of_result(result(block(100, convolution=80,
                                                    input_pipeline=12)))) == ["input"]
    slowed = block(100, convolution=90)
    slowed["measured_step_s"], slowed["overhead"] = 0.08, 0.25
    assert rules_of(findings.of_result(result(slowed))) == ["overhead"]


@pytest.mark.parallel  # measures nothing
def test_a_noisy_result_says_so_in_every_finding():
    found = findings.of_result(result(block(100, convolution=60), cv=0.2))
    assert found and all("flagged noisy (CV 20.0%)" in f.text for f in found)


@pytest.mark.parallel  # measures nothing
def test_the_pair_rule_names_the_categories_that_moved_and_the_cpu():
    fp32 = result(block(100, convolution=70, layout=2))
    bf16 = result(block(119, convolution=101, layout=11), "amp-bf16",
                  flags=("avx2", "avx512f", "avx512_bf16"))
    (found,) = findings.of_pair(fp32, bf16)
    assert found.text.startswith("amp-bf16 is 0.84x fp32's speed: convolution took 31.0 "
                                 "ms/step more (163% of the difference)")
    assert "AVX-512 BF16 but no AMX, and its amp-bf16 convolutions and GEMMs ran 31.0 ms/step " \
           "slower" in found.text and "9.0 ms/step more in casts" in found.text
    faster = result(block(80, convolution=48, layout=4), "amp-bf16", flags=("avx512_bf16",))
    text = findings.of_pair(fp32, faster)[0].text
    assert "1.25x" in text and "convolution took 22.0 ms/step less (110% of the difference)" \
        in text and "ran 22.0 ms/step faster" in text
    assert "layout took 2.0 ms/step more (offsetting 10% of it)" in text
    amx = result(block(80, convolution=55), "amp-bf16", flags=("amx_bf16", "avx512_bf16"))
    assert "AMX" in findings.of_pair(fp32, amx)[0].text
    same = findings.of_pair(fp32, result(block(100.5, convolution=70.5)))
    assert rules_of(same) == ["same"]
    diff = differ(fp32["profile"], bf16["profile"])
    assert diff.rows[0].category == "convolution" and diff.share(diff.rows[0]) == \
        pytest.approx(31 / 19)


@pytest.mark.parallel  # measures nothing
def test_the_roofline_places_a_step_under_the_machine_s_roof(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_CACHE", str(tmp_path))
    case = Case("torch", "resnet50", 8, knobs={"image_size": 64})
    moved = roofline.bytes_per_step(case)
    spec_params = 25557032
    assert moved > spec_params * 8 * 4  # parameters' passes plus activations
    flops = {"per_sample": 1e9, "achieved_per_s": 2e10, "peak_per_s": 1e11}
    unprobed = roofline.block(case, flops, {}, 20.0)
    assert unprobed["bound"] is None and "not probed" in unprobed["bandwidth_source"]
    assert unprobed["intensity"] == pytest.approx(8e9 / moved)
    assert roofline.block(case, {"per_sample": None}, {}, None) is None  # no model's FLOPs
    # a probed machine whose probe is below what the step achieved: no verdict, and why
    cached = {"flops_per_s": {"float32": 1e10}, "host_copy_bytes_per_s": 1e10}
    monkeypatch.setattr(roofline.peak, "cached", lambda env: cached)
    busy = roofline.block(case, {**flops, "peak_per_s": 1e10}, {"cpu": {"model": "x"}}, 20.0)
    assert busy["of_roof"] is None and "no ceiling" in busy["roof_note"]
    found = findings.of_result({"label": "x", "roofline": busy, "case": {}, "profile": {}})
    assert [f.text for f in found] == [f"x: no roofline verdict: {busy['roof_note']}"]
    fine = roofline.block(case, {**flops, "peak_per_s": 1e12}, {"cpu": {"model": "x"}}, 20.0)
    assert fine["bound"] == "memory" and 0 < fine["of_roof"] < 1  # 1e10 B/s x intensity
    inference = Case("torch", "resnet50", 8, task="infer", knobs={"image_size": 64})
    assert roofline.bytes_per_step(inference) < moved / 4  # no gradients, no optimizer state


@pytest.fixture(scope="module")
def two_profiled(tmp_path_factory) -> tuple[Path, Path, Path]:
    """torch ResNet-50 (tiny, cut to a bottleneck a stage: conftest's CUT_RESNET50) fp32 and
    amp-bf16, measured and profiled for real: what is checked is where explain reads and shows
    the profiles, whatever the network's depth."""
    folder = tmp_path_factory.mktemp("explain")
    db = folder / "r.db"
    paths = []
    for precision in ("fp32", "amp-bf16"):
        out = folder / f"{precision}.json"
        dlperf("run", "--framework", "torch", "--model", "resnet50", "--image-size", "32",
               *CUT_RESNET50_FLAGS, "--batch-size", "2", "--warmup-steps", "1", "--steps", "2",
               "--repeats", "1", "--precision", precision, "--profile", "--profile-steps", "2",
               "--db", str(db), "--json", str(out), check=True)
        paths.append(out)
    return db, paths[0], paths[1]


def test_run_profile_keeps_the_trace_beside_the_database(two_profiled):
    db, fp32, _ = two_profiled
    stored = json.loads(fp32.read_text())
    trace = Path(stored["profile"]["trace"]["path"])
    assert trace.parent == db.parent / "r-traces" and trace.is_file()
    assert stored["case"]["profile_steps"] == 2
    assert stored["profile"]["repeats_step_s"] == [stored["profile"]["step_s"]]
    assert stored["roofline"]["intensity"] > 0


def test_explain_two_real_results_prints_every_category_and_a_finding(two_profiled):
    _, fp32, bf16 = two_profiled
    proc = dlperf_main("explain", str(fp32), str(bf16), check=True)
    for name in CATEGORIES + (UNATTRIBUTED,):
        assert f"│ {name} " in proc.stdout, name
    assert "findings:" in proc.stdout
    # which finding depends on how fast this CPU runs bf16 (on some, as fast as fp32): either
    # the difference with its ratio, or the statement that the two step in the same time
    assert ("amp-bf16 is " in proc.stdout and "x fp32's speed:" in proc.stdout) or \
        "amp-bf16 and fp32 step in the same time" in proc.stdout, proc.stdout


def test_explain_one_stored_run(two_profiled):
    db, _, _ = two_profiled
    proc = dlperf_main("explain", "--db", str(db), "--case", "2", check=True)
    assert "where the time goes: torch resnet50 train bs2" in proc.stdout
    assert "amp-bf16" in proc.stdout
    assert "top operators" in proc.stdout and "roofline:" in proc.stdout


def test_explain_refuses_bad_input_in_one_line(two_profiled, tmp_path):
    db, fp32, _ = two_profiled
    stored = json.loads(fp32.read_text())
    bert = dict(stored, case={**stored["case"], "model": "bert-base"})
    (tmp_path / "bert.json").write_text(json.dumps(bert))
    bare = dict(stored, profile=None)
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    (tmp_path / "corrupt.json").write_text("{not json")
    (tmp_path / "foreign.json").write_text(json.dumps({"hello": "world"}))
    cases = {
        (str(fp32), str(tmp_path / "bert.json")): "explain compares results of one model",
        (str(tmp_path / "bare.json"),): "has no profile; measure it with",
        (str(tmp_path / "corrupt.json"),): "corrupt.json",
        (str(tmp_path / "foreign.json"),): "foreign.json",
        ("--db", str(db), "--case", "99"): "no finished run with id 99",
        (str(fp32), str(fp32), str(fp32)): "name one result",
    }
    for args, expected in cases.items():
        proc = dlperf_main("explain", *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (
            args, proc.stderr)


def test_the_report_shows_where_the_time_goes_the_findings_and_the_roofline(two_profiled,
                                                                              tmp_path):
    db, _, _ = two_profiled
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    dlperf_main("report", "--db", str(db), "--format", "md", "-o", str(md), check=True)
    dlperf_main("report", "--db", str(db), "--format", "html", "-o", str(page), check=True)
    text = md.read_text()
    assert "Where the time goes (ms per profiled step)" in text and "| convolution |" in text
    assert "findings" in text and "- torch resnet50 train bs2 fp32: " in text
    html = page.read_text()
    assert "Where the time goes" in html and "<h3>Findings</h3>" in html
    # drawn: the machine is probed
    assert 'alt="resnet50 (image_size=32 max_blocks=1): Roofline"' in html
