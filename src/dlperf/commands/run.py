"""``dlperf run``: measure one case over its repeats, store it, print it."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from dlperf import display, envs, models, runner, scaling
from dlperf.host import measurelock, peak, sysinfo
from dlperf.launchers import launch, slurm
from dlperf.errors import UsageError
from dlperf import numbers, outputs
from dlperf.numbers import finite_float
from dlperf.spec import DEVICES, PRECISIONS, TASKS, Case, frameworks
from dlperf.studies import inputbound
from dlperf.store import DEFAULT_DB, Store
from dlperf.worker import steady


def positive_int(text: str) -> int:
    """An int flag; range checks are the spec's job so the message names the field."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None


def warmup_steps(text: str) -> int | str:
    """``auto`` (until steady) or a count; the range is the spec's to check."""
    return "auto" if text.strip().lower() == "auto" else positive_int(text)


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
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile / XLA / to_static, as the framework offers")
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--devices", type=positive_int, default=1, help="devices per node")
    parser.add_argument("--nnodes", type=positive_int, default=None,
                        help="nodes (default 1, or the Slurm step's node count)")
    parser.add_argument("--threads-per-process", type=positive_int, dest="threads",
                        help="CPU threads of each worker process (OMP/MKL; default: the node's "
                             "cores divided among its processes, or the framework's own)")
    parser.add_argument("--image-size", type=positive_int, help="vision models (default 224)")
    parser.add_argument("--num-classes", type=positive_int, help="vision models (default 1000)")
    parser.add_argument("--seq-len", type=positive_int, help="language models (default 128)")
    parser.add_argument("--vocab-size", type=positive_int, help="language models")
    parser.add_argument("--partial-fc", type=finite_float, default=None, metavar="FRACTION",
                        help="face models: the fraction of class centres sampled per step "
                             "(Partial FC), e.g. 0.1; the knob partial_fc in percent")
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                        type=knob_pair, help="any other model knob (see `dlperf models`)")
    add_warmup_arguments(parser)
    parser.add_argument("--steps", type=positive_int, default=100,
                        help="at least this many measured steps in the window (default 100)")
    parser.add_argument("--min-duration", type=finite_float, dest="min_duration_s", default=0.0,
                        metavar="SECONDS",
                        help="and a window of at least this many seconds (default 0)")
    parser.add_argument("--repeats", type=positive_int, default=7,
                        help="fresh worker processes (default 7)")
    parser.add_argument("--seed", type=positive_int, default=0)
    parser.add_argument("--timeout", type=finite_float, default=1800.0, dest="timeout_s",
                        help="seconds one repeat may take (default 1800)")


def add_warmup_arguments(parser: argparse.ArgumentParser, step: str = "step") -> None:
    """--warmup-steps and --warmup-max-steps (the case's warmup_steps and warmup_max_steps), for
    every command that measures a case (``step``: what it calls one, an inference iteration)."""
    parser.add_argument("--warmup-steps", type=warmup_steps, default="auto",
                        help=f"auto (default): warm up until the {step} time is steady (5-{step} "
                             "window, CV and drift within 5%%, at most --warmup-max-steps / "
                             f"60 s); or a fixed count, the first {step} included")
    parser.add_argument("--warmup-max-steps", type=positive_int, default=steady.MAX_STEPS,
                        metavar="N",
                        help=f"the {step} bound of --warmup-steps auto: stop warming up after N "
                             f"{step}s even if not steady (default {steady.MAX_STEPS})")


KNOB_FLAGS = {"image_size": "--image-size", "num_classes": "--num-classes",
              "seq_len": "--seq-len", "vocab_size": "--vocab-size", "partial_fc": "--partial-fc"}


def knobs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """--knob pairs and the knobs' own flags; a knob given twice is refused, never resolved."""
    knobs: dict[str, Any] = {}
    for name, value in args.knob:
        if name in knobs:
            raise UsageError(f"--knob {name}: given twice ({knobs[name]!r} and {value!r}); "
                             "give it once")
        knobs[name] = value
    flags = {name: getattr(args, name, None) for name in KNOB_FLAGS}
    fraction = flags["partial_fc"]
    if fraction is not None:
        if not 0.01 <= fraction <= 1:
            raise UsageError(f"--partial-fc: {fraction!r} must be a fraction in [0.01, 1]")
        flags["partial_fc"] = round(fraction * 100)
    for name, value in flags.items():
        if value is None:
            continue
        if name in knobs:
            raise UsageError(f"--knob {name}={knobs[name]}: {name} has its own flag, "
                             f"{KNOB_FLAGS[name]}, also given; give it once")
        knobs[name] = value
    return knobs


def case_from_args(args: argparse.Namespace) -> Case:
    knobs = knobs_from_args(args)
    return Case(framework=args.framework, model=args.model, task=args.task,
                batch_size=args.batch_size, precision=args.precision, compile=args.compile,
                device=args.device, devices=args.devices, nnodes=nnodes_from_args(args),
                threads=getattr(args, "threads", None), knobs=knobs,
                warmup_steps=args.warmup_steps,
                warmup_max_steps=getattr(args, "warmup_max_steps", steady.MAX_STEPS),
                steps=args.steps, repeats=args.repeats,
                seed=args.seed, timeout_s=args.timeout_s,
                min_duration_s=getattr(args, "min_duration_s", None) or 0.0,
                **inputbound.case_fields(args))


def nnodes_from_args(args: argparse.Namespace) -> int:
    """--nnodes, else the Slurm step's node count, else 1."""
    if getattr(args, "nnodes", None) is not None:
        return int(args.nnodes)
    place = slurm.placement(os.environ)
    return place.nnodes if place else 1


def add_rendezvous_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the nodes of a multi-node case meet (torchrun's static rendezvous)."""
    group = parser.add_argument_group(
        "multi-node", "run the same command on every node, each with its --node-rank; under "
        "Slurm these come from the SLURM_* variables")
    group.add_argument("--node-rank", type=positive_int, default=None,
                       help="this node's rank, 0 .. nnodes-1 (node 0 stores the result)")
    group.add_argument("--master-addr", default=None,
                       help="address of node 0, reachable from every node")
    group.add_argument("--master-port", type=positive_int, default=None,
                       help=f"port on node 0 (default {launch.DEFAULT_PORT})")
    group.add_argument("--rdzv-timeout", type=finite_float, default=launch.DEFAULT_RDZV_TIMEOUT_S,
                       help="seconds to wait for the other nodes to join before failing with "
                            f"status timeout (default {launch.DEFAULT_RDZV_TIMEOUT_S:g})")
    group.add_argument("--socket-ifname", default=None, metavar="IFACE",
                       help="network interface for the collectives (GLOO_SOCKET_IFNAME / "
                            "NCCL_SOCKET_IFNAME), e.g. the cluster's private network; "
                            "multi-node runs need a trusted network")
    group.add_argument("--node-addrs", default=None, metavar="ADDR,ADDR,...",
                       help="every node's address in node-rank order, for frameworks whose "
                            "configuration names each worker (TensorFlow's TF_CONFIG); under "
                            "Slurm: the job's node list")


def rendezvous_from_args(args: argparse.Namespace, case: Case) -> launch.Rendezvous:
    """The flags, with any left out filled from Slurm's variables; checked against the case."""
    place = slurm.placement(os.environ)
    node_rank, addr, port = args.node_rank, args.master_addr, args.master_port
    if place is not None:
        node_rank = place.node_rank if node_rank is None else node_rank
        addr = addr or place.master_addr
        port = port or place.master_port
    rendezvous = launch.Rendezvous(node_rank=node_rank or 0, master_addr=addr,
                                   master_port=port or launch.DEFAULT_PORT,
                                   timeout_s=args.rdzv_timeout,
                                   socket_ifname=args.socket_ifname,
                                   node_addrs=node_addrs_from_args(args, place, case.nnodes))
    rendezvous.check(case.nnodes)
    return rendezvous


def node_addrs_from_args(args: argparse.Namespace, place: slurm.Placement | None,
                         nnodes: int) -> tuple[str, ...]:
    """--node-addrs (comma-separated), else the Slurm step's node list when it names exactly
    the case's nodes, else none."""
    text = getattr(args, "node_addrs", None)
    if text is not None:
        addrs = tuple(part.strip() for part in text.split(","))
        if not all(addrs):
            raise UsageError(f"--node-addrs: {text!r} must be addresses separated by commas")
        return addrs
    if place is None or nnodes == 1:
        return ()
    nodelist = next((os.environ[name] for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                                    "SLURM_NODELIST") if os.environ.get(name)),
                    None)
    hosts = tuple(slurm.hostnames(nodelist)) if nodelist else ()
    return hosts if len(hosts) == nnodes else ()


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("run", help="measure one case (fresh worker per repeat)")
    add_case_arguments(parser)
    inputbound.add_arguments(parser)
    add_rendezvous_arguments(parser)
    parser.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    parser.add_argument("--json", type=Path, help="also write the result object to this file")
    parser.add_argument("--require-quiet", type=finite_float, nargs="?", const=QUIET_WAIT_S,
                        default=None, metavar="SECONDS", dest="require_quiet_s",
                        help="before each repeat wait until the host is idle (CPU < 10%% for "
                             f"3 s), at most SECONDS (default {QUIET_WAIT_S:g}); a host that "
                             "never quiets fails the case as busy")
    measurelock.add_argument(parser)
    return parser


QUIET_WAIT_S = 300.0


def check_quiet_wait(seconds: float | None) -> float | None:
    if seconds is not None and not (math.isfinite(seconds) and 0 < seconds <= 86400):
        raise UsageError(f"--require-quiet: {seconds!r} must be seconds in (0, 86400]")
    return seconds


def write_json(path: Path, payload: Any, flag: str = "--json") -> None:
    """Strict JSON (no NaN), written atomically; a failure is one line naming ``flag``."""
    outputs.write_text(flag, path, numbers.dumps(payload, indent=2))


def main(args: argparse.Namespace) -> int:
    if inputbound.wants_both(args):
        return inputbound.main(args)
    case = case_from_args(args)
    outputs.check_writable("--json", args.json)
    quiet_wait = check_quiet_wait(args.require_quiet_s)
    rendezvous = rendezvous_from_args(args, case)
    envs.interpreter(case.framework)  # not installed: one line naming the install command
    launcher = launch.launcher_for(case, rendezvous)
    if isinstance(launcher, launch.MultiLauncher) and not launcher.is_master(case):
        return run_peer(case, launcher, args)
    env = sysinfo.capture()
    with measurelock.held(not args.no_wait), Store(args.db) as store:
        peak.ensure(env, say=display.note)
        try:
            with display.progress(case) as on_repeat:
                result = runner.run_case(case, store=store, env=env, on_repeat=on_repeat,
                                         launcher=launcher, require_quiet_s=quiet_wait)
        except runner.Interrupted as stop:
            result = stop.result
            show(result, args.db)
            if args.json:
                write_json(args.json, result)
            raise KeyboardInterrupt from None
    show(result, args.db)
    if args.json:
        write_json(args.json, result)
    return 0 if result["status"] == "ok" else 1


def show(result: dict[str, Any], db: str) -> None:
    display.results_table([result])
    if len(result.get("ranks") or []) > 1:
        display.ranks_table(result)
    if scaling.total_devices(result["case"]) > 1:
        display.out.print(scaling.describe(result, db))


def run_peer(case: Case, launcher: launch.MultiLauncher, args: argparse.Namespace) -> int:
    """A node other than node 0: run its ranks repeat by repeat; node 0 stores the case."""
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
    marker = {"schema": result["schema"], "case_key": result["case_key"], "label": result["label"],
              "case": result["case"], "status": result["status"], "error": result["error"],
              "node_rank": rdzv.node_rank, "stored_by": f"node 0 ({rdzv.master_addr})",
              "repeats_done": result["repeats_done"], "launch": result.get("launch")}
    if result["status"] == "ok":
        display.out.print(f"node {rdzv.node_rank}: ok; node 0 stores the result of "
                          f"{case.label()}")
    else:
        display.out.print(f"node {rdzv.node_rank}: {result['status']} — {result['error']}")
    if args.json:
        write_json(args.json, marker)
    return 0 if result["status"] == "ok" else 1
