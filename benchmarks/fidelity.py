"""Fidelity of every backend: dlperf's throughput / a hand-written loop's, through `dlperf ab`.

Side A is the framework's idiomatic hand-written ResNet-50 v1.5 loop (benchmarks/handwritten/,
same network module, same recipe), wrapped by `dlperf external`; side B is `dlperf run` of the
same case. `dlperf ab` runs them alternately in fresh processes; this script does that for each
framework asked (default: every framework with a loop; one whose environment is not installed is
listed as skipped, with the reason), records the host's state before and after each, and prints
one table: dlperf and loop samples/s, the ratio dlperf/loop with a 95 % interval over the pair
ratios (fidelity_table.py says how), host state. A ratio within 0.97-1.03 means the harness
neither costs nor inflates. Both sides run with OMP_NUM_THREADS set to this process's usable
cores unless it is set. `make fidelity` runs it (FIDELITY_PAIRS=4 ...; see the Makefile).

    python benchmarks/fidelity.py --pairs 4 --json fidelity.json --markdown fidelity.md
    python benchmarks/fidelity.py --framework jax --precision amp-bf16 --pairs 6
    python benchmarks/fidelity.py --framework torch --image-size 112 --batch-size 16 \\
        --warmup-steps 8 --steps 20 --json fidelity-torch.json

Shapes default to image 64, batch 8 (MindSpore image 32, batch 4: its CPU kernels make a step at
64 several times slower than the others'); --image-size / --batch-size set them for all.

For caffe2, side A is Caffe2's own ``imagenet_trainer.py`` on its null input
(``handwritten/caffe2_resnet50.py`` runs it unchanged and reads its per-iteration rates), and both
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
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import fidelity_table as table
from dlperf import envs, outputs
from dlperf.cli import Parser, one_line
from dlperf.errors import UsageError
from dlperf.host import hoststate
from dlperf.launchers import launch

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
LOOPS = {"torch": "torch_resnet50.py", "tensorflow": "tf2_resnet50.py",
         "tensorflow1": "tf1_resnet50.py", "jax": "jax_resnet50.py",
         "paddle": "paddle_resnet50.py", "mxnet": "mxnet_resnet50.py",
         "mindspore": "mindspore_resnet50.py", "oneflow": "oneflow_resnet50.py",
         # not hand-written: Caffe2's own imagenet_trainer.py on its null input, run unchanged
         "caffe2": "caffe2_resnet50.py"}
RATE = r'"throughput": ([0-9.eE+-]+)'
SHAPE = (64, 8)  # image size, batch size
SHAPES = {"mindspore": (32, 4)}
MIN_IMAGE = 32  # ResNet-50's five stride-2 stages need at least 32 pixels
PROG = "fidelity.py"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--framework", action="append", choices=list(LOOPS),
                        help="repeatable; default: every framework with a loop")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--batch-size", type=int, help="default 8 (mindspore 4)")
    parser.add_argument("--image-size", type=int, help="default 64 (mindspore 32)")
    parser.add_argument("--warmup-steps", type=int, default=8,
                        help="both sides' warm-up, the first step included")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=4)
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
    for flag, (value, low, high) in bounds.items():
        if value is None or (value >= low and (high is None or value <= high)):
            continue
        allowed = f"between {low} and {high}" if high else f"at least {low}"
        raise UsageError(f"{flag}: {value} must be {allowed}")
    outputs.check_writable("--json", args.json)
    outputs.check_writable("--markdown", args.markdown)
    if args.json and args.markdown and args.json.resolve() == args.markdown.resolve():
        raise UsageError(f"--markdown: {args.markdown} is also --json; name another file")


def shape(framework: str, args: argparse.Namespace) -> tuple[int, int]:
    image, batch = SHAPES.get(framework, SHAPE)
    return args.image_size or image, args.batch_size or batch


def ab_command(framework: str, args: argparse.Namespace, out: Path) -> list[str]:
    """`dlperf ab` of the framework's loop (A) against `dlperf run` of the same case (B)."""
    image, batch = shape(framework, args)
    compile_flag = args.compile or framework == "jax"  # jax always compiles its step
    loop = [envs.interpreter(framework), str(HERE / "handwritten" / LOOPS[framework]),
            str(batch), str(image), str(args.warmup_steps), str(args.steps),
            args.precision, "1" if compile_flag else "0"]
    described = ["--framework", framework, "--model", "resnet50", "--batch-size", str(batch),
                 "--precision", args.precision]
    hand = ["external", "--name", f"hand-{framework}", "--metric", RATE, "--warmup", "0",
            *described, "--", *loop]
    harness = ["run", *described, "--image-size", str(image), "--warmup-steps",
               str(args.warmup_steps), "--steps", str(args.steps),
               "--compile" if compile_flag else "--no-compile"]
    if framework == "caffe2":
        # Caffe2's trainer runs its CPU operators (its --use_ideep cannot build its net with
        # torch 1.8.1's wheel), so dlperf's side runs the same engine
        harness += ["--option", "engine=cpu"]
    return [sys.executable, "-m", "dlperf.cli", "ab", "--pairs", str(args.pairs),
            "--json", str(out), "--", *hand, "--", *harness]


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


def measure(framework: str, args: argparse.Namespace) -> dict[str, Any]:
    """One framework's row: skipped (not installed), failed (with the reason) or measured."""
    image, batch = shape(framework, args)
    row: dict[str, Any] = {"framework": framework, "status": "measured", "reason": None,
                           "case": {"image_size": image, "batch_size": batch,
                                    "precision": args.precision,
                                    "compile": args.compile or framework == "jax",
                                    "warmup_steps": args.warmup_steps, "steps": args.steps},
                           "loops": {}, "host": None}
    status = envs.status(framework)
    if not status.usable:
        reason = status.note or (f"not installed (`dlperf envs install {framework}`"
                                 + (f" --variant {status.variant}" if status.variant != "cpu"
                                    else "") + ")")
        return {**row, "status": "skipped", "reason": reason}
    loop = (HERE / "handwritten" / LOOPS[framework]).relative_to(HERE.parent).as_posix()
    print(f"{framework}: {args.pairs} pairs at image {image}, batch {batch} ({loop} vs dlperf "
          f"run)", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="dlperf-fidelity-") as tmp:
        out = Path(tmp) / "ab.json"
        before = host_now()
        others = hoststate.OtherProcesses()
        others.start()
        done = subprocess.run(ab_command(framework, args, out), env=ab_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL)
        row["host"] = {"before": before, "others": others.stop(tree_root=os.getpid()),
                       "after": host_now()}
        sys.stderr.write(done.stderr)
        summary = json.loads(out.read_text()) if out.exists() else None
    if summary is None:
        lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
        return {**row, "status": "failed", "reason": f"dlperf ab exit {done.returncode}: "
                                                    f"{lines[-1]}"}
    row["loops"]["same-recipe"] = table.loop_entry(loop, summary)
    failed = summary.get("failed") or []
    if failed or done.returncode != 0:
        first = failed[0] if failed else {"side": "?", "status": f"exit {done.returncode}",
                                          "error": None}
        side = {"A": "loop", "B": "dlperf"}.get(first["side"], first["side"])
        row.update(status="failed", reason=f"{side} side, {first['status']}: {first['error']}")
    return row


def show(rows: list[dict[str, Any]]) -> None:
    kinds = table.kinds_measured(rows)
    grid = Table(title="dlperf fidelity: dlperf run vs the framework's own loop, interleaved")
    for name in table.header(rows):
        grid.add_column(name, overflow="fold")
    for row in rows:
        grid.add_row(*table.cells(row, kinds))
    console = Console()
    console.print(grid)
    for line in table.notes(rows):
        console.print(line, markup=False, highlight=False)
    console.print(table.METHOD, markup=False, highlight=False)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(argv)
    except UsageError as error:
        print(f"{PROG}: error: {one_line(error)}", file=sys.stderr)
        return 2
    frameworks = args.framework or list(LOOPS)
    rows = [measure(framework, args) for framework in dict.fromkeys(frameworks)]
    settings = {"pairs": args.pairs, "precision": args.precision, "compile": args.compile,
                "image_size": args.image_size or "default", "batch_size": args.batch_size
                or "default", "warmup_steps": args.warmup_steps, "steps": args.steps,
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
