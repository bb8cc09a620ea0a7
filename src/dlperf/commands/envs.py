"""``dlperf envs list|install|check``: the per-framework environments workers run in."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.table import Table

from dlperf import display, envs
from dlperf.envs import check as env_check
from dlperf.envs import registry


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("envs", help="per-framework environments: list, install, check")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    actions.required = True

    actions.add_parser("list", help="each framework: installed?, where, Python, version")

    install = actions.add_parser("install", help="create a framework's environment from the "
                                                 "pinned requirement set (no-op when current)")
    install.add_argument("frameworks", nargs="+", metavar="FRAMEWORK",
                         help=f"one or more of: {', '.join(registry.names())}")
    install.add_argument("--python", help="interpreter to build the environment from "
                                          "(default: found by the version the pins need)")
    install.add_argument("--force", action="store_true", help="rebuild even when current")
    install.add_argument("--verbose", "-v", action="store_true", help="show pip's output")

    check = actions.add_parser("check", help="import the framework in its environment and run "
                                             "one tiny training step through the worker")
    check.add_argument("framework", metavar="FRAMEWORK")
    check.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    return parser


def _list() -> int:
    table = Table(title=f"framework environments ({envs.root()})")
    for column in ("framework", "state", "python", "version", "path"):
        table.add_column(column, overflow="fold")
    styles = {"main": "green", "installed": "green", "outdated": "yellow",
              "not installed": "dim"}
    for name in registry.names():
        st = envs.status(name)
        state = f"[{styles.get(st.state, '')}]{st.state}[/]"
        if st.note and st.state == "outdated":
            state += f"\n[dim]{st.note}[/]"
        table.add_row(name, state, st.python or "-", st.version or "-", st.path or "-")
    display.out.print(table)
    return 0


def _install(args: argparse.Namespace) -> int:
    for name in args.frameworks:
        registry.get(name)  # reject a typo before installing anything
    if args.python and len(args.frameworks) > 1:
        from dlperf.errors import UsageError
        raise UsageError("--python applies to one framework at a time")
    failed = 0
    for name in args.frameworks:
        try:
            done = envs.install(name, python=args.python, force=args.force,
                                verbose=args.verbose,
                                say=lambda line: print(line, file=sys.stderr, flush=True))
        except envs.InstallError as error:
            print(f"dlperf envs install: {error}", file=sys.stderr)
            failed += 1
            continue
        where = "dlperf's own environment" if done.action == "main" else done.path
        took = f" in {done.seconds:.0f} s" if done.action == "installed" else ""
        print(f"{name}: {done.action}{took} — {name} {done.version or '?'}, "
              f"Python {done.python}, {where}")
    return 1 if failed else 0


def _check(args: argparse.Namespace) -> int:
    report = env_check.check(args.framework, device=args.device)
    print(f"{report.framework}: python {report.python}")
    if not report.import_ok:
        print(f"{report.framework}: import failed: {report.version}")
        return 1
    print(f"{report.framework}: import ok, version {report.version}")
    if report.result is None:
        print(f"{report.framework}: {report.note}")
        return 1
    res = report.result
    case = res["case"]
    what = (f"{case['model']} train, batch {case['batch_size']}, "
            f"image {case['knobs'].get('image_size')}, {case['steps']} steps")
    if res["status"] != "ok":
        print(f"{report.framework}: tiny step FAILED ({what}): {res['status']}: {res.get('error')}")
        return 1
    losses = (res.get("loss") or {}).get("last") or []
    loss = losses[-1] if losses else None
    thr = (res.get("throughput") or {}).get("median")
    loss_text = f", loss {loss:.4f}" if isinstance(loss, float) else ""
    thr_text = f", {thr:.1f} samples/s" if thr else ""
    print(f"{report.framework}: tiny training step ok ({what}{thr_text}{loss_text})")
    return 0


def main(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list()
    if args.action == "install":
        return _install(args)
    return _check(args)
