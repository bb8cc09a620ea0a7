"""Fuzz (issue 53): the files that `dlperf compare`, `gate`, `explain`, `history`, `report`,
`sweep --dry-run` and `run --config best` read, generated with hypothesis from valid ones and
then broken.

The valid inputs are real: a results database written by dlperf itself (`dlperf external` runs
of tests/fixtures/fake_train.py through the CLI, and torch cases measured by the real runner, timing
loop and profiler attribution with a stand-in worker process in place of the framework, so that
nothing here starts one), the result JSON files those runs wrote, a finished tune study stored
the way `dlperf tune` stores it, and a sweep file asking for its `config: best`. From them each
example breaks one file, one to three times: any field at any depth replaced by a value of another
type (null, a boolean, text with markup, integers up to 10**5000, nan, inf, 1e308, a list, an
object), deleted, wrapped, or nested 10000 levels deep; then perhaps the bytes: truncated,
non-UTF-8, a BOM, UTF-16, NUL bytes, an empty file, a top level that is no object. Sweep YAML
also gets hostile YAML: anchor bombs, `!!python/object` and other tags, unhashable and duplicate
keys, undefined aliases, tabs, several documents. A database gets a JSON cell broken the same
way or replaced by raw garbage (a blob, a number, NULL), a table or column missing or renamed,
its constraints gone, another schema version, its pages overwritten or truncated, or is another
application's file.

Each command gets EXAMPLES generated inputs (300; DLPERF_FUZZ_EXAMPLES=N draws N instead, as
`make test-quick`, the inner loop, does with 60), run through the CLI's ``main(argv)`` in this
process (conftest.dlperf_main), and every one must keep the invariant: no traceback; exit 0 or 2,
and 1 only where `dlperf gate` printed its slowdown verdict; at most one line on stderr with exit
2; every input file byte-identical afterwards, and nothing new beside them but the command's own
--json output (and SQLite's -wal and -shm beside a WAL-mode database, which a read-only
connection cannot remove).

Every example runs even after a failure (the runtime stays the same), and the failures are
reported together, one per distinct cause (the exception and the innermost dlperf frame, or the
rule broken), each with its command line, what was done to which file, the dlperf frames of the
traceback and its last line; the failing example's files are kept in its folder under pytest's
temporary directory (`--basetemp` keeps them from other pytest runs), where the printed command
line replays it. Derandomized: the same inputs on every run; DLPERF_FUZZ_SEED=N draws others;
DLPERF_FUZZ_STATS=FILE appends, per command, how its examples exited, the slowest and every
failure's report (Markdown).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shlex
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from conftest import dlperf_main, own_lock

# measures nothing and asserts nothing about time (the stand-in worker times sleeps and stores
# what it got): `make test` runs it beside another
pytestmark = pytest.mark.parallel

#: per command: 300 as issue 53 asks, in `make test`; fewer where DLPERF_FUZZ_EXAMPLES says
#: (`make test-quick`: the inner loop's minutes are mostly these commands' examples)
EXAMPLES = int(os.environ.get("DLPERF_FUZZ_EXAMPLES", "300"))
FUZZ_SEED = os.environ.get("DLPERF_FUZZ_SEED")
SCRIPT = str(Path(__file__).resolve().parents[1] / "fixtures" / "fake_train.py")
LOCK = own_lock("test_fuzz_inputs")
TIMEOUT_S = 30  # per invocation; a command still going after this is a failure of its own
DEEP = 10_000  # levels of nesting
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    derandomize=FUZZ_SEED is None, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example,
                                           HealthCheck.filter_too_much])

# the tuned case: `dlperf run` + these flags (+ --config best) is the case the stored tune searched
RUN_FLAGS = ["--framework", "torch", "--model", "resnet50", "--image-size", "32",
             "--batch-size", "2", "--warmup-steps", "1", "--steps", "2", "--repeats", "1"]
LABELS = ("a", "a", "b", "b")  # b's steps take 10x a's: gate's verdict on a vs b is 1

# ------------------------------------------------------------------------------------------------
# The valid inputs
# ------------------------------------------------------------------------------------------------

# A worker process in place of a framework's: the real timing loop (dlperf.worker.loop) over a
# step that sleeps, and the real profile attribution of the operators a stand-in profiler reports;
# the rank file it writes is what the runner reads from every backend.
STANDIN_WORKER = r"""
import json, os, platform, socket, sys, time
from dlperf.worker import loop, profile
from dlperf.worker.workload import Workload

case = json.load(open(sys.argv[1]))
out_dir = sys.argv[2]
STEP_S = 0.020 if case.get("run_label") == "b" else 0.002  # b: 10x slower, whatever the load
OPS = [("aten::conv2d", 0.5), ("aten::addmm", 0.2), ("aten::relu_", 0.1),
       ("Optimizer.step#SGD.step", 0.1)]

class StandinProfiler(profile.Profiler):
    tool = {"name": "stand-in profiler", "version": "1"}
    rules = profile.rules([(r"conv", "convolution"), (r"addmm", "matmul"),
                           (r"relu", "elementwise"), (r"Optimizer", "optimizer", profile.ENCLOSES)])

    def start(self):
        self.begin = time.perf_counter()

    def stop(self):
        events, now = [], self.begin
        for _ in range(int(case["profile_steps"])):
            for name, share in OPS:
                events.append(profile.Event(name, 1, now, STEP_S * share))
                now += STEP_S * share
            now += STEP_S * 0.1
        return events

class Standin(Workload):
    def __init__(self):
        Workload.__init__(self, samples_per_step=case["batch_size"], params=25557032,
                          info={"name": "stand-in", "version": "0.0", "device": "cpu"})
        self.loss = 2.3

    def step(self):
        time.sleep(STEP_S)
        self.loss *= 0.99
        return self.loss

    def sync(self):
        pass

    def profiler(self):
        return StandinProfiler()

result = {"rank": 0, "world_size": 1, "local_rank": 0, "host": socket.gethostname(),
          "status": "ok", "error": None,
          "device": {"kind": "cpu", "index": None, "name": None, "reason": "stand-in"},
          "placement": {"threads": 1, "cpus": [0]}}
result.update(loop.measure(lambda _: Standin(), case, None, profiling=True))
result["peak_host_bytes"] = 100 << 20
result["env"] = {"python": platform.python_version(), "python_executable": sys.executable,
                 "thread_variables": {}, "cpu_count": os.cpu_count(), "affinity": 1,
                 "identity": {"framework_version": "0.0+standin", "git": None,
                              "packages_hash": "0" * 16, "python": sys.executable,
                              "python_version": platform.python_version()}}
with open(os.path.join(out_dir, "rank0.json"), "w") as handle:
    json.dump(result, handle)
"""


def standin_launcher(case: Any, case_file: Path, out_dir: Path) -> Any:
    from dlperf.launchers import launch

    return launch.Launch([sys.executable, "-c", STANDIN_WORKER, str(case_file), str(out_dir)],
                         facts={"launcher": "stand-in", "processes": 1})


def store_tune(db: Path) -> None:
    """A finished tune of the case RUN_FLAGS describes, stored through the Store's own methods in
    the shape `dlperf tune` leaves (as tests/tune/test_tune_config.py stores one): a space, three
    trials, an outcome with a best and a best at fixed batch size, each with its `ab`."""
    from dlperf.spec import Case
    from dlperf.store import Store
    from dlperf.tune import settings as config
    from dlperf.tune import stored

    case = Case(framework="torch", model="resnet50", batch_size=2, knobs={"image_size": 32})
    default = {"threads": None, "option.memory_format": "", "batch_size": 2}
    best = {"threads": 1, "option.memory_format": "channels_last", "batch_size": 4}
    fixed = {"threads": 1, "option.memory_format": "channels_last", "batch_size": 2}
    space = {"knobs": {name: {"values": [default[name], best[name]], "why": f"{name} may help"}
                       for name in default}, "batch_limit": None}
    key = stored.study_key(case, space)

    def ab(ratio: float) -> dict[str, Any]:
        return {"ratio": ratio, "ci95": [ratio - 0.05, ratio + 0.05], "pairs": 4,
                "verdict": "faster", "a": {"median": 10.0}, "b": {"median": 10.0 * ratio}}

    outcome = {
        "knobs": space["knobs"], "batch_limit": None,
        "default": {"settings": default, "throughput": 10.0, "trial": 0},
        "best": {"settings": best, "changed": config.changed(best, default),
                 "changes_math": config.changes_math(best, default), "throughput": 13.0,
                 "trial": 2, "ab": ab(1.28)},
        "best_fixed": {"settings": fixed, "changed": config.changed(fixed, default),
                       "changes_math": [], "throughput": 11.5, "trial": 1, "ab": ab(1.12)},
        "search_s": 512.0, "confirm_s": 96.0, "budget_s": 600.0,
        "trials": {"complete": 3, "pruned": 0, "failed": 0}, "device": "cpu",
        "unit": "samples/s"}
    with Store(db) as store:
        store.start_tune_study(key, stored.base_key(case), case.to_dict(), space, 600.0)
        for number, chosen, value in ((0, default, 10.0), (1, fixed, 11.5), (2, best, 13.0)):
            store.add_tune_trial(key, number, {
                "settings": chosen, "state": "complete", "value": value, "error": None,
                "wall_s": 20.0, "rungs": [{"rung": 0, "value": value, "run_id": None,
                                           "repeats": 1, "wall_s": 20.0}]})
        store.finish_tune_study(key, outcome)


def store_accuracy(store: Any, env: dict[str, Any]) -> None:
    """`dlperf accuracy`'s rows (GoogLeNet, torch fp32 against int8 and bf16) stored by its own
    function from a result of the shape its worker returns."""
    from dlperf.studies import accuracy

    def cell(precision: str, top1: float, status: str = "ok") -> dict[str, Any]:
        return {"framework": "torch", "precision": precision, "status": status,
                "error": None if status == "ok" else "unsupported here", "top1": top1,
                "top5": min(1.0, top1 + 0.2), "samples": 360, "changed_top1": 3,
                "engine": {"device": "cpu", "name": "torch"}}

    result = {"model": "googlenet", "knobs": {"image_size": 32}, "status": "ok", "error": None,
              "cells": [cell("fp32", 0.61), cell("int8", 0.6), cell("bf16", 0.0, "unsupported")],
              "request": {"seed": 0, "recipe": {"epochs": 1}, "calibration_samples": 32,
                          "data_identity": {"name": "digits", "split": "test"}},
              "data": {"test_samples": 360}, "training": {"epochs": 1, "loss": [2.3, 1.1]}}
    accuracy.store_result(store, result, env)


SWEEP = {
    "name": "fuzz-best",
    "description": "the tuned case at its default and at its best",
    "tune_db": "base.db",
    "defaults": {"framework": "torch", "model": "resnet50", "task": "train", "precision": "fp32",
                 "image_size": 32, "batch_size": 2, "warmup_steps": 1, "steps": 2,
                 "repeats": 1, "timeout": 240},
    "matrix": {"config": ["default", "best", "best-fixed"], "seed": [0, 1]},
    "exclude": [{"config": "best-fixed", "seed": 1}],
    "include": [{"framework": "torch", "model": "resnet50", "batch_size": 4,
                 "image_size": 32, "config": "default"}],
    "on_oom": "record",
}


@dataclass(frozen=True, repr=False)
class Base:
    """The valid inputs every example starts from."""

    root: Path
    db: Path                       # the results database (runs, repeats, a tune study)
    json: dict[str, dict | list]   # result JSON files by name, as dlperf wrote them
    torch_runs: tuple[int, ...]    # run ids of the stand-in torch results
    external_runs: tuple[int, ...]
    case_key: str                  # of the torch results
    other_app: Path                # another application's SQLite file
    lookalike: Path                # an SQLite file with tables named like dlperf's, other columns
    cells: dict[tuple[str, str], list[Any]]  # the database's JSON cells, decoded

    def __repr__(self) -> str:  # hypothesis shows the strategies' arguments: not every result
        return f"Base({self.root})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis's pretty printer
        printer.text(repr(self))


TRACEBACK = "Traceback (most recent call last):"


def _ok(done: Any, code: int = 0) -> None:
    assert done.returncode == code and TRACEBACK not in done.stderr, (
        done.args, done.returncode, done.stdout[-3000:], done.stderr[-3000:])


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Base:
    from dlperf import runner
    from dlperf.host import sysinfo
    from dlperf.spec import Case
    from dlperf.store import Store
    from dlperf.studies import tuned

    root = tmp_path_factory.mktemp("fuzz-inputs")
    db = root / "base.db"
    files: dict[str, Any] = {}
    # real `dlperf external` runs through the CLI: one that measured, one whose script crashed
    external = ["external", "--name", "fake", "--metric", r"imgs_per_sec : ([\d.]+)",
                "--framework", "ngc-pytorch", "--model", "resnet50", "--batch-size", "32",
                "--repeats", "3", "--db", str(db)]
    for name, fail in (("external", ""), ("external-crash", "crash")):
        done = dlperf_main(*external, "--json", str(root / f"{name}.json"), "--",
                           sys.executable, SCRIPT, timeout=120,
                           env={**LOCK, "FAKE_STEP_S": "0.002", "FAKE_FAIL": fail})
        _ok(done, 1 if fail else 0)
        files[name] = json.loads((root / f"{name}.json").read_text())
    store_tune(db)
    # torch cases through the real runner with the stand-in worker, stored as the sweep "fuzz"
    # with this machine's sysinfo: training labelled a, then b (slower), profiled; inference;
    # the tuned case as `--config best` measures and marks it
    env = sysinfo.capture()
    torch_runs = []
    with Store(db) as store:
        tiny = dict(framework="torch", model="resnet50", batch_size=2, knobs={"image_size": 32},
                    warmup_steps=2, steps=6, repeats=3)
        for label in LABELS:
            result = runner.run_case(Case(**tiny, profile_steps=2, run_label=label), store=store,
                                     launcher=standin_launcher, env=env, sweep="fuzz")
            assert result["status"] == "ok", result["error"]
            torch_runs.append(result["run_id"])
            files.setdefault(f"torch-{label}", result)
        files["torch-infer"] = runner.run_case(Case(**{**tiny, "task": "infer"}), store=store,
                                               launcher=standin_launcher, env=env, sweep="fuzz")
        best = tuned.from_store(store, Case(**tiny), "best")
        files["torch-best"] = runner.run_case(best.case, store=store, launcher=standin_launcher,
                                              env=env, sweep="fuzz")
        tuned.mark(files["torch-best"], best.marker, store)
        store_accuracy(store, env)
        files["sweep-fuzz"] = store.results("sweep = 'fuzz'")
        external_runs = [row["id"] for row in store.runs("case_json LIKE '%ngc-pytorch%'")]
    for name, data in files.items():
        (root / f"{name}.json").write_text(json.dumps(data))
    other_app = root / "photos.db"
    with contextlib.closing(sqlite3.connect(other_app)) as con, con:
        con.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT, taken TEXT)")
        con.executemany("INSERT INTO photos (name, taken) VALUES (?, ?)",
                        [("a.jpg", "2026-01-01"), ("b.jpg", None)])
    lookalike = root / "lookalike.db"
    with contextlib.closing(sqlite3.connect(lookalike)) as con, con:
        con.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, result TEXT, sweep TEXT)")
        con.execute("INSERT INTO runs (result, sweep) VALUES ('{}', 'fuzz')")
    made = Base(root=root, db=db, json=files, torch_runs=tuple(torch_runs),
                external_runs=tuple(external_runs), case_key=files["torch-a"]["case_key"],
                other_app=other_app, lookalike=lookalike, cells=json_cells(db))
    assert {row["status"] for row in made.json["sweep-fuzz"]} == {"ok"}
    check_valid(made)
    return made


def check_valid(b: Base) -> None:
    """Every command answers the unbroken inputs as it should: the mutations start from valid
    files, not from ones already refused."""
    sweep = b.root / "valid.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP, sort_keys=False))
    j = {name: str(b.root / f"{name}.json") for name in b.json}
    for argv, code in (
            (["compare", j["torch-a"], j["torch-b"]], 0),
            (["compare", str(b.db), str(b.db)], 0),
            (["compare", str(b.torch_runs[0]), str(b.torch_runs[-1]), "--db", str(b.db)], 0),
            (["gate", "--baseline", "label=a", "--candidate", "label=b", "--db", str(b.db)], 1),
            (["gate", "--baseline", j["torch-a"], "--candidate", j["torch-b"], "--test", "welch",
              "--db", str(b.db)], 1),
            (["gate", "--baseline", j["torch-b"], "--candidate", j["torch-a"], "--test", "welch"],
             0),
            (["explain", j["torch-a"], j["torch-b"]], 0),
            (["explain", "--db", str(b.db), "--case", str(b.torch_runs[0])], 0),
            (["history", "--db", str(b.db), "--framework", "torch", "--model", "resnet50",
              "--task", "train", "--batch-size", "2"], 0),
            (["history", "--db", str(b.db), "--case", b.case_key], 0),
            (["report", "--db", str(b.db), "--format", "md"], 0),
            (["sweep", str(sweep), "--dry-run", "--db", str(b.db)], 0)):
        _ok(dlperf_main(*argv, timeout=120, cwd=b.root, env=LOCK), code)
    with held_lock():
        done = dlperf_main("run", *RUN_FLAGS, "--config", "best", "--db", str(b.db),
                           "--no-wait", cwd=b.root, env=LOCK)
    assert done.returncode == 2 and "--no-wait" in done.stderr, (done.stdout, done.stderr)
    assert "--config best: " in done.stdout, done.stdout


@contextlib.contextmanager
def held_lock() -> Iterator[None]:
    """This module's measurement lock held here: `run --config best --no-wait` that got past
    every check of its input stops there, with exit 2, before it measures anything."""
    from dlperf.host import measurelock

    saved = os.environ.get(measurelock.ENV_DIR)
    os.environ[measurelock.ENV_DIR] = LOCK[measurelock.ENV_DIR]
    try:
        with measurelock.held(wait=False):
            yield
    finally:
        if saved is None:
            os.environ.pop(measurelock.ENV_DIR, None)
        else:
            os.environ[measurelock.ENV_DIR] = saved


# ------------------------------------------------------------------------------------------------
# Mutations: JSON and YAML trees
# ------------------------------------------------------------------------------------------------

DEEP_LIST = "FUZZDEEPLIST"    # stand-ins replaced in the serialized text by DEEP levels
DEEP_OBJECT = "FUZZDEEPOBJECT"
HUGE_INT = "FUZZHUGEINT"      # 10**5000: Python writes 4300 digits at most, and reads no more
RAW_YAML = "FUZZRAWYAML"     # + index into HOSTILE_YAML_NODES: replaced by that YAML text

NUMBERS = [0, -1, 1, 2, 2**31, 2**63, -2**63 - 1, 10**400, HUGE_INT, float("nan"), float("inf"),
           float("-inf"), 1e308, -1e308, 5e-324, -0.0, 1e-300, 0.5, True, False]
TEXTS = ["", " ", "ok", "failed", "nan", "1e999", "-1", "[bold]x[/bold]", "[/]", "<script>",
         "$\\frac{1}{$", "=HYPERLINK(\"x\")", "\x00", "\udcff", "🙂", "a\nb", "%s%n", "{}",
         "../../etc/passwd", "x" * 5000, "torch", "resnet50", "cpu", "label=a", "run:1"]


# subnormals as literals, not drawn: a library an earlier test in this process loaded may have set
# flush-to-zero (process-wide), and hypothesis then refuses to draw them at all
SCALARS = st.one_of(st.none(), st.sampled_from(NUMBERS), st.sampled_from(TEXTS), st.integers(),
                    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False),
                    st.sampled_from([5e-324, -2.2250738585072e-309]), st.text(max_size=12))
# a value to put where another was: any JSON type, hostile ones first
VALUES = st.one_of(SCALARS,
                   st.sampled_from([[], {}, [None], [[]], {"": None}, [1, "x", None],
                                    {"median": "x"}, {"0": 0}]),
                   st.lists(SCALARS, max_size=4),
                   st.dictionaries(st.text(max_size=6), SCALARS, max_size=3))


Step = str | int
TreePath = tuple[Step, ...]


def places(*texts: str) -> tuple[TreePath, ...]:
    return tuple(tuple(text.split(".")) if text else () for text in texts)


# Where in a result each command looks (its readers' fields): half the changes start there.
SERIES = places("case", "throughput", "throughput.repeats", "throughput.median",
                "throughput.ci95", "status", "label", "case_key", "run_id", "device", "unit",
                "environment", "environment.name", "environment.label",
                "environment.framework_version", "env", "env.gpus", "env.worker",
                "env.worker.framework", "env.worker.device", "case.framework", "case.repeats")
HOT = {
    "compare": SERIES + places("error", "config", "model", "global_batch", "warnings",
                               "latency_ms", "case.knobs", "case.precision", "case.devices"),
    "gate": SERIES,
    "history": SERIES + places("finished_at"),
    "explain": places("profile", "profile.categories", "profile.top_ops", "profile.tool",
                      "profile.counts", "profile.trace", "profile.step_s",
                      "profile.measured_step_s", "profile.unmapped", "profile.coverage",
                      "profile.overhead", "roofline", "roofline.intensity", "case",
                      "case.model", "throughput", "env.cpu", "env.cpu.flags", "model", "label",
                      "flops", "status"),
}
HOT["report"] = tuple(dict.fromkeys(HOT["compare"] + HOT["explain"] + places(
    "timeline", "memory", "flops", "data", "ranks", "warnings", "config", "server", "host",
    "timings", "loss", "warmup", "monitor", "scaling", "iteration_ms", "latency_ms",
    "interrupted", "repeats_done", "launch", "stderr_tail")))
HOT["run"] = ()
HOT["sweep"] = places("tune_db", "name", "matrix", "matrix.config", "defaults", "include",
                      "exclude", "on_oom", "defaults.framework", "defaults.batch_size",
                      "defaults.image_size")
# Where the readers of the other JSON cells look.
CELL_HOT = {
    ("tune_studies", "outcome_json"): places("best", "best.settings", "best.ab", "best_fixed",
                                             "best_fixed.settings", "default",
                                             "default.settings", "knobs", "trials", "search_s",
                                             "confirm_s", "budget_s", "best.changes_math"),
    ("tune_studies", "case_json"): places("framework", "model", "task", "knobs", "device",
                                          "env", "batch_size", "precision"),
    ("accuracy", "detail_json"): places("row", "cells", "knobs", "recipe", "training"),
}


class Named:
    """A tree handed to a strategy under a short name: hypothesis writes its strategies'
    arguments out (repr), and a whole result is hundreds of kB."""

    def __init__(self, name: str, tree: Any) -> None:
        self.name, self.tree = name, tree

    def __repr__(self) -> str:
        return self.name

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.name)


def node_at(tree: Any, path: TreePath) -> Any:
    for step in path:
        tree = tree[step]
    return tree


def _has(tree: Any, path: TreePath) -> bool:
    for step in path:
        if not isinstance(tree, dict) or step not in tree:
            return False
        tree = tree[step]
    return True


def shown(path: TreePath) -> str:
    return "$" + "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path)


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


@st.composite
def tree_path(draw: Any, tree: Any, hot: tuple[TreePath, ...] = ()) -> TreePath:
    """A node of ``tree``: half the time (where ``hot`` names any) from one of the ``hot``
    places the command reads (in a list: of a drawn item of it), else from the root; from
    there one level deeper each time with probability 4/5, into a key or index drawn
    uniformly (so the top-level fields are as likely as the deep ones, however many a block
    like env holds)."""
    path: list[Step] = []
    node = tree
    if isinstance(node, list) and node and hot:
        path.append(draw(st.integers(0, len(node) - 1)))
        node = node[path[0]]
    present = [place for place in hot if _has(node, place)]
    if present and draw(st.booleans()):
        place = draw(st.sampled_from(present))
        path.extend(place)
        node = node_at(node, place)
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 4)) != 0:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = keys[draw(st.integers(0, len(keys) - 1))]
        path.append(key)
        node = node[key]
    return tuple(path)


TREE_OPS = ("replace", "replace", "replace", "delete", "nest", "wrap", "empty")


@st.composite
def tree_mutation(draw: Any, named: Named, hot: tuple[TreePath, ...] = (),
                  yaml_nodes: bool = False) -> tuple[Any, list[str]]:
    """The tree (a copy) broken one to three times, and what was done, one line per change."""
    tree = copy.deepcopy(named.tree)
    done = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(tree_path(tree, hot))
        op = draw(st.sampled_from(TREE_OPS + (("yaml",) * 2 if yaml_nodes else ())))
        node = node_at(tree, path)
        if op == "delete" and path:
            parent = node_at(tree, path[:-1])
            del parent[path[-1]]
            done.append(f"deleted {shown(path)}")
            continue
        if op == "nest":
            new: Any = draw(st.sampled_from([DEEP_LIST, DEEP_OBJECT]))
            what = (f"nested {YAML_DEEP_LIST if yaml_nodes and new == DEEP_LIST else DEEP} "
                    f"levels deep ({'list' if new == DEEP_LIST else 'object'})")
        elif op == "wrap":
            new = draw(st.sampled_from([[node], {"value": node}]))
            what = f"wrapped in a {type(new).__name__}"
        elif op == "empty":
            new = draw(st.sampled_from([[], {}, "", None]))
            what = f"= {new!r}"
        elif op == "yaml":
            index = draw(st.integers(0, len(HOSTILE_YAML_NODES) - 1))
            new = f"{RAW_YAML}{index:02d}"
            what = f"= YAML {short(HOSTILE_YAML_NODES[index], 90)}"
        else:
            new = copy.deepcopy(draw(VALUES))  # its lists are shared: later changes edit it
            what = f"= {short(new)}"
        if path:
            node_at(tree, path[:-1])[path[-1]] = new
        else:
            tree = new
        done.append(f"{shown(path)} {what}")
    return tree, done


JSON_TOKENS = {DEEP_LIST: "[" * DEEP + "]" * DEEP, DEEP_OBJECT: '{"a": ' * DEEP + "1" + "}" * DEEP,
               HUGE_INT: "1" + "0" * 5000}
# PyYAML's scanner takes time quadratic in the nesting of flow lists (10000 levels: 3.5 s before
# the sweep is refused; 1000: 0.5 s), so YAML's lists nest 600 levels, past what its composer's
# recursion reaches (about 490 in a fresh interpreter), 0.1 s each; its objects nest DEEP levels
YAML_DEEP_LIST = 600
YAML_TOKENS = {DEEP_LIST: "[" * YAML_DEEP_LIST + "]" * YAML_DEEP_LIST,
               DEEP_OBJECT: "{a: " * DEEP + "1" + "}" * DEEP, HUGE_INT: "1" + "0" * 5000}


def json_text(tree: Any) -> str:
    text = json.dumps(tree)  # NaN and Infinity as Python (and dlperf) write them
    for token, raw in JSON_TOKENS.items():
        text = text.replace(f'"{token}"', raw)
    return text


# Values in YAML's own syntax, each where a node was.
HOSTILE_YAML_NODES = [
    "!!python/object/apply:os.mkdir [PWNED]",
    "!!python/name:os.system",
    "!!python/object:argparse.Namespace {a: 1}",
    "!!binary aGVsbG8=",
    "2001-12-14",
    "2001-12-14T21:59:43.10-05:00",
    "!!set {a, b}",
    "!!omap [{a: 1}, {b: 2}]",
    "!custom x",
    "*undefined",
    "{[a, b]: c}",
    "{a: 1, a: 2}",
    "{<<: [1, 2]}",
    "!!int 'abc'",
    "!!float 'x'",
    "0o777",
    "0x1F",
    "1_000",
    ".NaN",
    "-.inf",
    "~",
    "[&a [x, x, x, x, x, x, x, x, x], &b [*a, *a, *a, *a, *a, *a, *a, *a, *a], "
    "&c [*b, *b, *b, *b, *b, *b, *b, *b, *b], &d [*c, *c, *c, *c, *c, *c, *c, *c, *c], "
    "&e [*d, *d, *d, *d, *d, *d, *d, *d, *d], &f [*e, *e, *e, *e, *e, *e, *e, *e, *e], "
    "&g [*f, *f, *f, *f, *f, *f, *f, *f, *f]]",
    "&r [*r]",
    "'" + "x" * 100_000 + "'",
]


def yaml_text(tree: Any, mkdir_marker: Path) -> str:
    text = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, width=10**9)
    for token, raw in YAML_TOKENS.items():
        text = text.replace(token, raw)
    for index, node in enumerate(HOSTILE_YAML_NODES):
        text = text.replace(f"{RAW_YAML}{index:02d}", node.replace("PWNED", str(mkdir_marker)))
    return text


# Byte-level damage after the tree's: (name, function of the bytes and a fraction in [0, 1]).
def _at(data: bytes, fraction: float) -> int:
    return int(len(data) * fraction)


BYTE_OPS: dict[str, Callable[[bytes, float], bytes]] = {
    "truncated": lambda data, f: data[:_at(data, f)],
    "non-UTF-8 bytes inserted": lambda data, f: data[:_at(data, f)] + b"\xff\xfe\xc3(" + data[
        _at(data, f):],
    "a NUL byte inserted": lambda data, f: data[:_at(data, f)] + b"\x00" + data[_at(data, f):],
    "a BOM in front": lambda data, f: b"\xef\xbb\xbf" + data,
    "re-encoded as UTF-16": lambda data, f: data.decode("utf-8", "replace").encode("utf-16"),
    "emptied": lambda data, f: b"",
    "garbage after it": lambda data, f: data + b"\n}{ ]] garbage",
    "bytes overwritten": lambda data, f: data[:_at(data, f)] + b"\x00\xff" * 32 + data[
        _at(data, f) + 64:],
}
YAML_BYTE_OPS: dict[str, Callable[[bytes, float], bytes]] = {
    **BYTE_OPS,
    "indented with a tab": lambda data, f: re.sub(rb"\n  ", b"\n\t", data, count=1),
    "a second document": lambda data, f: data + b"\n---\nname: second\n",
    "a flow left open": lambda data, f: data + b"\nmatrix: [",
}


@st.composite
def byte_damage(draw: Any, ops: dict[str, Callable[[bytes, float], bytes]]
                ) -> list[tuple[str, float]]:
    """Mostly none; else one or two of ``ops`` at drawn places."""
    if draw(st.integers(0, 3)) != 0:
        return []
    names = sorted(ops)
    return [(names[draw(st.integers(0, len(names) - 1))], draw(st.integers(0, 1000)) / 1000)
            for _ in range(draw(st.integers(1, 2)))]


def damaged(data: bytes, damage: list[tuple[str, float]],
            ops: dict[str, Callable[[bytes, float], bytes]]) -> tuple[bytes, list[str]]:
    done = []
    for name, fraction in damage:
        data = ops[name](data, fraction)
        done.append(f"{name} (at {fraction:.0%})")
    return data, done


TOP_LEVELS = ("as is", "as is", "as is", "in a list", "in a list with a number", "an empty list",
              "twice in a list")


@st.composite
def json_file(draw: Any, named: Named, hot: tuple[TreePath, ...] = ()
              ) -> tuple[bytes, list[str]]:
    """A result JSON file: the tree broken, perhaps put in another top level, perhaps damaged
    bytes."""
    broken, done = draw(tree_mutation(named, hot))
    top = draw(st.sampled_from(TOP_LEVELS))
    if top != "as is":
        broken = {"in a list": [broken], "in a list with a number": [broken, 7],
                  "an empty list": [], "twice in a list": [broken, broken]}[top]
        done.append(f"top level: {top}")
    data, more = damaged(json_text(broken).encode("utf-8", "surrogatepass"),
                         draw(byte_damage(BYTE_OPS)), BYTE_OPS)
    return data, done + more


# ------------------------------------------------------------------------------------------------
# Mutations: SQLite databases
# ------------------------------------------------------------------------------------------------

JSON_CELLS = {"runs": ("result_json", "case_json", "env_json"), "repeats": ("detail_json",),
              "tune_studies": ("outcome_json", "case_json", "space_json"),
              "tune_trials": ("settings_json", "rungs_json"),
              "accuracy": ("detail_json", "dataset_json")}
PLAIN_CELLS = {"runs": ("status", "label", "sweep", "case_key", "finished_at", "started_at",
                        "error", "id"),
               "repeats": ("throughput", "status", "run_id", "repeat_index"),
               "tune_studies": ("base_key", "finished_at", "framework", "study", "budget_s"),
               "tune_trials": ("state", "value", "number", "study", "wall_s"),
               "meta": ("value", "key"),
               "accuracy": ("top1", "fp32_top1", "diff_top1", "status", "precision", "model",
                            "samples", "accuracy_key")}
TABLES = ("runs", "repeats", "meta", "tune_studies", "tune_trials", "accuracy")
RAW_CELLS = [None, "", "not json", "{", "[]", "null", "{}", '"text"', "NaN", "5", 5, -1, 1.5,
             10**18, b"\xff\xfe\x00", b"{}", "{\"status\": \"ok\"}", "x" * 100_000]
DB_OPS = ("json cell", "json cell", "json cell", "json cell", "raw cell", "raw cell",
          "drop table", "drop column", "rename table", "delete rows", "schema version",
          "loosen", "duplicate run", "file")
FILE_OPS = ("truncated", "pages overwritten", "emptied", "another app's database",
            "a lookalike database", "a text file")


@dataclass(frozen=True)
class DbChange:
    op: str
    table: str = ""
    column: str = ""
    row: int = 0
    tree: tuple[Any, list[str]] | None = None  # the JSON cell's mutation, drawn on its value
    value: Any = None
    fraction: float = 0.0


def json_cells(db: Path) -> dict[tuple[str, str], list[Any]]:
    """Every JSON cell of the database, decoded, by table and column, in row order."""
    cells = {}
    with contextlib.closing(sqlite3.connect(db)) as con:
        for table, columns in JSON_CELLS.items():
            for column in columns:
                cells[table, column] = [None if text is None else json.loads(text) for (text,) in
                                        con.execute(f"SELECT {column} FROM {table} ORDER BY id")]
    return cells


@st.composite
def db_change(draw: Any, base: Base, hot: tuple[TreePath, ...] = ()) -> DbChange:
    op = draw(st.sampled_from(DB_OPS))
    if op == "json cell":
        table = draw(st.sampled_from(sorted(JSON_CELLS)))
        column = draw(st.sampled_from(JSON_CELLS[table]))
        return json_cell_change(draw, base, table, column, hot)
    if op == "raw cell":
        table = draw(st.sampled_from(sorted(PLAIN_CELLS) + sorted(JSON_CELLS)))
        column = draw(st.sampled_from(PLAIN_CELLS.get(table, ()) + JSON_CELLS.get(table, ())))
        return DbChange(op, table, column, draw(st.integers(0, 50)),
                        value=draw(st.one_of(st.sampled_from(RAW_CELLS), SCALARS)))
    if op in ("drop table", "rename table", "delete rows", "loosen"):
        return DbChange(op, draw(st.sampled_from(TABLES)), row=draw(st.integers(-1, 50)))
    if op == "drop column":
        table = draw(st.sampled_from(sorted(PLAIN_CELLS)))
        return DbChange(op, table, draw(st.sampled_from(PLAIN_CELLS[table]
                                                        + JSON_CELLS.get(table, ()))))
    if op == "schema version":
        return DbChange(op, value=draw(st.sampled_from(["0", "2", "99", "x", "", "1.0", " 1",
                                                        None, 1, b"1"])))
    if op == "duplicate run":
        return DbChange(op, row=draw(st.integers(0, 50)))
    return DbChange(op, draw(st.sampled_from(FILE_OPS)),
                    fraction=draw(st.integers(0, 1000)) / 1000)


def json_cell_change(draw: Any, base: Base, table: str, column: str,
                     hot: tuple[TreePath, ...] = ()) -> DbChange:
    """One JSON cell of ``table.column``, broken as a result JSON file's tree is."""
    cells = base.cells[table, column]
    row = draw(st.integers(0, max(0, len(cells) - 1)))
    hot = hot if column == "result_json" else CELL_HOT.get((table, column), ())
    tree = draw(tree_mutation(Named(f"{table}.{column}[{row}]", cells[row]), hot)) \
        if cells else None
    return DbChange("json cell", table, column, row, tree=tree)


@st.composite
def db_file(draw: Any, base: Base, hot: tuple[TreePath, ...] = ()) -> list[DbChange]:
    """One or two changes; for a command that reads results, more often their cells."""
    changes = [draw(db_change(base, hot)) for _ in range(draw(st.integers(1, 2)))]
    if hot and draw(st.booleans()):
        changes.insert(0, json_cell_change(draw, base, "runs", "result_json", hot))
    return changes


def _sql_value(value: Any) -> Any:
    """What sqlite3 can bind: integers past 64 bits go in as text, lone surrogates replaced."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not -2**63 <= value < 2**63:
        return str(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return value


def _loosen(con: sqlite3.Connection, table: str, keep: Callable[[str], bool] = lambda c: True
            ) -> None:
    """``table`` rebuilt without its constraints, indexes and key (and only the columns
    ``keep`` keeps), as a hand-made or older file may have it."""
    columns = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
    kept = ", ".join(c for c in columns if keep(c))
    con.execute(f"CREATE TABLE fuzz_tmp AS SELECT {kept} FROM {table}")
    con.execute(f"DROP TABLE {table}")
    con.execute(f"ALTER TABLE fuzz_tmp RENAME TO {table}")


def _set_cell(con: sqlite3.Connection, table: str, column: str, row: int, value: Any) -> str:
    ids = [r[0] for r in con.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
    if not ids:
        return f"{table} is empty: nothing set"
    rowid = ids[row % len(ids)]
    try:
        con.execute(f"UPDATE {table} SET {column}=? WHERE rowid=?", (value, rowid))
    except sqlite3.IntegrityError:  # NOT NULL, UNIQUE, a key: as a hand-edited file could be
        _loosen(con, table)
        con.execute(f"UPDATE {table} SET {column}=? WHERE rowid=?", (value, rowid))
        return f"{table} without constraints, row {rowid}"
    return f"row {rowid}"


def apply_db_change(path: Path, change: DbChange, base: Base) -> str:
    """Apply one change to the database file ``path``; what was done, in words."""
    if change.op == "file":
        data = path.read_bytes()
        at = int(len(data) * change.fraction)
        if change.table == "truncated":
            path.write_bytes(data[:at])
        elif change.table == "pages overwritten":
            path.write_bytes(data[:at] + b"\xa5" * 4096 + data[at + 4096:])
        elif change.table == "emptied":
            path.write_bytes(b"")
        elif change.table == "another app's database":
            shutil.copyfile(base.other_app, path)
        elif change.table == "a lookalike database":
            shutil.copyfile(base.lookalike, path)
        else:
            path.write_text("not a database\n" * 20)
        return f"file {change.table}" + (f" at {change.fraction:.0%}"
                                         if change.table in ("truncated", "pages overwritten")
                                         else "")
    with open(path, "rb") as handle:
        if handle.read(16) != b"SQLite format 3\x00":
            return f"{change.op}: skipped, no longer an SQLite file"
    try:
        with contextlib.closing(sqlite3.connect(path)) as con:
            con.execute("PRAGMA synchronous=OFF")  # no fsync per example (the format is the same)
            with con:
                return _apply_sql(con, change)
    except sqlite3.DatabaseError as error:  # an earlier change broke the file: leave it so
        return f"{change.op} {change.table}: not applied ({error})"


def _apply_sql(con: sqlite3.Connection, change: DbChange) -> str:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    table, column = change.table, change.column
    if table and table not in tables:
        return f"{change.op} {table}: no such table any more"
    if column and column not in [r[1] for r in con.execute(f"PRAGMA table_info({table})")]:
        return f"{change.op} {table}.{column}: no such column any more"
    if change.op == "json cell":
        if change.tree is None:
            return f"{table}.{column}: no rows"
        tree, done = change.tree
        where = _set_cell(con, table, column, change.row, _sql_value(json_text(tree)))
        return f"{table}.{column} ({where}): " + "; ".join(done)
    if change.op == "raw cell":
        where = _set_cell(con, table, column, change.row, _sql_value(change.value))
        return f"{table}.{column} ({where}) = {short(change.value)}"
    if change.op == "drop table":
        con.execute(f"DROP TABLE {table}")
        return f"table {table} dropped"
    if change.op == "rename table":
        con.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
        return f"table {table} renamed {table}_old"
    if change.op == "delete rows":
        if change.row < 0:
            con.execute(f"DELETE FROM {table}")
            return f"every row of {table} deleted"
        ids = [r[0] for r in con.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        if ids:
            con.execute(f"DELETE FROM {table} WHERE rowid=?", (ids[change.row % len(ids)],))
        return f"a row of {table} deleted"
    if change.op == "loosen":
        _loosen(con, table)
        return f"{table} rebuilt without constraints, key or indexes"
    if change.op == "drop column":
        _loosen(con, table, lambda c: c != column)
        return f"column {table}.{column} dropped"
    if change.op == "schema version":
        if "meta" not in tables:
            return "schema version: no meta table any more"
        try:
            con.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                        (_sql_value(change.value),))
        except sqlite3.IntegrityError:
            con.execute("DELETE FROM meta WHERE key='schema_version'")
            return "schema version row deleted"
        return f"schema version = {change.value!r}"
    if change.op == "duplicate run":
        if "runs" not in tables:
            return "duplicate run: no runs table any more"
        columns = [r[1] for r in con.execute("PRAGMA table_info(runs)") if r[1] != "id"]
        ids = [r[0] for r in con.execute("SELECT rowid FROM runs ORDER BY rowid")]
        if not ids:
            return "duplicate run: no runs"
        rowid = ids[change.row % len(ids)]
        names = ", ".join(columns)
        con.execute(f"INSERT INTO runs ({names}) SELECT {names} FROM runs WHERE rowid=?",
                    (rowid,))
        return f"run {rowid} stored twice"
    raise AssertionError(change.op)


# ------------------------------------------------------------------------------------------------
# Running an example and checking the invariant
# ------------------------------------------------------------------------------------------------

@dataclass
class Example:
    """One generated invocation: the argv, with ``{NAME}`` for the path of each file to write
    (NAME -> a function that writes it and says in words how it was made) and ``{out}`` for
    the command's own --json output."""

    argv: list[str]
    files: dict[str, Callable[[Path], str]] = field(default_factory=dict)


@dataclass
class Outcome:
    kept: dict[str, str] = field(default_factory=dict)  # cause -> its first failure, told
    count: int = 0
    failed: int = 0
    codes: dict[int, int] = field(default_factory=dict)  # exit code -> how many
    slowest: list[tuple[float, str]] = field(default_factory=list)


GATE_VERDICT = re.compile(r": (slower|failed) \(.*\); reproduce with", re.S)
# where an uncaught exception came from: the innermost frame in dlperf, else the innermost
FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def cause_of(stderr: str, problem: str) -> str:
    """A failure's cause, to tell distinct ones apart: the exception and where it was raised
    (the innermost dlperf frame), or the rule broken."""
    if TRACEBACK not in stderr:
        return problem
    frames = FRAME.findall(stderr)
    ours = [f for f in frames if "/dlperf/" in f[0]] or frames
    where = f"{Path(ours[-1][0]).name}:{ours[-1][1]} in {ours[-1][2]}" if ours else "?"
    last = stderr.strip().splitlines()[-1]
    return f"{last.split(':')[0]} at {where}"


def shown_stderr(stderr: str) -> list[str]:
    """A traceback as its dlperf frames (file:line in function) and its last line; else the
    last lines."""
    lines = stderr.strip().splitlines()
    if TRACEBACK not in stderr:
        return lines[-6:]
    frames = [f"{path[path.rfind('/dlperf/') + 1:]}:{line} in {function}"
              for path, line, function in FRAME.findall(stderr) if "/dlperf/" in path]
    return [" <- ".join(reversed(frames)), lines[-1]]


def check(command: str, code: int, stdout: str, stderr: str) -> str | None:
    """The invariant for one invocation: None, or the rule it broke."""
    lines = stderr.strip().splitlines()
    if TRACEBACK in stderr:
        return "a traceback"
    if code == 1 and command == "gate" and GATE_VERDICT.search(stdout):
        return None
    if code not in (0, 2):
        return f"exit {code}"
    if code == 2 and len(lines) > 1:
        return f"exit 2 with {len(lines)} lines on stderr"
    return None


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def run_example(name: str, example: Example, base: Base, outcome: Outcome) -> None:
    """Write the example's files into a folder of its own, run the command there, check the
    invariant and that the files are as written; keep the folder only when it failed."""
    outcome.count += 1
    folder = base.root / "examples" / f"{name}-{outcome.count:03d}"
    folder.mkdir(parents=True)
    paths = {key: folder / key for key in example.files}
    described = []
    for key, make in example.files.items():
        described.append(f"{key}: {make(paths[key])}")
    paths["out"] = folder / "out.json"
    argv = []
    for part in example.argv:
        for key, path in paths.items():
            part = part.replace("{" + key + "}", str(path))
        argv.append(part)
    marker = folder / "PWNED"
    before = snapshot(folder)
    started = time.monotonic()
    done = dlperf_main(*argv, timeout=TIMEOUT_S, cwd=folder, env=LOCK)
    took = time.monotonic() - started
    outcome.codes[done.returncode] = outcome.codes.get(done.returncode, 0) + 1
    outcome.slowest = sorted(outcome.slowest + [(took, "; ".join(described))])[-5:]
    problem = check(argv[0], done.returncode, done.stdout, done.stderr)
    after = snapshot(folder)
    for key, data in before.items():
        if problem is None and after.get(key) != data:
            problem = f"{key} changed" if key in after else f"{key} removed"
    # SQLite's own: a read-only connection to a WAL-mode file (what dlperf writes) cannot
    # remove the -wal and -shm it opens beside it; the database itself stays as it was
    new = sorted(name for name in {p.name for p in folder.iterdir()} - set(before)
                 if name not in ("out.json", "PWNED") and not name.endswith(("-wal", "-shm")))
    if problem is None and new:
        problem = f"new files beside the inputs: {', '.join(new)}"
    if problem is None and marker.exists():
        problem = "YAML ran code: PWNED was made"
    if problem is None:
        shutil.rmtree(folder)
        return
    outcome.failed += 1
    cause = cause_of(done.stderr, problem)
    if cause not in outcome.kept:
        replay = "dlperf " + " ".join(shlex.quote(part) for part in argv)
        outcome.kept[cause] = (
            f"{cause}\n  {problem}, exit {done.returncode} after {took:.1f} s\n"
            f"  replay (in {folder}): {replay}\n  inputs:\n"
            + "".join(f"    {line}\n" for line in described)
            + "  stderr:\n" + "".join(f"    {line}\n" for line in shown_stderr(done.stderr)))
    else:
        shutil.rmtree(folder)


def fuzz(name: str, examples: st.SearchStrategy[Example], base: Base) -> None:
    """EXAMPLES generated invocations of one command, every one checked; one failure per
    distinct cause in the message."""
    outcome = Outcome()

    @SETTINGS
    @given(examples)
    def one(example: Example) -> None:
        run_example(name, example, base, outcome)

    if FUZZ_SEED is not None:
        one = seed(int(FUZZ_SEED))(one)
    one()
    if os.environ.get("DLPERF_FUZZ_STATS"):  # how the examples ended, the slowest, the causes
        with open(os.environ["DLPERF_FUZZ_STATS"], "a") as out:
            out.write(f"\n## dlperf {name}\n\n{outcome.count} inputs, exit codes "
                      f"{dict(sorted(outcome.codes.items()))}, {outcome.failed} failed; "
                      f"slowest:\n\n" + "".join(f"- {took:.2f} s: {what[:300]}\n"
                                                   for took, what in outcome.slowest)
                      + "".join(f"\n```\n{message}```\n" for message in outcome.kept.values()))
    assert outcome.count >= EXAMPLES, f"{name}: only {outcome.count} inputs were generated"
    assert not outcome.kept, (
        f"dlperf {name}: {outcome.failed} of {outcome.count} generated inputs broke the "
        f"invariant, {len(outcome.kept)} distinct causes (seed "
        f"{FUZZ_SEED or 'derandomized'}):\n\n" + "\n".join(outcome.kept.values()))


# ------------------------------------------------------------------------------------------------
# What each command is given
# ------------------------------------------------------------------------------------------------

def write_bytes(data: bytes, what: list[str]) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        path.write_bytes(data)
        return "; ".join(what) or "unchanged"
    return make


def copy_of(source: Path) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        shutil.copyfile(source, path)
        return f"a copy of {source.name}, unchanged"
    return make


def broken_db(base: Base, changes: list[DbChange]) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        shutil.copyfile(base.db, path)
        return "; ".join(apply_db_change(path, change, base) for change in changes)
    return make


@st.composite
def a_json(draw: Any, base: Base, names: tuple[str, ...], hot: tuple[TreePath, ...]
           ) -> tuple[Callable[[Path], str], str]:
    """A broken copy of one of the result JSON files ``names``."""
    source = draw(st.sampled_from(names))
    data, what = draw(json_file(Named(source, base.json[source]), hot))
    return write_bytes(data, [f"{source}.json"] + what), source


def valid_json(base: Base, source: str) -> Callable[[Path], str]:
    return copy_of(base.root / f"{source}.json")


@st.composite
def compare_examples(draw: Any, base: Base) -> Example:
    how = draw(st.sampled_from(["json", "json", "json", "db", "db", "db-sides"]))
    flags = draw(st.sampled_from([[], ["--test", "welch"], ["--json", "{out}"],
                                  ["--across-devices"], ["--threshold", "0"]]))
    names = ("torch-a", "torch-b", "torch-infer", "torch-best", "external", "external-crash",
             "sweep-fuzz")
    if how == "json":
        broken, source = draw(a_json(base, names, HOT["compare"]))
        other = draw(st.sampled_from(names))
        files = {"broken.json": broken, "other.json": valid_json(base, other)}
        sides = ["{broken.json}", "{other.json}"]
        if draw(st.booleans()):
            sides.reverse()
        return Example(["compare", *sides, *flags], files)
    changes = draw(db_file(base, HOT["compare"]))
    files = {"broken.db": broken_db(base, changes), "valid.db": copy_of(base.db)}
    if how == "db-sides":
        sides = draw(st.sampled_from([["{broken.db}", "{valid.db}"], ["{valid.db}", "{broken.db}"],
                                      ["{broken.db}", "{broken.db}"]]))
        return Example(["compare", *sides, *flags], files)
    runs = base.torch_runs + base.external_runs
    sides = draw(st.sampled_from([
        [str(runs[0]), str(runs[-1])], [f"run:{base.torch_runs[0]}", f"run:{base.torch_runs[3]}"],
        ["sweep:fuzz", "sweep:fuzz"], [str(base.external_runs[0]), str(base.torch_runs[1])]]))
    return Example(["compare", *sides, "--db", "{broken.db}", *flags], files)


@st.composite
def gate_examples(draw: Any, base: Base) -> Example:
    flags = draw(st.sampled_from([[], ["--test", "welch"], ["--json", "{out}"],
                                  ["--max-slowdown", "0"], ["--max-slowdown", "50%"]]))
    how = draw(st.sampled_from(["files", "files", "db", "db", "mixed"]))
    if how == "files":
        broken, source = draw(a_json(base, ("torch-a", "torch-b", "external", "sweep-fuzz"),
                                     HOT["gate"]))
        other = draw(st.sampled_from(["torch-a", "torch-b", "sweep-fuzz"]))
        files = {"broken.json": broken, "other.json": valid_json(base, other)}
        sides = ["{broken.json}", "{other.json}"]
        if draw(st.booleans()):
            sides.reverse()
        return Example(["gate", "--baseline", sides[0], "--candidate", sides[1], *flags],
                       files)
    changes = draw(db_file(base, HOT["gate"]))
    files = {"broken.db": broken_db(base, changes)}
    if how == "db":
        sides = draw(st.sampled_from([["label=a", "label=b"], ["label=b", "label=a"],
                                      ["version=0.0+standin", "label=b"],
                                      ["env=torch", "label=b"]]))
        return Example(["gate", "--baseline", sides[0], "--candidate", sides[1],
                        "--db", "{broken.db}", *flags], files)
    files["valid.json"] = valid_json(base, draw(st.sampled_from(["torch-a", "torch-b"])))
    return Example(["gate", "--baseline", "label=a", "--candidate", "{valid.json}",
                    "--db", "{broken.db}", *flags], files)


@st.composite
def explain_examples(draw: Any, base: Base) -> Example:
    how = draw(st.sampled_from(["one", "two", "two", "db"]))
    if how in ("one", "two"):
        broken, _ = draw(a_json(base, ("torch-a", "torch-b", "sweep-fuzz", "external"),
                                HOT["explain"]))
        files = {"broken.json": broken}
        if how == "one":
            return Example(["explain", "{broken.json}"], files)
        files["other.json"] = valid_json(base, draw(st.sampled_from(["torch-a", "torch-b"])))
        sides = ["{broken.json}", "{other.json}"]
        if draw(st.booleans()):
            sides.reverse()
        return Example(["explain", *sides], files)
    files = {"broken.db": broken_db(base, draw(db_file(base, HOT["explain"])))}
    runs = draw(st.sampled_from([["--case", str(base.torch_runs[0])],
                                 [str(base.torch_runs[0]), str(base.torch_runs[-1])],
                                 [f"run:{base.torch_runs[2]}"],
                                 ["--case", str(base.external_runs[0])]]))
    return Example(["explain", *runs, "--db", "{broken.db}"], files)


@st.composite
def history_examples(draw: Any, base: Base) -> Example:
    files = {"broken.db": broken_db(base, draw(db_file(base, HOT["history"])))}
    which = draw(st.sampled_from([
        ["--framework", "torch", "--model", "resnet50", "--task", "train", "--batch-size", "2"],
        ["--framework", "torch", "--model", "resnet50", "--precision", "fp32", "--batch-size",
         "2", "--task", "train"], ["--framework", "torch", "--model", "resnet50"],
        ["--case", base.case_key], ["--case", str(base.torch_runs[0])],
        ["--case", str(base.external_runs[0])]]))
    more = draw(st.sampled_from([[], ["--order", "label"], ["--order", "version"],
                                 ["--json", "{out}"]]))
    return Example(["history", "--db", "{broken.db}", *which, *more], files)


@st.composite
def report_examples(draw: Any, base: Base) -> Example:
    files = {"broken.db": broken_db(base, draw(db_file(base, HOT["report"])))}
    fmt = draw(st.sampled_from(["md", "md", "csv", "json"]))
    more = draw(st.sampled_from([[], [], ["--sweep", "fuzz"], ["--title", "[b]x[/b] <i>"]]))
    return Example(["report", "--db", "{broken.db}", "--format", fmt, *more], files)


@st.composite
def sweep_examples(draw: Any, base: Base) -> Example:
    how = draw(st.sampled_from(["yaml", "yaml", "yaml", "yaml", "db"]))
    tune_db = draw(st.sampled_from(["tune_db", "--db"]))
    tree = dict(SWEEP, tune_db="tune.db") if tune_db == "tune_db" else {
        k: v for k, v in SWEEP.items() if k != "tune_db"}
    files: dict[str, Callable[[Path], str]] = {}
    if how == "yaml":
        broken, done = draw(tree_mutation(Named("sweep", tree), HOT["sweep"], yaml_nodes=True))
        damage = draw(byte_damage(YAML_BYTE_OPS))

        def make(path: Path) -> str:
            data, more = damaged(yaml_text(broken, path.parent / "PWNED").encode(
                "utf-8", "surrogatepass"), damage, YAML_BYTE_OPS)
            path.write_bytes(data)
            return "; ".join(done + more)
        files["sweep.yaml"] = make
        files["tune.db"] = copy_of(base.db)
    else:
        files["sweep.yaml"] = write_bytes(yaml.safe_dump(tree, sort_keys=False).encode(),
                                          ["valid"])
        files["tune.db"] = broken_db(base, draw(db_file(base)))
    return Example(["sweep", "{sweep.yaml}", "--dry-run", "--db", "{tune.db}"], files)


@st.composite
def run_config_examples(draw: Any, base: Base) -> Example:
    # the tune's tables are what --config reads: half the examples also break a cell of them
    changes = draw(db_file(base))
    if draw(st.booleans()):
        table = draw(st.sampled_from(["tune_studies", "tune_trials"]))
        changes.insert(0, json_cell_change(draw, base, table,
                                           draw(st.sampled_from(JSON_CELLS[table]))))
    which = draw(st.sampled_from(["best", "best", "best-fixed"]))
    return Example(["run", *RUN_FLAGS, "--config", which, "--db", "{tuned.db}", "--no-wait"],
                   {"tuned.db": broken_db(base, changes)})


# ------------------------------------------------------------------------------------------------
# The tests: one per command
# ------------------------------------------------------------------------------------------------

def test_compare_inputs(base):
    fuzz("compare", compare_examples(base), base)


def test_gate_inputs(base):
    fuzz("gate", gate_examples(base), base)


def test_explain_inputs(base):
    fuzz("explain", explain_examples(base), base)


def test_history_inputs(base):
    fuzz("history", history_examples(base), base)


def test_report_inputs(base):
    fuzz("report", report_examples(base), base)


def test_sweep_dry_run_inputs(base):
    fuzz("sweep", sweep_examples(base), base)


def test_run_config_best_inputs(base):
    with held_lock():
        fuzz("run", run_config_examples(base), base)
