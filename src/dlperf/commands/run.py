"""``dlperf run``: measure one case over its repeats, store it, print it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dlperf import display, envs, models, runner, sysinfo
from dlperf.spec import DEVICES, PRECISIONS, TASKS, Case, frameworks
from dlperf.store import DEFAULT_DB, Store


def positive_int(text: str) -> int:
    """An int flag; range checks are the spec's job so the message names the field."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None


def knob_pair(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip().replace("-", "_"), positive_int(value)


def add_case_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that describe a case; shared by every command that measures one."""
    parser.add_argument("--framework", required=True, choices=frameworks())
    parser.add_argument("--model", required=True, choices=models.names())
    parser.add_argument("--task", default="train", choices=TASKS)
    parser.add_argument("--batch-size", type=positive_int, default=16,
                        help="samples per device (default 16)")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                        help="torch.compile / XLA / to_static, as the framework offers")
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--devices", type=positive_int, default=1, help="devices per node")
    parser.add_argument("--nnodes", type=positive_int, default=1)
    parser.add_argument("--image-size", type=positive_int, help="vision models (default 224)")
    parser.add_argument("--num-classes", type=positive_int, help="vision models (default 1000)")
    parser.add_argument("--seq-len", type=positive_int, help="language models (default 128)")
    parser.add_argument("--vocab-size", type=positive_int, help="language models")
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                        type=knob_pair, help="any other model knob (see `dlperf models`)")
    parser.add_argument("--warmup-steps", type=positive_int, default=20,
                        help="steps before the window, the first included (default 20)")
    parser.add_argument("--steps", type=positive_int, default=100,
                        help="measured steps in the window (default 100)")
    parser.add_argument("--repeats", type=positive_int, default=7,
                        help="fresh worker processes (default 7)")
    parser.add_argument("--seed", type=positive_int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, dest="timeout_s",
                        help="seconds one repeat may take (default 1800)")


def case_from_args(args: argparse.Namespace) -> Case:
    knobs = dict(args.knob)
    knobs.update({name: getattr(args, name)
                  for name in ("image_size", "num_classes", "seq_len", "vocab_size")
                  if getattr(args, name) is not None})
    return Case(framework=args.framework, model=args.model, task=args.task,
                batch_size=args.batch_size, precision=args.precision, compile=args.compile,
                device=args.device, devices=args.devices, nnodes=args.nnodes, knobs=knobs,
                warmup_steps=args.warmup_steps, steps=args.steps, repeats=args.repeats,
                seed=args.seed, timeout_s=args.timeout_s)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("run", help="measure one case (fresh worker per repeat)")
    add_case_arguments(parser)
    parser.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    parser.add_argument("--json", type=Path, help="also write the result object to this file")
    return parser


def write_json(path: Path, payload: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)


def main(args: argparse.Namespace) -> int:
    case = case_from_args(args)
    envs.interpreter(case.framework)  # not installed: one line naming the install command
    env = sysinfo.capture()
    with Store(args.db) as store:
        try:
            with display.progress(case) as on_repeat:
                result = runner.run_case(case, store=store, env=env, on_repeat=on_repeat)
        except runner.Interrupted as stop:
            result = stop.result
            display.results_table([result])
            if args.json:
                write_json(args.json, result)
            raise KeyboardInterrupt from None
    display.results_table([result])
    if args.json:
        write_json(args.json, result)
    return 0 if result["status"] == "ok" else 1
