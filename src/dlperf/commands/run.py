"""``dlperf run``: measure one case over its repeats, store it, print it; with ``--data both:DIR``
the input-bound study's two cases (:mod:`dlperf.studies.inputbound`), measured the same way."""

from __future__ import annotations

import argparse
import math
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text

from dlperf import display, outputs, runner, scaling, session
from dlperf.envs import selection
from dlperf.commands import HELP
from dlperf.commands._flags import (add_case_arguments, add_config_argument, add_db_argument,
                                    add_emulation_arguments, add_input_arguments,
                                    add_profile_arguments, add_rendezvous_arguments,
                                    cases_from_args, config_from_args, fraction,
                                    rendezvous_from_args)
from dlperf.errors import UsageError
from dlperf.explain import findings
from dlperf.host import measurelock
from dlperf.launchers import emulated, launch, registry
from dlperf.numbers import finite_float
from dlperf.spec import Case, support
from dlperf.studies import inputbound, tuned


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("run", help=HELP["run"])
    add_case_arguments(parser)
    add_profile_arguments(parser)
    add_input_arguments(parser)
    add_rendezvous_arguments(parser)
    add_emulation_arguments(parser)
    add_db_argument(parser)
    add_config_argument(parser)
    parser.add_argument("--json", type=Path, help="also write the result object to this file")
    parser.add_argument("--plant-slowdown", type=fraction, default=0.0, metavar="PCT",
                        help="calibration only: sleep inside every timed step so throughput "
                             "falls by PCT (e.g. 5%%); the case's label says PLANTED, and gate "
                             "and history never take it as a baseline")
    parser.add_argument("--require-quiet", type=finite_float, nargs="?", const=QUIET_WAIT_S,
                        default=None, metavar="SECONDS", dest="require_quiet_s",
                        help="before each repeat wait until the host is idle (CPU < 10%% for "
                             f"3 s), at most SECONDS (default {QUIET_WAIT_S:g}); a host that "
                             "never quiets fails the case as busy")
    measurelock.add_argument(parser)
    # --emulate-hosts writes each node's command line from the parsed flags with it
    parser.set_defaults(run_parser=parser)
    return parser


QUIET_WAIT_S = 300.0


def check_quiet_wait(seconds: float | None) -> float | None:
    if seconds is not None and not (math.isfinite(seconds) and 0 < seconds <= 86400):
        raise UsageError(f"--require-quiet: {seconds!r} must be seconds in (0, 86400]")
    return seconds


def refuse_unbuilt_model(case: Case) -> None:
    """A model the framework's backend does not build is a wrong command, not a measurement:
    one line with the backend's reason, before anything runs or is stored. (A sweep keeps such
    a cell as an ``unsupported`` result, so its table footnotes the framework's reason.)"""
    declared = support(case.framework)
    if case.model not in declared.models and not case.data_only:
        why = declared.refusal(case.to_dict(), "cpu")
        raise UsageError(f"--model: {why}; --framework {case.framework} runs --model "
                         f"{' or '.join(declared.models)}")


def main(args: argparse.Namespace) -> int:
    """One case, or the input-bound study's two (compute-only, then data+compute): checked,
    launched on every node, measured and stored on node 0, shown."""
    if args.emulate_hosts is not None:
        return across_emulated_hosts(args)
    cases, marker = configured(args, cases_from_args(args))
    refuse_unbuilt_model(cases[-1])
    study = len(cases) == 2
    outputs.check_writable("--json", args.json)
    quiet_wait = check_quiet_wait(args.require_quiet_s)
    rendezvous = rendezvous_from_args(args, cases[-1])
    # not installed, or a --python that cannot run it: one line naming what to do
    selection.case_python(cases[-1].framework, cases[-1].env)
    launchers = [registry.launcher_for(case, rendezvous) for case in cases]
    first = launchers[0]
    if isinstance(first, launch.MultiLauncher) and not first.is_master(cases[0]):
        return run_peers(cases, launchers, args.json)  # type: ignore[arg-type]

    def show_all(results: list[dict[str, Any]]) -> None:
        if study:
            display.results_table(results)
        else:
            show(results[0], args.db)

    def write(results: list[dict[str, Any]]) -> None:
        if args.json:
            outputs.write_json(args.json, results if study else results[0])

    def stopped(results: list[dict[str, Any]]) -> None:
        show_all(results)
        write(results)

    results, block = measure(cases, launchers, args, quiet_wait, stopped, marker)
    show_all(results)
    if block is not None:
        display.out.print(inputbound.describe(block))
    write(results)
    return 0 if all(result["status"] == "ok" for result in results) else 1


def across_emulated_hosts(args: argparse.Namespace) -> int:
    """--emulate-hosts N: checked here as a plain run is, then every node's `dlperf run` on its
    emulated host (:mod:`dlperf.launchers.emulated`; --config is applied by node 0)."""
    emulated.check_flags(args)
    cases = cases_from_args(args)
    refuse_unbuilt_model(cases[-1])
    outputs.check_writable("--json", args.json)
    check_quiet_wait(args.require_quiet_s)
    selection.case_python(cases[-1].framework, cases[-1].env)
    return emulated.run(args, args.run_parser, cases)


def configured(args: argparse.Namespace, cases: list[Case]
               ) -> tuple[list[Case], dict[str, Any] | None]:
    """``cases`` in the configuration ``--config`` names (said in one line), and the marker
    their results carry; as given, and None, without --config."""
    found = [config_from_args(args, case) for case in cases]
    if not found or found[0] is None:
        return cases, None
    display.out.print(Text(found[0].line), soft_wrap=True)  # one line, however long
    return [item.case for item in found if item is not None], found[0].marker


def measure(cases: list[Case], launchers: list[launch.Launcher], args: argparse.Namespace,
            quiet_wait: float | None, stopped: Callable[[list[dict[str, Any]]], None],
            marker: dict[str, Any] | None = None
            ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Measure and store ``cases`` in order under the host's lock; with two (the input-bound
    study) also the comparison of their throughputs, stored with the second. ``marker``: where
    the cases' settings came from (``--config best``), put on each result as ``config``. Ctrl-C
    hands what was measured to ``stopped`` and ends the command as interrupted."""
    results: list[dict[str, Any]] = []
    block = None
    with session.measuring(args.db, wait=not args.no_wait) as opened:
        for case, launcher in zip(cases, launchers):
            try:
                with display.progress(case) as on_repeat:
                    results.append(runner.run_case(case, store=opened.store, env=opened.env,
                                                   on_repeat=on_repeat, launcher=launcher,
                                                   require_quiet_s=quiet_wait))
                if marker is not None:
                    tuned.mark(results[-1], marker, opened.store)
            except runner.Interrupted as stop:
                if marker is not None:
                    tuned.mark(stop.result, marker, opened.store)
                results.append(stop.result)
                stopped(results)
                raise KeyboardInterrupt from None
        if len(results) == 2:
            block = inputbound.record_verdict(results, opened.store)
    return results, block


def show(result: dict[str, Any], db: str) -> None:
    display.results_table([result])
    if len(result.get("ranks") or []) > 1:
        display.ranks_table(result)
    if scaling.total_devices(result["case"]) > 1:
        display.out.print(scaling.describe(result, db))
    if result.get("profile"):
        show_profile(result)


def show_profile(result: dict[str, Any]) -> None:
    """Where the profiled step's time went, in one line, and the findings
    (`dlperf explain` shows the whole table)."""
    block = result["profile"]
    if not block.get("categories"):
        display.warn(f"profile: {block.get('unavailable') or block.get('error')}")
        return
    step = block["step_s"]
    parts = [f"{name} {seconds * 1e3:.1f} ({seconds / step:.0%})"
             for name, seconds in sorted(block["categories"].items(), key=lambda kv: -kv[1])
             if seconds / step >= 0.01]
    display.out.print(f"where the time goes (ms/step of {step * 1e3:.1f} profiled): "
                      + ", ".join(parts))
    for finding in findings.of_result(result):
        display.out.print(f"  - {finding.text}")


def run_peers(cases: list[Case], launchers: list[launch.MultiLauncher],
              json_path: Path | None) -> int:
    """A node other than node 0 runs its ranks of each case; node 0 stores them. The JSON file
    holds what this node knows: one case's marker, or the study's labels and status."""
    markers = [run_peer(case, launcher) for case, launcher in zip(cases, launchers)]
    codes = [0 if marker["status"] == "ok" else 1 for marker in markers]
    if json_path and len(cases) == 1:
        outputs.write_json(json_path, markers[0])
    elif json_path:
        rdzv = launchers[0].rendezvous
        outputs.write_json(json_path, {
            "labels": [case.label() for case in cases],
            "stored_by": f"node 0 ({rdzv.master_addr})",
            "node_rank": rdzv.node_rank, "status": "ok" if not any(codes) else "failed"})
    return max(codes)


def run_peer(case: Case, launcher: launch.MultiLauncher) -> dict[str, Any]:
    """A node other than node 0: run its ranks repeat by repeat; node 0 stores the case. What
    this node saw, as the marker its JSON file holds."""
    rdzv = launcher.rendezvous
    first = rdzv.node_rank * case.devices
    ranks = f"ranks {first}-{first + case.devices - 1}" if case.devices > 1 else f"rank {first}"
    display.err.print(f"node {rdzv.node_rank} of {case.nnodes} ({ranks}); node 0 at "
                      f"{rdzv.endpoint} stores the result")

    def on_repeat(record: dict[str, Any]) -> None:
        what = "ok" if record["status"] == "ok" else f"{record['status']}: {record['error']}"
        display.err.print(f"  repeat {record['repeat'] + 1}/{case.repeats}: {what}")

    try:
        result = runner.run_case(case, store=None, launcher=launcher, on_repeat=on_repeat)
    except runner.Interrupted:
        raise KeyboardInterrupt from None
    if result["status"] == "ok":
        display.out.print(f"node {rdzv.node_rank}: ok; node 0 stores the result of "
                          f"{case.label()}")
    else:
        display.out.print(f"node {rdzv.node_rank}: {result['status']} — {result['error']}")
    return {"schema": result["schema"], "case_key": result["case_key"], "label": result["label"],
            "case": result["case"], "status": result["status"], "error": result["error"],
            "node_rank": rdzv.node_rank, "stored_by": f"node 0 ({rdzv.master_addr})",
            "repeats_done": result["repeats_done"], "launch": result.get("launch"),
            # this node's ranks' own last lines (a timeout's: their stacks), which node 0 never sees
            "stderr_tail": result.get("stderr_tail"),
            # what this node's own monitor saw (its timeline, its host's state): node 0 keeps it
            # where it can read this file (emulated hosts: dlperf.launchers.emulated)
            "view": {"node_rank": rdzv.node_rank, "hostname": socket.gethostname(),
                     "monitor": result.get("monitor"), "timeline": result.get("timeline"),
                     "host": result.get("host")}}
