"""``dlperf envs list|install|check|lock|remove``: the per-framework environments workers run in
(the pinned ones, their GPU and Horovod builds, and version environments ``FW==X``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.table import Table
from rich.text import Text

from dlperf import display, envs
from dlperf.commands import HELP
from dlperf.envs import check as env_check
from dlperf.envs import dali as env_dali
from dlperf.envs import horovod as env_horovod
from dlperf.envs import lock as env_lock
from dlperf.envs import registry
from dlperf.envs import versions as env_versions
from dlperf.errors import UsageError
from dlperf.spec import frameworks, support


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("envs", help=HELP["envs"])
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    actions.required = True

    listing = actions.add_parser("list", help="every environment (pinned, GPU, Horovod and "
                                              "version environments FW==X): installed?, "
                                              "variant, Python, version, lock hash, where")
    listing.add_argument("--support", action="store_true",
                         help="also print what each backend runs: models, precisions per "
                              "device and task, compile modes, data-parallel devices, the "
                              "loader that reads --data DIR")

    install = actions.add_parser("install", help="create a framework's environment from the "
                                                 "pinned requirement set (no-op when current)")
    install.add_argument("frameworks", nargs="+", metavar="FRAMEWORK",
                         help=f"one or more of: {', '.join(registry.names())}; or dali "
                              f"(NVIDIA DALI for torch's --loader dali)")
    install.add_argument("--python", help="interpreter to build the environment from "
                                          "(default: found by the version the pins need)")
    install.add_argument("--version", metavar="X",
                         help="another release of the framework, in its own environment "
                              "FRAMEWORK==X beside the pinned one: X with its companions "
                              "resolved by pip into a hashed lock kept beside it "
                              "(docs/envs.md#version-environments)")
    install.add_argument("--force", action="store_true", help="rebuild even when current")
    install.add_argument("--verbose", "-v", action="store_true", help="show pip's output")
    install.add_argument("--variant", choices=registry.VARIANTS,
                         help="cpu or cuda build (default: cuda where an NVIDIA driver is "
                              "present and the framework publishes one, else cpu)")
    install.add_argument("--horovod", action="store_true",
                         help="build Horovod 0.28.1 from its source archive into the separate "
                              "environment FRAMEWORK+horovod (needs cmake and g++: `make "
                              "horovod`; MPI controller when Open MPI is installed); the plain "
                              "environment is not changed")

    lock = actions.add_parser("lock", help="regenerate a variant's hashed lock file from its "
                                           ".in requirements (resolves against the package index)")
    lock.add_argument("framework", metavar="FRAMEWORK")
    lock.add_argument("--variant", choices=registry.VARIANTS, default="cpu")
    lock.add_argument("--horovod", action="store_true",
                      help="write requirements/FRAMEWORK+horovod.txt: horovod.in resolved with "
                           "the framework's exact pins, minus what its lock holds")

    remove = actions.add_parser("remove", help="delete a version environment FW==X and its "
                                               "lock (the next install resolves afresh)")
    remove.add_argument("names", nargs="+", metavar="FW==X")

    check = actions.add_parser("check", help="import the framework in its environment and run "
                                             "one tiny training step through the worker")
    check.add_argument("framework", metavar="FRAMEWORK",
                       help="a framework (its pinned environment) or a version environment "
                            "FW==X")
    check.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    return parser


def _list(support: bool) -> int:
    table = Table(title=f"framework environments ({envs.root()})")
    for column in ("environment", "variant", "state", "python", "version", "lock", "path"):
        table.add_column(column, overflow="fold")
    styles = {"main": "green", "installed": "green", "outdated": "yellow",
              "lock changed": "yellow", "incomplete": "yellow", "not installed": "dim",
              "no such build": "dim"}
    for name in registry.names():
        for variant in _variants_to_show(name):
            st = envs.status(name, variant)
            state = Text(st.state, style=styles.get(st.state, ""))
            if st.note and st.state in ("outdated", "no such build"):
                state.append("\n" + st.note, style="dim")
            table.add_row(name, st.variant, state, st.python or "-", st.version or "-",
                          _short(st.lock_hash), st.path or "-")
        if registry.get(name).horovod:
            st = env_horovod.status(name)
            state = Text(st.state, style=styles.get(st.state, ""))
            state.append("\n" + st.note, style="dim")
            table.add_row(st.framework, st.variant, state, st.python or "-", st.version or "-",
                          _short(st.lock_hash), st.path or "-")
        for found in env_versions.installed(name):
            state = Text(found.state, style=styles.get(found.state, ""))
            if found.note:
                state.append("\n" + found.note, style="dim")
            table.add_row(found.name, "cpu", state, found.python or "-", found.version or "-",
                          _short(found.lock_hash), found.path)
    display.out.print(table)
    if support:
        display.out.print(support_table())
    return 0


def _short(digest: str | None) -> str:
    """The first 8 hex digits of an environment's lock hash (its stamp's ``hash``)."""
    return digest[:8] if digest else "-"


def _variants_to_show(name: str) -> list[str | None]:
    """Main frameworks: the build that is there. Others: this machine's default variant, plus
    every other variant that is installed."""
    fw = registry.get(name)
    if fw.main:
        return [None]
    chosen = envs.select(name).variant
    return [v for v in fw.variants
            if v == chosen or envs.status(name, v).state in ("installed", "outdated")]


def support_table() -> Table:
    """Framework x device x task: the models and precisions each backend declares, its compile
    modes, whether it runs data-parallel, which loader reads a dataset folder and the
    framework's own options (``--option``), from each backend's SUPPORT, no framework imported.
    Models, loader and options are a framework's, shown on its first row."""
    table = Table(title="what each backend runs (SUPPORT declarations)")
    for column in ("framework", "models", "device", "train", "infer", "compile off / on",
                   "data-parallel", "--data DIR", "--option"):
        table.add_column(column, overflow="fold")
    for name in frameworks():
        decl = support(name)
        first = True
        for device in ("cpu", "cuda"):
            per_task = decl.precisions.get(device)
            if per_task is None:
                continue
            table.add_row(name, ", ".join(decl.models) if first else "", device,
                          ", ".join(per_task.get("train", ())) or "-",
                          ", ".join(per_task.get("infer", ())) or "-",
                          f"{decl.mode(False)} / {decl.mode(True)}",
                          "yes" if device in decl.distributed else "no",
                          (decl.data_pipeline or "synthetic only") if first else "",
                          _options(decl) if first else "")
            first = False
    return table


def _options(decl: Any) -> str:
    """A backend's options as NAME=VALUE|VALUE, each followed by the environment variables its
    values set where it declares any (``onednn=on|off (TF_ENABLE_ONEDNN_OPTS=1|0)``), or "-"."""
    return "; ".join(f"{name}={'|'.join(option.values)}{_variables(option)}"
                     for name, option in sorted(decl.options.items())) or "-"


def _variables(option: Any) -> str:
    """`` (VAR=A|B)``: each variable an option's values set, its text per value in the values'
    order (``-`` for a value that leaves it unset); empty where the option sets none."""
    names = sorted({var for chosen in option.variables.values() for var in chosen})
    shown = [f"{var}=" + "|".join(option.variables.get(value, {}).get(var, "-")
                                  for value in option.values) for var in names]
    return f" ({', '.join(shown)})" if shown else ""


def _install(args: argparse.Namespace) -> int:
    for name in args.frameworks:
        if name.endswith(env_horovod.SUFFIX):
            raise UsageError(f"{name}: ask for Horovod's environment as `dlperf envs install "
                             f"{name[:-len(env_horovod.SUFFIX)]} --horovod`")
        if args.horovod:
            env_horovod.framework(name, args.variant or "cpu")  # refused: the reason, exit 2
        elif name != env_dali.NAME:
            registry.get(name)  # reject a typo before installing anything
    if args.python and len(args.frameworks) > 1:
        raise UsageError("--python applies to one framework at a time")
    if args.version is not None:
        return _install_version(args)
    failed = 0
    for name in args.frameworks:
        say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
        try:
            if args.horovod:
                done = env_horovod.install(name, variant=args.variant or "cpu",
                                           python=args.python, force=args.force,
                                           verbose=args.verbose, say=say)
            elif name == env_dali.NAME:
                done = env_dali.install(force=args.force, verbose=args.verbose, say=say)
            else:
                done = envs.install(name, python=args.python, force=args.force,
                                    verbose=args.verbose, variant=args.variant, say=say)
        except envs.InstallError as error:
            print(f"dlperf envs install: {error}", file=sys.stderr)
            failed += 1
            continue
        where = "dlperf's own environment" if done.action == "main" else done.path
        took = f" in {done.seconds:.0f} s" if done.action == "installed" else ""
        label = name + env_horovod.SUFFIX if args.horovod else name
        extra = f", horovod {env_horovod.VERSION}" if args.horovod else ""
        print(f"{label}: {done.action}{took} — {name} {done.version or '?'}{extra}, "
              f"Python {done.python}, {where}")
    return 1 if failed else 0


def _install_version(args: argparse.Namespace) -> int:
    """``--version X``: one framework, in its environment FW==X (refusals: one line, exit 2)."""
    if len(args.frameworks) > 1:
        raise UsageError("--version applies to one framework at a time")
    if args.horovod:
        raise UsageError("--version: Horovod is built for the pinned environments only, not "
                         "with --version")
    name = args.frameworks[0]
    if name == env_dali.NAME:
        raise UsageError("--version: dali is installed at its pinned version only")
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        done = env_versions.install(name, args.version, python=args.python, force=args.force,
                                    verbose=args.verbose, say=say, variant=args.variant)
    except envs.InstallError as error:
        print(f"dlperf envs install: {error}", file=sys.stderr)
        return 1
    took = f" in {done.seconds:.0f} s" if done.action == "installed" else ""
    print(f"{env_versions.env_name(name, args.version)}: {done.action}{took} — {name} "
          f"{done.version or '?'}, Python {done.python}, {done.path} (lock: "
          f"{env_versions.lock_file(env_versions.env_name(name, args.version))})")
    return 0


def _remove(args: argparse.Namespace) -> int:
    for name in args.names:
        env_versions.remove(name, say=lambda line: print(line))
    return 0


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


def _lock(args: argparse.Namespace) -> int:
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        if args.horovod:
            env_horovod.write_lock(args.framework, args.variant, say)
        elif args.framework == env_dali.NAME:
            env_lock.write_lock(env_dali.LOCK, say)
        else:
            env_lock.lock(args.framework, args.variant, say=say)
    except env_lock.LockError as error:
        print(f"dlperf envs lock: {error}", file=sys.stderr)
        return 1
    return 0


def main(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list(args.support)
    if args.action == "install":
        return _install(args)
    if args.action == "lock":
        return _lock(args)
    if args.action == "remove":
        return _remove(args)
    return _check(args)
