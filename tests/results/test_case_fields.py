"""Each case field is declared once (dlperf.spec.Case's field metadata) and its consumers derive
from that declaration or are checked against it here: the flags, `reproduce`, the CSV columns,
the identity and the scaling baseline's key.

A new field that lacks what one of them needs fails here, naming the field and the consumer.
The last test measures: a 2-process jemalloc case must be scaled over the 1-process jemalloc
result, not over a newer 1-process run with the system's malloc (the baseline key once left the
allocator out).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import os

import pytest

from conftest import CUT_RESNET50_FLAGS, dlperf_main, tiny_dataset
from dlperf import cli, scaling
from dlperf.commands._flags import case_from_args
from dlperf.history import reproduce
from dlperf.host import allocators
from dlperf.report import export
from dlperf.spec import ALWAYS, LATER_FIELDS, NEVER, UNLESS_DEFAULT, Case, stored_default
from dlperf.store import Store

FIELDS = dataclasses.fields(Case)


def option_strings(command: str) -> set[str]:
    """Every flag of ``dlperf COMMAND``."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag for action in sub.choices[command]._actions for flag in action.option_strings}


@pytest.mark.parallel
def test_every_field_declares_what_its_consumers_need():
    for field in FIELDS:
        meta = field.metadata
        assert meta.get("identity") in (ALWAYS, UNLESS_DEFAULT, NEVER), field.name
        assert isinstance(meta.get("baseline"), bool), field.name
        assert isinstance(meta.get("flag"), str) and meta["flag"].startswith("--"), field.name
        if meta["identity"] == UNLESS_DEFAULT:  # only a field with a default can leave the key
            assert (field.default is not dataclasses.MISSING
                    or field.default_factory is not dataclasses.MISSING), field.name


@pytest.mark.parallel
def test_every_declared_flag_is_a_flag_of_run_or_infer():
    flags = option_strings("run") | option_strings("infer")
    missing = [(f.name, f.metadata["flag"]) for f in FIELDS if f.metadata["flag"] not in flags]
    assert not missing, f"case fields whose declared flag no command has: {missing}"


@pytest.mark.parallel
def test_the_identity_follows_the_declaration():
    plain = Case(framework="torch", model="resnet50", batch_size=2)
    identity = plain.identity()
    for field in FIELDS:
        rule = field.metadata["identity"]
        if field.name == "warmup_max_steps":
            continue  # also out of the key whenever warm-up is a fixed count: below
        assert (field.name in identity) == (rule == ALWAYS), field.name
    assert LATER_FIELDS == {f.name: stored_default(f) for f in FIELDS
                            if f.metadata["identity"] == UNLESS_DEFAULT}
    assert "warmup_max_steps" not in Case(framework="torch", model="resnet50", batch_size=2,
                                          warmup_steps=3, warmup_max_steps=9).identity()
    # a NEVER field never changes the key; a field that leaves the key at its default joins it
    # when set
    assert Case(framework="torch", model="resnet50", batch_size=2, repeats=2,
                run_label="x", profile_steps=3, timeout_s=9.0).key() == plain.key()
    assert Case(framework="torch", model="resnet50", batch_size=2,
                allocator="jemalloc").identity()["allocator"] == "jemalloc"


@pytest.mark.parallel
def test_every_field_is_a_csv_column():
    header = next(csv.reader(io.StringIO(export.to_csv([]))))
    for field in FIELDS:
        column = {"device": "device_requested"}.get(field.name, field.name)
        if field.name != "knobs":  # a column per knob: knob_NAME
            assert column in header, f"{field.name} has no CSV column"
    served = Case(framework="onnxruntime", model="resnet50", batch_size=1, task="infer",
                  scenario="server", server={"rate_qps": 5, "target_latency_ms": 100,
                                             "min_queries": 10})
    row = next(csv.DictReader(io.StringIO(export.to_csv([{"case": served.to_dict()}]))))
    assert json.loads(row["server"]) == {"min_queries": 10, "rate_qps": 5,
                                         "target_latency_ms": 100}
    assert row["scenario"] == "server" and row["run_label"] == ""


@pytest.mark.parallel
def test_the_baseline_key_is_the_declared_baseline_fields():
    assert scaling.CONFIG_FIELDS == tuple(f.name for f in FIELDS if f.metadata["baseline"])
    for name in ("allocator", "env", "data_only", "threads", "options"):
        assert name in scaling.CONFIG_FIELDS, name
    for name in ("devices", "nnodes", "launcher", "controller", "repeats", "run_label", "steps"):
        assert name not in scaling.CONFIG_FIELDS, name


@pytest.mark.parallel
def test_reproduce_writes_every_field_that_makes_the_case(tmp_path):
    """Every identity field set away from its default survives `reproduce`'s command line
    parsed back through `dlperf run`'s flags (the infer-only scenario fields excepted: `reproduce`
    refuses those cases with the command that measures them)."""
    data = tiny_dataset(tmp_path, 16)
    case = Case(framework="torch", model="resnet50", batch_size=2, precision="amp-bf16",
                compile=True, device="cpu", devices=2, nnodes=1, threads=1,
                data=str(data), knobs={"image_size": 32, "num_classes": 4}, warmup_steps="auto",
                warmup_max_steps=40, steps=9, seed=3, min_duration_s=2.5, loader_workers=1,
                cold_cache=True, launcher="native", options="", env="torch==2.5.1",
                allocator="jemalloc", run_label="abc1234")
    set_away = {f.name for f in FIELDS if f.metadata["identity"] != NEVER
                and getattr(case, f.name) != stored_default(f)}
    assert set_away >= {"allocator", "env", "cold_cache", "loader_workers", "min_duration_s",
                        "warmup_max_steps", "threads", "devices", "seed", "precision"}
    args = cli.build_parser().parse_args(reproduce.run_flags(case.to_dict()))
    back = case_from_args(args)
    assert back.identity() == case.identity()
    assert back.run_label == case.run_label


@pytest.mark.spans_cores
def test_a_jemalloc_two_process_case_is_scaled_over_the_jemalloc_one_process_result(tmp_path):
    """Real torch runs: a 1-process jemalloc result, a newer 1-process one with the system's
    malloc, then 2 processes with jemalloc: its baseline is the jemalloc run. The 1-process
    jemalloc run is also tests/worker/test_allocator_options.py's real `--allocator` run (the
    same tiny case): the launcher preloaded the library and the worker saw it mapped."""
    path = allocators.available().get("jemalloc")
    if path is None:
        pytest.skip("jemalloc is not installed here (make allocators)")
    db = str(tmp_path / "r.db")
    # ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): what is checked is which
    # stored result the scaling is read over, whatever the network's depth
    tiny = ["run", "--framework", "torch", "--model", "resnet50", "--image-size", "32",
            *CUT_RESNET50_FLAGS, "--batch-size", "2", "--warmup-steps", "1", "--steps", "2",
            "--repeats", "1", "--db", db]

    def run(*extra: str) -> dict:
        # in this process: the workers are still fresh processes, but the harness's imports
        # are paid once, not once per run
        out = tmp_path / "out.json"
        dlperf_main(*tiny, *extra, "--json", str(out), check=True, timeout=600)
        return json.loads(out.read_text())

    jemalloc_one = run("--allocator", "jemalloc")
    # a torch worker runs with jemalloc mapped (the launcher's LD_PRELOAD, the worker's maps)
    assert jemalloc_one["status"] == "ok", jemalloc_one.get("error")
    assert jemalloc_one["launch"]["allocator"] == {"name": "jemalloc", "library": path}
    mapped = jemalloc_one["env"]["worker"]["identity"]["allocators"]
    assert [os.path.realpath(p) for p in mapped] == [os.path.realpath(path)]
    assert jemalloc_one["label"].endswith("jemalloc")
    assert jemalloc_one["case"]["allocator"] == "jemalloc"
    system_one = run()
    assert system_one["run_id"] > jemalloc_one["run_id"]
    two = run("--allocator", "jemalloc", "--devices", "2")
    assert two["status"] == "ok", two.get("error")
    assert two["speedup_baseline"]["run_id"] == jemalloc_one["run_id"], two["speedup_baseline"]
    with Store(db, readonly=True) as store:
        assert scaling.find_baseline(store, two)["run_id"] == jemalloc_one["run_id"]


@pytest.mark.parallel
def test_the_result_reader_checks_every_case_field():
    """report.reading derives its case checks from the declaration: every field, the newest
    (`link`) included, is type-checked where stored results are read."""
    from dlperf.report import reading

    checked = {name for name, _, _ in reading.CASE}
    assert {f.name for f in FIELDS} <= checked
    case = Case(framework="torch", model="resnet50", batch_size=2).to_dict()
    assert reading.problem(case, reading.CASE) is None
    assert "link" in (reading.problem({**case, "link": 5}, reading.CASE) or "")
