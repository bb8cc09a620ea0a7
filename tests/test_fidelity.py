"""`make fidelity` (benchmarks/fidelity.py, fidelity_table.py) without measuring anything.

The interval and the table are checked on the pairs of a real `dlperf ab` of torch's hand loop
against `dlperf run`; the script itself end to end where every framework asked is not installed
(listed as skipped, with the reason: not an error); bad input is one line and exit 2 before
anything runs; the Makefile passes its variables through. A real measurement takes minutes per
framework: that is `make fidelity`'s job, not the test suite's.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "fidelity.py"
sys.path.insert(0, str(SCRIPT.parent))
import fidelity_table as table  # noqa: E402 - benchmarks/ is not a package

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


def test_table_as_markdown_and_json_shows_only_what_was_measured(tmp_path):
    measured = row({"same-recipe": table.loop_entry(LOOP, {**REAL, "b": {**REAL["b"],
                                                                          "devices": ["cpu"]}})})
    skipped = {"framework": "mxnet", "status": "skipped",
               "reason": "not installed (`dlperf envs install mxnet`)",
               "case": {"image_size": 64, "batch_size": 8}, "loops": {}, "host": None}
    doc = table.document([measured, skipped], {"pairs": 4})
    assert json.loads(json.dumps(doc)) == doc  # plain JSON
    text = table.markdown(doc)
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("| framework"))
    assert head == ("| framework | shape | device | dlperf samples/s | hand loop samples/s | "
                    "ratio vs hand loop | 95 % interval | pairs | host state |")
    assert "independent" not in text  # no column for a loop kind nobody measured
    entry = measured["loops"]["same-recipe"]
    torch_row = next(line for line in lines if line.startswith("| torch"))
    assert (f"| {entry['ratio']:.3f} | {entry['ci95'][0]:.3f}–{entry['ci95'][1]:.3f} | 4 |"
            in torch_row)
    assert torch_row.startswith("| torch | image 64, batch 8 | cpu | 14.36 | 27.57 |")
    assert torch_row.endswith("| quiet: load 0.31→1.85, idle 97%→95%, others 1% |")
    assert "| mxnet | image 64, batch 8 | — | skipped | — | — | — | — | — |" in lines
    assert "- mxnet skipped: not installed (`dlperf envs install mxnet`)" in lines
    # a second kind of reference loop (issue 32) gets its own column group when measured
    both = row({"same-recipe": entry, "independent": entry})
    assert table.header([both]).count("95 % interval") == 2
    assert "ratio vs independent loop" in table.header([both])


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
                  "FIDELITY_BATCH=2", "FIDELITY_JSON=/tmp/x.json").endswith(
        "benchmarks/fidelity.py --pairs 2 --framework torch --framework jax --image-size 32 "
        "--batch-size 2 --json /tmp/x.json --markdown fidelity.md")
