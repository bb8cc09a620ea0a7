"""Fidelity of every backend: dlperf's throughput / a reference loop's, through `dlperf ab`.

Two kinds of reference loop (``--loops``, default both), each a `dlperf ab` of its own per
framework: side A the loop, wrapped by `dlperf external` and run by the framework environment's
interpreter (with the variables its registry entry declares, as dlperf's worker gets them); side
B `dlperf run` of the same case. `dlperf ab` runs the two alternately in fresh processes.

* ``same-recipe`` (benchmarks/handwritten/): the framework's idiomatic loop around dlperf's own
  network module and recipe. dlperf / loop near 1 says the *harness* neither costs nor inflates.
* ``independent`` (benchmarks/independent/): a loop that shares nothing with dlperf, written as
  the framework's documentation and model zoo write ResNet-50 v1.5 training, in the framework's
  default mode. dlperf / loop near 1 says dlperf's *backend* is as fast as what that framework's
  users write (issue 32). dlperf runs in the loop's mode (``INDEPENDENT``: jax jitted, MXNet
  hybridized, the others eager / graph as their default), fp32 only.

For each framework asked (default: every framework with a loop; one whose environment is not
installed is listed as skipped, with the reason) the host's state is recorded before and after
its pairs, and one table is printed: per loop kind, dlperf and loop samples/s, the ratio
dlperf/loop with a 95 % interval over the pair ratios (fidelity_table.py says how) and the pairs;
host state. A ratio within 0.97-1.03 is the target. Both sides run with OMP_NUM_THREADS set to
this process's usable cores unless it is set. `make fidelity` runs it (FIDELITY_PAIRS=4 ...; see
the Makefile).

    python benchmarks/fidelity.py --pairs 4 --json fidelity.json --markdown fidelity.md
    python benchmarks/fidelity.py --framework jax --loops independent --min-seconds 5 --pairs 6
    python benchmarks/fidelity.py --framework jax --precision amp-bf16 --loops same-recipe
    python benchmarks/fidelity.py --framework torch --image-size 112 --batch-size 16 \\
        --warmup-steps 8 --steps 20 --json fidelity-torch.json

``--min-seconds S`` makes every side's timed window last at least S seconds: dlperf gets
``--min-duration S``, the independent loops ``--min-seconds S``, the same-recipe loops their
optional ``--min-seconds S`` (each extends its window by whole steps, closed by its usual
synchronisation).

Shapes default to image 64, batch 8 (MindSpore image 32, batch 4: its CPU kernels make a step at
64 several times slower than the others'); --image-size / --batch-size set them for all.

For caffe2 the reference is Caffe2's own ``imagenet_trainer.py`` on its null input
(``handwritten/caffe2_resnet50.py`` runs it unchanged and reads its per-iteration rates). It shares
nothing with dlperf, so it is caffe2's *independent* loop; caffe2 has no same-recipe loop. Both
sides run Caffe2's CPU operators (dlperf's ``--option engine=cpu``), the engine the trainer can run.

Exit status: 0 when every framework asked was measured or skipped, 1 when one failed, 2 for bad
input (one line naming the flag, nothing measured).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

import fidelity_table as table
from dlperf import envs, outputs
from dlperf.cli import Parser, one_line
from dlperf.display import out
from dlperf.errors import UsageError
from dlperf.host import hoststate
from dlperf.launchers import launch

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
# same-recipe loops: benchmarks/handwritten/, around dlperf's own network modules
LOOPS = {"torch": "torch_resnet50.py", "tensorflow": "tf2_resnet50.py",
         "tensorflow1": "tf1_resnet50.py", "jax": "jax_resnet50.py",
         "paddle": "paddle_resnet50.py", "mxnet": "mxnet_resnet50.py",
         "mindspore": "mindspore_resnet50.py", "oneflow": "oneflow_resnet50.py"}


@dataclass(frozen=True)
class Independent:
    """A loop sharing nothing with dlperf, and the dlperf mode it is compared with (its own)."""

    path: str  # under benchmarks/
    compile: bool  # dlperf's --compile (on) or --no-compile (off): the loop's own mode
    mode: str  # the loop's mode in words
    other_mode: str = ""  # its mode in words with --compile / --no-compile the other way
    rate: str = r'"samples_per_s": ([0-9.eE+-]+)'  # its one JSON line
    cli: bool = True  # --image-size ... flags (else the positional BATCH IMAGE ... of caffe2's)
    # a difference from this loop that dlperf keeps on purpose (the recipe every backend
    # shares), with what it was measured to cost: a footnote under every table that shows it
    differs: str = ""


INDEPENDENT = {
    "torch": Independent("independent/torch_resnet50.py", False, "eager",
                         "torch.compile(model)"),
    "tensorflow": Independent(
        "independent/tensorflow_resnet50.py", False, "tf.function graph, no XLA",
        "tf.function(jit_compile=True), XLA",
        differs="weight decay: dlperf adds 1e-4 * sum(tf.nn.l2_loss(v)) over every variable "
                "inside its step, the loop a Keras L2(1e-4) regularizer on each kernel collected "
                "from model.losses (the Model Garden's form); the same maths, and the "
                "regularizers' bookkeeping cost the loop 4 % of a step without XLA (alternating "
                "steps, one thread); fresh-process pairs showed it on one host (1.044) and not on "
                "another (0.973) (docs/fidelity.md)"),
    "tensorflow1": Independent("independent/tensorflow1_resnet50.py", False,
                               "graph + Session, no XLA",
                               "graph + Session, XLA auto-clustering (ON_1)"),
    "jax": Independent("independent/jax_resnet50.py", True, "jax.jit step"),
    "paddle": Independent("independent/paddle_resnet50.py", False, "dygraph",
                          "paddle.jit.to_static(model)"),
    "mxnet": Independent("independent/mxnet_resnet50.py", True,
                         "hybridized, static_alloc + static_shape", "imperative Gluon"),
    "mindspore": Independent("independent/mindspore_resnet50.py", False, "PyNative",
                             "GRAPH_MODE"),
    "oneflow": Independent("independent/oneflow_resnet50.py", False, "eager, no nn.Graph",
                           "nn.Graph (forward, backward, optimizer)"),
    # not hand-written: Caffe2's own imagenet_trainer.py on its null input, run unchanged
    "caffe2": Independent("handwritten/caffe2_resnet50.py", False,
                          "Caffe2's imagenet_trainer.py, net as built, CPU operators "
                          "(dlperf --option engine=cpu)",
                          rate=r'"throughput": ([0-9.eE+-]+)', cli=False),
}
FRAMEWORKS = list(dict.fromkeys([*LOOPS, *INDEPENDENT]))
KINDS = tuple(key for key, _ in table.LOOP_KINDS)  # same-recipe, independent
NO_LOOP = {("caffe2", "same-recipe"): "no same-recipe loop: its reference, Caffe2's own "
                                      "imagenet_trainer.py, shares nothing with dlperf and is "
                                      "reported as caffe2's independent loop"}
# what dlperf's backends set when unset (they only quieten stderr); the loops get the same
QUIET = {"tensorflow": {"TF_CPP_MIN_LOG_LEVEL": "2"}, "tensorflow1": {"TF_CPP_MIN_LOG_LEVEL": "2"},
         "paddle": {"GLOG_minloglevel": "2"}, "oneflow": {"GLOG_minloglevel": "2"}}
RATE = r'"throughput": ([0-9.eE+-]+)'
SHAPE = (64, 8)  # image size, batch size
SHAPES = {"mindspore": (32, 4)}
MIN_IMAGE = 32  # ResNet-50's five stride-2 stages need at least 32 pixels
PROG = "fidelity.py"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--framework", action="append", choices=FRAMEWORKS,
                        help="repeatable; default: every framework with a loop")
    parser.add_argument("--loops", default=",".join(KINDS),
                        help=f"loop kinds, comma-separated (default {','.join(KINDS)})")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="both sides in the framework's compiled mode (--no-compile: both "
                             "not compiled); default: each loop's own mode (independent loops "
                             "as their framework's users run them, same-recipe ones eager, jax "
                             "compiled)")
    parser.add_argument("--batch-size", type=int, help="default 8 (mindspore 4)")
    parser.add_argument("--image-size", type=int, help="default 64 (mindspore 32)")
    parser.add_argument("--warmup-steps", type=int, default=8,
                        help="both sides' warm-up, the first step included")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--min-seconds", type=float, default=0.0,
                        help="every side's timed window lasts at least this long (default 0)")
    parser.add_argument("--json", type=Path, help="write the table (and every pair) here")
    parser.add_argument("--markdown", type=Path, help="write the table as Markdown here")
    args = parser.parse_args(argv)
    check(args)
    return args


def check(args: argparse.Namespace) -> None:
    """Bad input is one line naming the flag, before anything is measured."""
    bounds = {"--pairs": (args.pairs, 2, 1000), "--warmup-steps": (args.warmup_steps, 1, None),
              "--steps": (args.steps, 1, None), "--batch-size": (args.batch_size, 1, None),
              "--image-size": (args.image_size, MIN_IMAGE, None)}
    bounds["--min-seconds"] = (args.min_seconds, 0, None)
    for flag, (value, low, high) in bounds.items():
        if value is None or (value >= low and (high is None or value <= high)):
            continue
        allowed = f"between {low} and {high}" if high else f"at least {low}"
        raise UsageError(f"{flag}: {value:g} must be {allowed}")
    asked = [kind.strip() for kind in args.loops.split(",")]
    for kind in asked:
        if kind not in KINDS:
            raise UsageError(f"--loops: {kind!r} is not a loop kind; give a comma-separated "
                             f"subset of {','.join(KINDS)}")
    args.loops = [kind for kind in KINDS if kind in asked]
    outputs.check_writable("--json", args.json)
    outputs.check_writable("--markdown", args.markdown)
    if args.json and args.markdown and args.json.resolve() == args.markdown.resolve():
        raise UsageError(f"--markdown: {args.markdown} is also --json; name another file")


def shape(framework: str, args: argparse.Namespace) -> tuple[int, int]:
    image, batch = SHAPES.get(framework, SHAPE)
    return args.image_size or image, args.batch_size or batch


def compiled(framework: str, kind: str, args: argparse.Namespace) -> bool:
    """Both sides' mode for this comparison: --compile / --no-compile where given (jax always
    compiles its step); else an independent loop's own mode, and a same-recipe loop's eager."""
    if framework == "jax":
        return True
    if args.compile is not None:
        return bool(args.compile)
    return INDEPENDENT[framework].compile if kind == "independent" else False


def loop_path(framework: str, kind: str) -> Path:
    return (HERE / INDEPENDENT[framework].path if kind == "independent"
            else HERE / "handwritten" / LOOPS[framework])


def loop_variables(framework: str, python: str) -> dict[str, str]:
    """What the loop's process gets on top of ours: the registry's `env:` for the framework
    (e.g. OneFlow's LD_LIBRARY_PATH), expanded as dlperf's worker gets it, and the log levels
    dlperf's backends set when unset."""
    quiet = {k: v for k, v in QUIET.get(framework, {}).items() if k not in os.environ}
    return {**quiet, **envs.worker_variables(framework, python)}


def ab_command(framework: str, kind: str, args: argparse.Namespace, out: Path) -> list[str]:
    """`dlperf ab` of the framework's loop of this kind (A) against `dlperf run` of the same
    case (B), in the same mode."""
    image, batch = shape(framework, args)
    compile_flag = compiled(framework, kind, args)
    python = envs.interpreter(framework)
    variables = loop_variables(framework, python)
    script = str(loop_path(framework, kind))
    independent = INDEPENDENT.get(framework) if kind == "independent" else None
    if independent and independent.cli:
        loop = [python, script, "--image-size", str(image), "--batch-size", str(batch),
                "--warmup", str(args.warmup_steps), "--steps", str(args.steps),
                "--min-seconds", format(args.min_seconds, "g"),
                "--compile" if compile_flag else "--no-compile"]
    else:
        loop = [python, script, str(batch), str(image), str(args.warmup_steps),
                str(args.steps), args.precision, "1" if compile_flag else "0"]
        if args.min_seconds > 0:
            loop += ["--min-seconds", format(args.min_seconds, "g")]
    if variables:
        loop = ["env", *(f"{k}={v}" for k, v in variables.items()), *loop]
    described = ["--framework", framework, "--model", "resnet50", "--batch-size", str(batch),
                 "--precision", args.precision]
    name = f"{'independent' if kind == 'independent' else 'hand'}-{framework}"
    rate = independent.rate if independent else RATE
    hand = ["external", "--name", name, "--metric", rate, "--warmup", "0",
            *described, "--", *loop]
    harness = ["run", *described, "--image-size", str(image), "--warmup-steps",
               str(args.warmup_steps), "--steps", str(args.steps),
               "--compile" if compile_flag else "--no-compile"]
    if args.min_seconds > 0:
        harness += ["--min-duration", format(args.min_seconds, "g")]
    if framework == "caffe2":
        # Caffe2's trainer runs its CPU operators (its --use_ideep cannot build its net with
        # torch 1.8.1's wheel), so dlperf's side runs the same engine
        harness += ["--option", "engine=cpu"]
    return [sys.executable, "-m", "dlperf.cli", "ab", "--pairs", str(args.pairs),
            "--json", str(out), "--", *hand, "--", *harness]


def unavailable(framework: str, kind: str, args: argparse.Namespace) -> str | None:
    """Why this framework has no comparison of this kind, or None."""
    if kind == "same-recipe" and framework not in LOOPS:
        return NO_LOOP.get((framework, kind), "no same-recipe loop")
    if framework == "jax" and args.compile is False:
        return "--no-compile: jax has no uncompiled mode (the whole step is one jax.jit program)"
    if kind == "independent":
        if framework not in INDEPENDENT:
            return "no independent loop"
        if framework == "caffe2" and args.compile:
            return ("--compile: Caffe2 training has no compiled mode (its MKL-DNN transform "
                    "changes inference only) and its trainer applies none")
        if args.precision != "fp32":
            return f"the independent loops train fp32 only (--precision {args.precision})"
    return None


def ab_env() -> dict[str, str]:
    env = dict(os.environ)
    # Both sides get the same threads. dlperf gives its worker every usable core; a hand loop
    # left to its framework's default may take fewer (MXNet 1.9 did here: 25.1 vs 38.2
    # samples/s at image 64, batch 8; with OMP_NUM_THREADS=2 the hand loop ran 38.2-38.4)
    env.setdefault("OMP_NUM_THREADS", str(launch.usable_cores()))
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                    else "")
    return env


def host_now() -> dict[str, Any]:
    """The host-state snapshot dlperf takes around a repeat, plus the whole machine's idle share
    over one second and the 1-minute load average, the two figures the table shows."""
    state = hoststate.snapshot()
    load = state.get("load_average")
    state["load1"] = load[0] if load else None
    state["idle"] = round(1.0 - hoststate.machine_busy(), 3)
    return state


def run_ab(framework: str, kind: str, args: argparse.Namespace
           ) -> tuple[dict[str, Any] | None, str | None]:
    """One `dlperf ab` of this kind: (the table's entry, None) or, when it failed, (the entry
    of the pairs that completed or None, the reason)."""
    image, batch = shape(framework, args)
    loop = loop_path(framework, kind).relative_to(HERE.parent).as_posix()
    mode = "compiled" if compiled(framework, kind, args) else "not compiled"
    print(f"{framework}, {kind}: {args.pairs} pairs at image {image}, batch {batch} ({loop} vs "
          f"dlperf run, {mode})", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="dlperf-fidelity-") as tmp:
        out = Path(tmp) / "ab.json"
        done = subprocess.run(ab_command(framework, kind, args, out), env=ab_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL)
        sys.stderr.write(done.stderr)
        summary = json.loads(out.read_text()) if out.exists() else None
    if summary is None:
        lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
        return None, f"dlperf ab exit {done.returncode}: {lines[-1]}"
    entry = table.loop_entry(loop, summary)
    entry["compile"] = compiled(framework, kind, args)
    if kind == "independent":
        own = INDEPENDENT[framework]
        entry["mode"] = own.mode if entry["compile"] == own.compile else own.other_mode
        if own.differs:
            entry["differs"] = own.differs
    failed = summary.get("failed") or []
    if failed or done.returncode != 0:
        first = failed[0] if failed else {"side": "?", "status": f"exit {done.returncode}",
                                          "error": None}
        side = {"A": "loop", "B": "dlperf"}.get(first["side"], first["side"])
        reason = f"{side} side, {first['status']}: {first['error']}"
        entry["failed"] = reason
        return entry, reason
    return entry, None


def measure(framework: str, args: argparse.Namespace) -> dict[str, Any]:
    """One framework's row: skipped (not installed), failed (with the reason) or measured; one
    entry in ``loops`` per loop kind measured, and in ``missing`` why a kind asked has none."""
    image, batch = shape(framework, args)
    row: dict[str, Any] = {"framework": framework, "status": "measured", "reason": None,
                           "case": {"image_size": image, "batch_size": batch,
                                    "precision": args.precision,
                                    "compile": {kind: compiled(framework, kind, args)
                                                for kind in args.loops},
                                    "warmup_steps": args.warmup_steps, "steps": args.steps,
                                    "min_seconds": args.min_seconds},
                           "asked": list(args.loops), "loops": {}, "missing": {}, "host": None}
    for kind in args.loops:
        reason = unavailable(framework, kind, args)
        if reason:
            row["missing"][kind] = reason
    kinds = [kind for kind in args.loops if kind not in row["missing"]]
    if not kinds:
        return {**row, "status": "skipped", "reason": "; ".join(
            f"{kind}: {why}" for kind, why in row["missing"].items())}
    status = envs.status(framework)
    if not status.usable:
        reason = status.note or (f"not installed (`dlperf envs install {framework}`"
                                 + (f" --variant {status.variant}" if status.variant != "cpu"
                                    else "") + ")")
        return {**row, "status": "skipped", "reason": reason}
    before = host_now()
    others = hoststate.OtherProcesses()
    others.start()
    failures = []
    for kind in kinds:
        entry, reason = run_ab(framework, kind, args)
        if entry is not None:
            row["loops"][kind] = entry
        if reason:
            failures.append(f"{kind}: {reason}")
    # one span over the framework's pairs, both kinds
    row["host"] = {"before": before, "others": others.stop(tree_root=os.getpid()),
                   "after": host_now()}
    if failures:
        row.update(status="failed", reason="; ".join(failures))
    return row


def show(rows: list[dict[str, Any]]) -> None:
    kinds = table.kinds_measured(rows)
    grid = Table(title="dlperf fidelity: dlperf run vs the framework's own loop, interleaved")
    for name in table.header(rows):
        grid.add_column(name, overflow="fold")
    for row in rows:
        grid.add_row(*table.cells(row, kinds))
    out.print(grid)  # dlperf's own console: as wide when piped, every cell data
    for line in table.notes(rows):
        out.print(line)
    out.print(table.METHOD)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(argv)
    except UsageError as error:
        print(f"{PROG}: error: {one_line(error)}", file=sys.stderr)
        return 2
    frameworks = args.framework or FRAMEWORKS
    rows = [measure(framework, args) for framework in dict.fromkeys(frameworks)]
    settings = {"loops": ",".join(args.loops), "pairs": args.pairs,
                "precision": args.precision, "compile": args.compile,
                "image_size": args.image_size or "default", "batch_size": args.batch_size
                or "default", "warmup_steps": args.warmup_steps, "steps": args.steps,
                "min_seconds": args.min_seconds,
                "OMP_NUM_THREADS": ab_env()["OMP_NUM_THREADS"]}
    doc = table.document(rows, settings)
    show(rows)
    if args.json:
        outputs.write_json(args.json, doc)
    if args.markdown:
        outputs.write_text("--markdown", args.markdown, table.markdown(doc))
    return 1 if any(row["status"] == "failed" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
