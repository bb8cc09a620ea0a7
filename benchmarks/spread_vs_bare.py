"""dlperf's own run-to-run spread beside a bare training loop's, on the same case.

Does the harness add noise? Each repeat is a fresh process, and the two kinds take turns:
fidelity.py's torch comparison is reused whole (``fidelity.run_ab``: `dlperf ab` of the
same-recipe loop, benchmarks/handwritten/torch_resnet50.py, wrapped by `dlperf external`,
against `dlperf run` of the same case, one repeat per turn, A B, B A, ... so host drift touches
both sides alike). From its pairs this prints, per side, samples/s of every repeat, their
median and CV (sample sd / mean, :func:`dlperf.stats.summarize`), and the CV difference dlperf
- bare in percentage points, as a Markdown table.

    python benchmarks/spread_vs_bare.py --pairs 10 --markdown spread.md --json spread.json
    python benchmarks/spread_vs_bare.py --pairs 2 --image-size 32 --batch-size 2 --steps 2

The default case (ResNet-50, image 64, batch 16, fp32, 8 warm-up and 20 timed steps) takes
about 10-20 s a repeat on 2 cores. Measure alone, on a quiet machine. Exit 0 when every pair
ran, 1 when a side failed (the table then has the pairs before it), 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import fidelity
from dlperf import outputs
from dlperf.cli import Parser, one_line
from dlperf.errors import UsageError
from dlperf.stats import summarize

FRAMEWORK = "torch"
KIND = "same-recipe"  # fidelity.LOOPS: the loop around dlperf's own network and recipe
PROG = "spread_vs_bare.py"


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, argparse.Namespace]:
    """This script's flags, and fidelity.py's namespace for the same case (checked by it)."""
    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10, help="dlperf/bare pairs (default 10)")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--warmup-steps", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", type=Path, help="write both sides' repeats and figures here")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    args = parser.parse_args(argv)
    outputs.check_writable("--json", args.json)
    outputs.check_writable("--markdown", args.markdown)
    case = fidelity.parse(["--framework", FRAMEWORK, "--loops", KIND, "--precision", "fp32",
                           "--no-compile", "--pairs", str(args.pairs),
                           "--image-size", str(args.image_size),
                           "--batch-size", str(args.batch_size),
                           "--warmup-steps", str(args.warmup_steps),
                           "--steps", str(args.steps)])
    return args, case


def side(values: list[float]) -> dict[str, Any]:
    summary = summarize(values)
    return {"repeats": summary["repeats"], "median": summary["median"], "cv": summary["cv"]}


def figures(entry: dict[str, Any]) -> dict[str, Any]:
    """Both sides' repeats, medians and CVs from fidelity's entry, and dlperf's CV - bare's."""
    dlperf, bare = side(entry["dlperf_values"]), side(entry["loop_values"])
    diff = (None if dlperf["cv"] is None or bare["cv"] is None
            else (dlperf["cv"] - bare["cv"]) * 100.0)
    return {"pairs": entry["pairs"], "loop": entry["loop"], "dlperf": dlperf, "bare": bare,
            "cv_difference_points": diff}


def markdown(found: dict[str, Any], case: argparse.Namespace) -> str:
    def cv(value: float | None) -> str:
        return "—" if value is None else f"{value:.2%}"

    lines = [f"torch ResNet-50, image {case.image_size}, batch {case.batch_size}, fp32, "
             f"{case.warmup_steps} warm-up + {case.steps} timed steps; {found['pairs']} pairs, "
             "interleaved in fresh processes (dlperf ab)", "",
             "| side | samples/s per repeat | median | CV |", "|---|---|---:|---:|"]
    for name, key in (("dlperf run", "dlperf"), (f"bare loop ({found['loop']})", "bare")):
        values = found[key]
        lines.append(f"| {name} | " + ", ".join(f"{v:.2f}" for v in values["repeats"])
                     + f" | {values['median']:.2f} | {cv(values['cv'])} |")
    diff = found["cv_difference_points"]
    lines += ["", "CV difference (dlperf - bare): "
              + ("—" if diff is None else f"{diff:+.2f} points")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    try:
        args, case = parse(argv)
    except UsageError as error:
        print(f"{PROG}: error: {one_line(error)}", file=sys.stderr)
        return 2
    entry, reason = fidelity.run_ab(FRAMEWORK, KIND, case)
    if entry is None or not entry["dlperf_values"]:
        print(f"{PROG}: no pair ran: {reason}", file=sys.stderr)
        return 1
    found = figures(entry)
    text = markdown(found, case)
    print(text, end="")
    if args.json:
        outputs.write_json(args.json, {**found, "failed": reason})
    if args.markdown:
        outputs.write_text("--markdown", args.markdown, text)
    if reason:
        print(f"{PROG}: a side failed: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
