"""`make fidelity` (benchmarks/fidelity.py, fidelity_table.py) without measuring anything.

The interval and the table are checked on the pairs of real `dlperf ab` runs of torch's loops
(same-recipe and independent) against `dlperf run`; the `dlperf ab` commands each kind builds
(the dlperf mode each independent loop is compared in, the minimum window on every side, the
environment's variables on the loop's side); the script itself end to end where every framework
asked is not installed (listed as skipped, with the reason: not an error); bad input is one line
and exit 2 before anything runs; the Makefile passes its variables through; the same-recipe
loops' --min-seconds (one real run of torch's). A real measurement takes minutes per framework:
that is `make fidelity`'s job, not the test suite's.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "fidelity.py"
sys.path.insert(0, str(SCRIPT.parent))
import fidelity as runner  # noqa: E402 - benchmarks/ is not a package
import fidelity_table as table  # noqa: E402

pytestmark = pytest.mark.parallel

# `python benchmarks/fidelity.py --framework torch --image-size 64 --batch-size 8
# --warmup-steps 8 --steps 20 --pairs 4`: its `dlperf ab --json` summary (A the hand loop, B
# dlperf run), measured on the project's 2-core machine while another test run kept it busy, so
# the pairs scatter widely: a good case for an interval
REAL = {"pairs": 4, "pairs_asked": 4, "threshold": 0.02,
        "a": {"median": 27.572068347745702,
              "values": [3.8708088799433993, 51.27332781554801, 72.75610220047781,
                         2.321250807896598]},
        "b": {"median": 14.358937360982882,
              "values": [26.31269896929334, 63.224149102916016, 2.3598927123292035,
                         2.405175752672425]},
        "ratio": 0.5207783899228899, "ci95": [0.03243566712557762, 6.797726207985266],
        "verdict": "same",
        "method": "ratio of medians B/A; percentile bootstrap over pairs (10000 resamples, seed 0)"}
T_975_3DF = 3.182446305  # Student t, 97.5th percentile, 3 degrees of freedom (tables)
LOOP = "benchmarks/handwritten/torch_resnet50.py"
INDEPENDENT_LOOP = "benchmarks/independent/torch_resnet50.py"
# the independent kind's `dlperf ab` summary of `python benchmarks/fidelity.py --framework torch
# --image-size 32 --batch-size 2 --pairs 2 --warmup-steps 2 --steps 3` (A the independent loop,
# B dlperf run), on the project's 2-core machine while other test runs kept it busy
REAL_INDEPENDENT = {
    "pairs": 2, "pairs_asked": 2,
    "a": {"median": 4.573321920629353, "values": [8.590326000092665, 0.5563178411660418]},
    "b": {"median": 3.1714353238037423, "values": [5.652427640279747, 0.6904430073277373],
          "devices": ["cpu"]},
    "ratio": 0.6934642648920084, "ci95": [0.6579992005214672, 1.2410944899422411],
    "verdict": "same",
    "method": "ratio of medians B/A; percentile bootstrap over pairs (10000 resamples, seed 0)"}


def row(loops: dict, status: str = "measured", reason: str | None = None) -> dict:
    return {"framework": "torch", "status": status, "reason": reason,
            "case": {"image_size": 64, "batch_size": 8}, "loops": loops,
            "host": {"before": {"load1": 0.31, "idle": 0.97},
                     "after": {"load1": 1.85, "idle": 0.95},
                     "others": {"other_cpu_share": 0.012}}}


def test_ratio_and_interval_over_the_real_pairs():
    entry = table.loop_entry(LOOP, REAL)
    ratios = [b / a for a, b in zip(REAL["a"]["values"], REAL["b"]["values"])]
    assert entry["pair_ratios"] == pytest.approx(ratios)
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    assert entry["ratio"] == pytest.approx(math.exp(mean))
    half = T_975_3DF * sd / 2  # sqrt(4 pairs)
    assert entry["ci95"] == pytest.approx([math.exp(mean - half), math.exp(mean + half)])
    assert entry["ci95"][0] < entry["ratio"] < entry["ci95"][1]
    assert (entry["dlperf"], entry["loop_rate"]) == (REAL["b"]["median"], REAL["a"]["median"])
    assert entry["ab"]["ratio"] == REAL["ratio"]  # dlperf ab's own figure kept beside it
    # the device each side ran on, where `dlperf ab` names it
    assert entry["device"] is None
    named = {**REAL, "b": {**REAL["b"], "devices": ["cpu"]}}
    assert table.loop_entry(LOOP, named)["device"] == "cpu"


def test_interval_edges():
    assert table.ratio_interval([]) == (None, None)
    assert table.ratio_interval([1.02]) == (pytest.approx(1.02), None)  # one pair: no spread
    assert table.ratio_interval([0.98, 0.98, 0.98]) == (pytest.approx(0.98),
                                                        (pytest.approx(0.98),) * 2)
    with pytest.raises(ValueError, match="pairs: 2 loop values against 1 dlperf values"):
        table.pair_ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        table.pair_ratios([1.0, 0.0], [1.0, 1.0])


def test_table_as_markdown_and_json_one_kind(tmp_path):
    measured = row({"same-recipe": table.loop_entry(LOOP, {**REAL, "b": {**REAL["b"],
                                                                          "devices": ["cpu"]}})})
    measured["asked"] = ["same-recipe"]
    skipped = {"framework": "mxnet", "status": "skipped",
               "reason": "not installed (`dlperf envs install mxnet`)", "asked": ["same-recipe"],
               "case": {"image_size": 64, "batch_size": 8}, "loops": {}, "host": None}
    doc = table.document([measured, skipped], {"pairs": 4})
    assert json.loads(json.dumps(doc)) == doc  # plain JSON
    text = table.markdown(doc)
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("| framework"))
    assert head == ("| framework | shape | device | dlperf samples/s (same-recipe) | "
                    "same-recipe loop samples/s | ratio vs same-recipe loop | 95 % interval | "
                    "pairs | host state |")
    assert "independent loop" not in head  # no column group for a kind nobody asked
    entry = measured["loops"]["same-recipe"]
    torch_row = next(line for line in lines if line.startswith("| torch"))
    assert (f"| {entry['ratio']:.3f} | {entry['ci95'][0]:.3f}–{entry['ci95'][1]:.3f} | 4 |"
            in torch_row)
    assert torch_row.startswith("| torch | image 64, batch 8 | cpu | 14.36 | 27.57 |")
    assert torch_row.endswith("| quiet: load 0.31→1.85, idle 97%→95%, others 1% |")
    assert "| mxnet | image 64, batch 8 | — | skipped | — | — | — | — | — |" in lines
    assert "- mxnet skipped: not installed (`dlperf envs install mxnet`)" in lines


def test_table_with_both_kinds_from_real_summaries():
    same = table.loop_entry(LOOP, {**REAL, "b": {**REAL["b"], "devices": ["cpu"]}})
    independent = {**table.loop_entry(INDEPENDENT_LOOP, REAL_INDEPENDENT), "compile": False,
                   "mode": "eager", "differs": "its weight decay, 4 % of a step"}
    both = {**row({"same-recipe": same, "independent": independent}),
            "asked": ["same-recipe", "independent"]}
    # caffe2: only the independent kind (its trainer is Caffe2's own); a failed ab keeps the
    # pairs it completed and says so
    failed = {**table.loop_entry("benchmarks/handwritten/caffe2_resnet50.py",
                                 {**REAL_INDEPENDENT, "pairs_asked": 4}),
              "compile": False, "mode": "Caffe2's imagenet_trainer.py",
              "failed": "loop side, crash: boom"}
    caffe2 = {"framework": "caffe2", "status": "failed", "reason": "independent: loop side, "
              "crash: boom", "asked": ["same-recipe", "independent"],
              "case": {"image_size": 64, "batch_size": 8}, "loops": {"independent": failed},
              "missing": {"same-recipe": "no same-recipe loop: Caffe2's own trainer"},
              "host": None}
    doc = table.document([both, caffe2], {"pairs": 2, "loops": "same-recipe,independent"})
    assert json.loads(json.dumps(doc)) == doc
    lines = table.markdown(doc).splitlines()
    head = next(line for line in lines if line.startswith("| framework")).split(" | ")
    assert head.count("95 % interval") == 2 and head.count("pairs") == 2
    assert head[3:13] == ["dlperf samples/s (same-recipe)", "same-recipe loop samples/s",
                          "ratio vs same-recipe loop", "95 % interval", "pairs",
                          "dlperf samples/s (independent)", "independent loop samples/s",
                          "ratio vs independent loop", "95 % interval", "pairs"]
    torch_row = next(line for line in lines if line.startswith("| torch")).split(" | ")
    assert len(torch_row) == len(head)
    ratios = [b / a for a, b in zip(REAL_INDEPENDENT["a"]["values"],
                                    REAL_INDEPENDENT["b"]["values"])]
    assert independent["ratio"] == pytest.approx(math.exp(sum(map(math.log, ratios)) / 2))
    lo, hi = independent["ci95"]
    assert torch_row[3:13] == [
        f"{same['dlperf']:,.2f}", f"{same['loop_rate']:,.2f}", f"{same['ratio']:.3f}",
        f"{same['ci95'][0]:.3f}–{same['ci95'][1]:.3f}", "4",
        f"{independent['dlperf']:,.2f}", f"{independent['loop_rate']:,.2f}",
        table._ratio(independent["ratio"]), f"{table._ratio(lo)}–{table._ratio(hi)}", "2"]
    caffe2_row = next(line for line in lines if line.startswith("| caffe2")).split(" | ")
    assert caffe2_row[3:8] == ["—"] * 5  # no same-recipe loop
    assert caffe2_row[12] == "2 of 4, failed"
    assert "- caffe2 failed: independent: loop side, crash: boom" in lines
    assert "- caffe2, same-recipe: no same-recipe loop: Caffe2's own trainer" in lines
    assert ("- independent loops run their framework's default mode, dlperf the same: torch "
            "eager (dlperf --no-compile); caffe2 Caffe2's imagenet_trainer.py (dlperf "
            "--no-compile)") in lines
    # a difference kept on purpose is a footnote under the table, with its cost
    assert ("- torch differs from its independent loop on purpose: its weight decay, 4 % of a "
            "step") in lines
    assert [line for line in lines if "on purpose" in line] == [
        "- torch differs from its independent loop on purpose: its weight decay, 4 % of a step"]
    assert "weight decay" in runner.INDEPENDENT["tensorflow"].differs
    # the terminal table has the same cells
    assert table.cells(both, table.kinds_measured([both])) == [
        c.strip() for c in next(line for line in lines
                                if line.startswith("| torch")).strip("| ").split(" | ")]


def commands(monkeypatch, *argv: str) -> dict[tuple[str, str], list[str]]:
    """The `dlperf ab` command of every (framework, kind) the arguments ask for, built with a
    fake interpreter per environment and OneFlow's declared library path."""
    monkeypatch.setattr(runner.envs, "interpreter", lambda name: f"/envs/{name}/bin/python")
    monkeypatch.setattr(runner.envs, "worker_variables", lambda name, python: (
        {"LD_LIBRARY_PATH": f"/envs/{name}/nvidia/lib"} if name == "oneflow" else {}))
    monkeypatch.delenv("GLOG_minloglevel", raising=False)
    args = runner.parse(list(argv))
    return {(fw, kind): runner.ab_command(fw, kind, args, Path("/tmp/ab.json"))
            for fw in runner.FRAMEWORKS for kind in args.loops
            if not runner.unavailable(fw, kind, args)}


def sides(command: list[str]) -> tuple[list[str], list[str]]:
    first = command.index("--")
    second = command.index("--", command.index("--", first + 1) + 1)
    return command[first + 1:second], command[second + 1:]


def test_each_kind_runs_its_loop_against_dlperf_in_the_same_mode(monkeypatch):
    built = commands(monkeypatch, "--min-seconds", "2.5", "--image-size", "32")
    assert ("caffe2", "same-recipe") not in built and ("caffe2", "independent") in built
    assert len(built) == 8 + 9
    for (fw, kind), command in built.items():
        loop, harness = sides(command)
        assert harness[:3] == ["run", "--framework", fw]
        assert harness[harness.index("--min-duration") + 1] == "2.5"
        folder = "independent" if kind == "independent" and fw != "caffe2" else "handwritten"
        script = next(part for part in loop if part.endswith(".py"))
        assert Path(script).parent.name == folder and Path(script).is_file()
        assert loop[loop.index("--min-seconds") + 1] == "2.5"
        compiled = "--compile" in harness
        assert compiled != ("--no-compile" in harness)
        if kind == "independent":
            # jax is jitted and MXNet hybridized in their independent loops; the rest run the
            # framework's default (eager, tf.function graph, Session, dygraph, PyNative)
            assert compiled == (fw in ("jax", "mxnet")), fw
            if fw != "caffe2":
                assert loop[loop.index("--image-size") + 1] == "32"
                assert '"samples_per_s"' in loop[loop.index("--metric") + 1]
        else:
            assert compiled == (fw == "jax"), fw
        assert ("--option" in harness) == (fw == "caffe2")
        if fw == "caffe2":
            assert harness[harness.index("--option") + 1] == "engine=cpu"
        python = loop.index(f"/envs/{fw}/bin/python")
        if fw == "oneflow":  # the registry's env: goes to the loop as to dlperf's worker
            assert loop[python - 3:python] == ["env", "GLOG_minloglevel=2",
                                               "LD_LIBRARY_PATH=/envs/oneflow/nvidia/lib"]
    # --compile puts both sides of both kinds in the compiled mode; no --min-seconds: the loops'
    # commands as before (the same-recipe ones without the option)
    built = commands(monkeypatch, "--compile", "--framework", "torch")
    loop, harness = sides(built[("torch", "same-recipe")])
    assert loop[-2:] == ["fp32", "1"] and "--compile" in harness
    assert "--min-duration" not in harness
    loop, harness = sides(built[("torch", "independent")])
    assert "--compile" in harness and loop[-3:] == ["--min-seconds", "0", "--compile"]
    # --no-compile: MXNet's independent loop imperative too; jax has no such mode
    built = commands(monkeypatch, "--no-compile", "--framework", "mxnet")
    loop, harness = sides(built[("mxnet", "independent")])
    assert "--no-compile" in harness and loop[-1] == "--no-compile"
    assert "no uncompiled mode" in runner.unavailable(
        "jax", "independent", runner.parse(["--no-compile"]))
    assert "no compiled mode" in runner.unavailable(
        "caffe2", "independent", runner.parse(["--compile"]))
    # the independent loops are fp32 only
    args = runner.parse(["--precision", "amp-bf16"])
    assert "fp32 only" in runner.unavailable("torch", "independent", args)
    assert runner.unavailable("torch", "same-recipe", args) is None


def test_same_recipe_loops_take_a_minimum_window():
    for path in sorted((ROOT / "benchmarks" / "handwritten").glob("*_resnet50.py")):
        text = path.read_text()
        assert 'if "--min-seconds" in sys.argv:' in text, path.name
        if path.name != "caffe2_resnet50.py":
            assert "batch * done / elapsed" in text and "batch * steps" not in text, path.name
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "handwritten" /
                                               "torch_resnet50.py"),
                           "2", "32", "1", "1", "fp32", "0", "--min-seconds", "0.5"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1",
                               "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["throughput"] > 0


def fidelity(*args: str, envs_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "DLPERF_ENVS": str(envs_dir),
                                            "COLUMNS": "200"})


def test_frameworks_not_installed_are_listed_as_skipped(tmp_path):
    out_json, out_md = tmp_path / "f.json", tmp_path / "f.md"
    done = fidelity("--framework", "mxnet", "--framework", "mindspore", "--json", str(out_json),
                    "--markdown", str(out_md), envs_dir=tmp_path / "no-envs")
    assert done.returncode == 0, done.stderr
    doc = json.loads(out_json.read_text())
    assert [(r["framework"], r["status"], r["reason"]) for r in doc["rows"]] == [
        ("mxnet", "skipped", "not installed (`dlperf envs install mxnet`)"),
        ("mindspore", "skipped", "not installed (`dlperf envs install mindspore`)")]
    assert doc["settings"]["loops"] == "same-recipe,independent"
    # MindSpore's own default shape
    assert [(r["case"]["image_size"], r["case"]["batch_size"]) for r in doc["rows"]] == [
        (64, 8), (32, 4)]
    assert doc["settings"]["pairs"] == 4 and doc["method"] == table.METHOD
    assert "mindspore skipped: not installed" in done.stdout
    assert out_md.read_text() == table.markdown(doc)


@pytest.mark.parametrize("args, line", [
    (["--pairs", "1"], "--pairs: 1 must be between 2 and 1000"),
    (["--image-size", "16"], "--image-size: 16 must be at least 32"),
    (["--steps", "0"], "--steps: 0 must be at least 1"),
    (["--min-seconds", "-1"], "--min-seconds: -1 must be at least 0"),
    (["--loops", "same-recipe,indep"], "--loops: 'indep' is not a loop kind; give a "
                                       "comma-separated subset of same-recipe,independent"),
    (["--framework", "caffe"], "argument --framework: invalid choice: 'caffe' (choose from "
                               "'torch', 'tensorflow', 'tensorflow1', 'jax', 'paddle', 'mxnet', "
                               "'mindspore', 'oneflow', 'caffe2')"),
    (["--json", "/nonexistent-dir/f.json"],
     "--json: directory /nonexistent-dir does not exist; create it first"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, line):
    done = fidelity(*args, "--markdown", str(tmp_path / "f.md"), envs_dir=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"fidelity.py: error: {line}"]
    assert done.stdout == "" and not (tmp_path / "f.md").exists()


def make_n(*variables: str) -> str:
    done = subprocess.run(["make", "--no-print-directory", "-n", "-C", str(ROOT),
                           "-o", ".venv/.installed", *variables, "fidelity"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.replace("\\\n", " ").split())


def test_make_fidelity_passes_its_variables():
    assert make_n().endswith("benchmarks/fidelity.py --pairs 4 --json fidelity.json "
                             "--markdown fidelity.md")
    assert make_n("FIDELITY_PAIRS=2", "FIDELITY_FRAMEWORKS=torch jax", "FIDELITY_IMAGE=32",
                  "FIDELITY_BATCH=2", "FIDELITY_JSON=/tmp/x.json", "FIDELITY_LOOPS=independent",
                  "FIDELITY_MIN_SECONDS=5").endswith(
        "benchmarks/fidelity.py --pairs 2 --framework torch --framework jax --image-size 32 "
        "--batch-size 2 --loops independent --min-seconds 5 --json /tmp/x.json "
        "--markdown fidelity.md")
