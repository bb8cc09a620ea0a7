"""Numbers that are not numbers: NaN, infinity and out-of-range values stop at validation (one
line naming the flag or field, exit 2), never become a timeout, a rate or an ok throughput, and
never reach a JSON file, where they are not valid JSON."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from conftest import dlperf, dlperf_main, own_lock
from dlperf.outputs import write_json
from dlperf.spec import Case, SpecError

LOCK = own_lock("test_nonfinite")
RUN = ["run", "--framework", "torch", "--model", "resnet50"]
INFER = ["infer", "--framework", "torch", "--model", "resnet50"]
SERVER = [*INFER, "--scenario", "server"]
EXTERNAL = ["external", "--name", "x", "--metric", r"r: (\S+)"]


def refused(*args: str, names: str, tmp_path: Path, run=dlperf) -> None:
    db = tmp_path / "never.db"
    proc = run(*args, "--db", str(db), timeout=120, env=LOCK) if args[0] != "accuracy" \
        else run(*args, timeout=120, env=LOCK)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert names in lines[0], lines[0]
    assert not db.exists()


REFUSED_FLAGS = [
    ([*RUN, "--timeout", "nan"], "--timeout"),
    ([*RUN, "--timeout", "inf"], "--timeout"),
    ([*RUN, "--timeout", "-5"], "timeout_s"),
    ([*RUN, "--timeout", "1e12"], "timeout_s"),
    ([*RUN, "--rdzv-timeout", "nan"], "--rdzv-timeout"),
    ([*RUN, "--min-duration", "nan"], "--min-duration"),
    ([*RUN, "--min-duration", "-1"], "min_duration_s"),
    ([*RUN, "--require-quiet", "inf"], "--require-quiet"),
    ([*INFER, "--timeout", "nan"], "--timeout"),
    ([*INFER, "--timeout", "-5"], "timeout_s"),
    ([*INFER, "--min-duration", "inf"], "--min-duration"),
    ([*SERVER, "--target-latency-ms", "nan"], "--target-latency-ms"),
    ([*SERVER, "--target-latency-ms", "5", "--rate", "inf"], "--rate"),
    ([*EXTERNAL, "--timeout", "nan", "--", "true"], "--timeout"),
    ([*EXTERNAL, "--timeout", "-5", "--", "true"], "--timeout"),
    ([*EXTERNAL, "--step-regex", "s(1)", "--metric", "", "--samples-per-step", "nan", "--",
      "true"], "--samples-per-step"),
    (["accuracy", "--model", "resnet50", "--timeout", "-5"], "--timeout"),
    (["accuracy", "--model", "resnet50", "--timeout", "nan"], "--timeout"),
    (["compare", "a", "b", "--alpha", "nan"], "--alpha"),
    (["ab", "--threshold", "inf", "--", "run", "--", "run"], "--threshold"),
]


def first_of_each_command(cases: list) -> list:
    """Per case, how it runs: the first case of each command as a real process, the rest
    through dlperf's main in this process (validation only, refused before anything starts;
    test_fuzz_cli checks that both answer alike)."""
    seen: set[str] = set()
    runs = []
    for args, *_ in cases:
        runs.append(dlperf_main if args[0] in seen else dlperf)
        seen.add(args[0])
    return runs


@pytest.mark.parallel
@pytest.mark.parametrize("args,names,run", [
    (*case, run) for case, run in zip(REFUSED_FLAGS, first_of_each_command(REFUSED_FLAGS))])
def test_flag_is_refused(args, names, run, tmp_path):
    refused(*args, names=names, tmp_path=tmp_path, run=run)


@pytest.mark.parallel
@pytest.mark.parametrize("field,value", [
    ("timeout_s", math.nan), ("timeout_s", math.inf), ("timeout_s", -5.0),
    ("min_duration_s", math.nan), ("min_duration_s", math.inf), ("steps", math.nan),
])
def test_spec_fields_reject_nan_and_infinity(field, value):
    with pytest.raises(SpecError, match=field):
        Case(framework="torch", model="resnet50", batch_size=2, **{field: value})


@pytest.mark.parallel
@pytest.mark.parametrize("rate", [math.nan, math.inf, -1.0])
def test_server_rates_must_be_finite(rate):
    server = {"rate_qps": rate, "target_latency_ms": 5.0, "min_queries": 10}
    with pytest.raises(SpecError, match="server.rate_qps"):
        Case(framework="torch", model="resnet50", batch_size=1, task="infer",
             scenario="server", server=server)


@pytest.mark.parametrize("printed", ["nan", "inf", "-inf", "1e400"])
def test_a_printed_nan_rate_is_a_failure_not_a_throughput(printed, tmp_path):
    script = tmp_path / "rates.py"
    script.write_text("for v in ['100', %r, '200']:\n    print('r: ' + v, flush=True)\n" % printed)
    out = tmp_path / "e.json"
    proc = dlperf(*EXTERNAL, "--repeats", "1", "--db", str(tmp_path / "e.db"), "--json", str(out),
                  "--", sys.executable, str(script), timeout=120, env=LOCK)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(out.read_text())
    assert result["status"] == "crash" and result["throughput"]["median"] is None
    assert "not a finite number" in result["error"]


@pytest.mark.parallel
def test_json_files_never_hold_nan(tmp_path):
    out = tmp_path / "r.json"
    write_json(out, {"loss": {"last": [math.nan, 1.5]}, "x": math.inf})
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"loss": {"last": [None, 1.5]}, "x": None}


def _result(median, repeats=None, status="ok"):
    return {"case": {"framework": "f"}, "case_key": "k", "label": "l", "status": status,
            "throughput": {"median": median, "repeats": repeats or [median] * 3}}


BAD_ITEMS = [
    ("5", "item 0 is a number"),
    ("[]", "empty list"),
    ('[{"case": 1, "throughput": {}}]', "'case' must be an object"),
    (json.dumps(_result(1.0) | {"throughput": 7}), "'throughput' must be an object"),
    ('{"case": {}, "status": "ok", "throughput": {"median": NaN}}', "throughput.median nan"),
    (json.dumps(_result(0.0)), "throughput.median 0.0"),
    (json.dumps(_result(1e308)), "throughput.median 1e+308"),
    (json.dumps(_result(5.0, [5.0, "x"])), "throughput.repeats: 'x'"),
    (json.dumps(_result(5.0) | {"status": ["ok"]}), "'status' must be text"),
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ("{not json", "neither a result JSON file"),
]


# the first as real processes, the rest through dlperf's main in this process (each fresh
# interpreter pays ~1.5 s importing SciPy before it refuses; test_fuzz_cli checks both alike)
@pytest.mark.parallel
@pytest.mark.parametrize("content,says,run", [
    (*case, dlperf if index == 0 else dlperf_main) for index, case in enumerate(BAD_ITEMS)])
def test_compare_checks_the_shape_of_each_item(content, says, run, tmp_path):
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_text(content)
    good.write_text(json.dumps([_result(10.0, [9.0, 10.0, 11.0])]))
    for args in ((str(bad), str(good)), (str(good), str(bad))):
        proc = run("compare", *args, "--db", str(tmp_path / "none.db"), timeout=60)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.parallel
def test_compare_of_sound_files_prints_a_finite_mean(tmp_path):
    base, cand = tmp_path / "a.json", tmp_path / "b.json"
    base.write_text(json.dumps(_result(10.0, [9.0, 10.0, 11.0])))
    cand.write_text(json.dumps(_result(20.0, [19.0, 20.0, 21.0])))
    proc = dlperf("compare", str(base), str(cand), "--json", str(tmp_path / "c.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "c.json").read_text())["geometric_mean_ratio"] == 2.0
    assert "nan" not in proc.stdout.lower()
