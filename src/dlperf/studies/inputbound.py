"""Is training input-bound? ``dlperf run``'s real-data flags and ``--data both:DIR``.

``--data DIR`` trains on a dataset folder through the backend's real input pipeline (decode,
augment, batch, copy to the device) instead of one synthetic batch made on the device;
``--data-only`` measures that pipeline alone. ``--data both:DIR`` measures the same case twice,
compute-only (synthetic) and data+compute, stores both and reports their ratio: below
:data:`INPUT_BOUND_BELOW` the input pipeline, not the model, sets the pace.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from dlperf import display, envs, runner
from dlperf.launchers import launch
from dlperf.host import measurelock, peak, sysinfo
from dlperf import outputs
from dlperf.errors import UsageError
from dlperf.spec import LOADERS, Case
from dlperf.store import Store

BOTH = "both:"
INPUT_BOUND_BELOW = 0.9


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "input pipeline", "train on a dataset folder (`dlperf data make-images DIR`) instead of "
                          "a synthetic batch made once on the device")
    group.add_argument("--data", default="synthetic", metavar="synthetic|DIR|both:DIR",
                       help="synthetic (default): compute only; DIR: decode + augment + train "
                            "from that folder; both:DIR: measure both, store both and report "
                            f"their ratio (input-bound below {INPUT_BOUND_BELOW:g})")
    group.add_argument("--loader-workers", type=int, default=None, metavar="N",
                       help="data-loading processes (0: in the training process; default "
                            "min(4, the worker's CPUs))")
    group.add_argument("--loader", choices=LOADERS, default="native",
                       help="native (default): the framework's own pipeline; dali: NVIDIA DALI "
                            "(torch; GPU decode where there is a GPU, CPU-only otherwise; "
                            "`dlperf envs install dali`)")
    group.add_argument("--data-only", action="store_true",
                       help="the input pipeline alone: images/s it can feed, no model "
                            "(with --devices/--nnodes, every process its own shard)")
    group.add_argument("--cold-cache", action="store_true",
                       help="drop the page cache before each repeat (sync; echo 3 > "
                            "/proc/sys/vm/drop_caches where permitted, else evict the "
                            "dataset's files), checked and recorded")


def wants_both(args: argparse.Namespace) -> bool:
    data = getattr(args, "data", "synthetic") or ""
    return data == "both" or data.startswith(BOTH)


def case_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The Case fields these flags set (none when the command has no such flags)."""
    if not hasattr(args, "data"):
        return {}
    return {"data": args.data, "loader_workers": args.loader_workers,
            "data_only": bool(args.data_only), "cold_cache": bool(args.cold_cache),
            "loader": args.loader}


def both_cases(args: argparse.Namespace) -> tuple[Case, Case]:
    """(compute-only, data+compute): the same case on synthetic data and on the folder."""
    from dlperf.commands.run import case_from_args

    folder = args.data[len(BOTH):] if args.data.startswith(BOTH) else ""
    if not folder:
        raise UsageError("--data: both needs the dataset directory, as both:DIR")
    if args.data_only:
        raise UsageError("--data-only: both:DIR compares training on synthetic data with "
                         "training on the folder; --data-only trains nothing")
    fed = case_from_args(argparse.Namespace(**{**vars(args), "data": folder}))
    compute = dataclasses.replace(fed, data="synthetic", loader_workers=None, data_only=False,
                                  cold_cache=False, loader="native")
    return compute, fed


def comparison(compute: dict[str, Any], fed: dict[str, Any]) -> dict[str, Any]:
    """data+compute throughput over compute-only, with the verdict; null figures when either
    case failed."""
    base = compute.get("throughput", {}).get("median") if compute["status"] == "ok" else None
    mine = fed.get("throughput", {}).get("median") if fed["status"] == "ok" else None
    ratio = mine / base if mine and base else None
    if ratio is None:
        verdict = "unknown: a case did not measure ok"
    elif ratio < INPUT_BOUND_BELOW:
        verdict = "input-bound"
    else:
        verdict = "not input-bound"
    return {"compute_only_throughput": base, "data_compute_throughput": mine, "ratio": ratio,
            "input_bound_below": INPUT_BOUND_BELOW, "verdict": verdict,
            "compute_only_run_id": compute.get("run_id"),
            "compute_only_case_key": compute.get("case_key")}


def describe(block: dict[str, Any]) -> str:
    if block["ratio"] is None:
        return f"data+compute vs compute-only: {block['verdict']}"
    return (f"data+compute / compute-only = {block['ratio']:.2f}: {block['verdict']} "
            f"(input-bound below {block['input_bound_below']:g})")


def main(args: argparse.Namespace) -> int:
    """Measure compute-only then data+compute; store both, print both and the verdict."""
    from dlperf.commands import run as run_command

    cases = both_cases(args)
    outputs.check_writable("--json", args.json)
    quiet_wait = run_command.check_quiet_wait(args.require_quiet_s)
    rendezvous = run_command.rendezvous_from_args(args, cases[1])
    envs.interpreter(cases[1].framework)
    launchers = [launch.launcher_for(case, rendezvous) for case in cases]
    if isinstance(launchers[0], launch.MultiLauncher) and not launchers[0].is_master(cases[0]):
        peer_args = argparse.Namespace(**{**vars(args), "json": None})
        codes = [run_command.run_peer(case, launcher, peer_args)
                 for case, launcher in zip(cases, launchers)]
        if args.json:
            run_command.write_json(args.json, {
                "labels": [case.label() for case in cases],
                "stored_by": f"node 0 ({rendezvous.master_addr})",
                "node_rank": rendezvous.node_rank, "status": "ok" if not any(codes) else
                "failed"})
        return max(codes)
    env = sysinfo.capture()
    results: list[dict[str, Any]] = []
    with measurelock.held(not args.no_wait), Store(args.db) as store:
        peak.ensure(env, say=display.note)
        for case, launcher in zip(cases, launchers):
            try:
                with display.progress(case) as on_repeat:
                    results.append(runner.run_case(case, store=store, env=env,
                                                   on_repeat=on_repeat, launcher=launcher,
                                                   require_quiet_s=quiet_wait))
            except runner.Interrupted as stop:
                results.append(stop.result)
                display.results_table(results)
                if args.json:
                    run_command.write_json(args.json, results)
                raise KeyboardInterrupt from None
        compute, fed = results
        block = comparison(compute, fed)
        fed.setdefault("data", {})["vs_compute_only"] = block
        if fed.get("run_id") is not None:
            store.finish_run(fed["run_id"], fed)  # the verdict is stored with the result
    display.results_table(results)
    display.out.print(describe(block))
    if args.json:
        run_command.write_json(args.json, results)
    return 0 if all(result["status"] == "ok" for result in results) else 1
