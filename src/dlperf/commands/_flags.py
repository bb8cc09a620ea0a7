"""The flags several subcommands share, and how they become a :class:`~dlperf.spec.Case`.

A flag spelled once here reads the same in every command that takes it (``run``, ``capacity``,
``infer``, ...), and its range errors come from the spec, naming the field.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from dlperf import models
from dlperf.envs import interpreters, selection
from dlperf.errors import UsageError
from dlperf.host import allocators, emulated
from dlperf.launchers import launch, slurm
from dlperf.numbers import finite_float
from dlperf.spec import (AUTO_REPEATS, CONTROLLERS, DEFAULT_TARGET_CI, DEVICES, LAUNCHERS,
                         LOADERS, PRECISIONS, TASKS, VERSION_ENV, Case, frameworks)
from dlperf.store import DEFAULT_DB
from dlperf.studies import inputbound, tuned
from dlperf.worker import steady


def integer(text: str) -> int:
    """Any int, zero and negative ones too (the name says no more than it checks): the range
    is the spec's to check, so the message names the field."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None


def repeats_count(text: str) -> int | str:
    """``auto`` (until the interval is tight: :data:`dlperf.spec.AUTO_REPEATS` at most) or a
    count; the range is the spec's to check."""
    return "auto" if text.strip().lower() == "auto" else integer(text)


def fraction(text: str) -> float:
    """``2%`` or ``0.02``: a share; its range is the spec's to check."""
    word = text.strip()
    try:
        value = float(word[:-1]) / 100 if word.endswith("%") else float(word)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a share such as 2% or 0.02") from None
    return value


def warmup_steps(text: str) -> int | str:
    """``auto`` (until steady) or a count; the range is the spec's to check."""
    return "auto" if text.strip().lower() == "auto" else integer(text)


def knob_pair(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip().replace("-", "_"), integer(value)


def add_db_argument(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """--db: the results database a measuring or reading command uses."""
    parser.add_argument("--db", default=DEFAULT_DB,
                        help=help or f"results database (default {DEFAULT_DB})")


def add_timeout_argument(parser: argparse.ArgumentParser, default: float, help: str,
                         dest: str = "timeout_s") -> None:
    """--timeout: seconds one repeat (or run, or model) may take before it is stopped."""
    parser.add_argument("--timeout", type=finite_float, default=default, dest=dest, help=help)


def add_case_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that describe a case; shared by every command that measures one."""
    parser.add_argument("--framework", required=True, choices=frameworks())
    parser.add_argument("--model", required=True, choices=models.names())
    parser.add_argument("--task", default="train", choices=TASKS)
    parser.add_argument("--batch-size", type=integer, default=16,
                        help="samples per device (default 16)")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile / XLA / to_static, as the framework offers")
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--devices", type=integer, default=1, help="devices per node")
    parser.add_argument("--nnodes", type=integer, default=None,
                        help="nodes (default 1, or the Slurm step's node count)")
    parser.add_argument("--threads-per-process", type=integer, dest="threads",
                        help="CPU threads of each worker process, and as many CPUs, which it is "
                             "pinned to, alone or beside others (OMP/MKL; default: the node's "
                             "cores divided among its processes, or the framework's own)")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="native",
                        help="native (default): the framework's own data parallelism; horovod: "
                             "horovodrun and hvd.DistributedOptimizer (tensorflow1, mxnet; "
                             "`dlperf envs install FRAMEWORK --horovod`)")
    parser.add_argument("--controller", choices=CONTROLLERS, default="gloo",
                        help="with --launcher horovod: gloo (default) or mpi (Open MPI's "
                             "mpirun, in a Horovod built with MPI)")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        dest="options",
                        help="one of the framework's own settings (`dlperf envs list "
                             "--support`), e.g. caffe2's engine=cpu; repeat for several")
    parser.add_argument("--allocator", choices=allocators.ALLOCATORS, default="",
                        help="the workers' malloc, preloaded (LD_PRELOAD): jemalloc or tcmalloc "
                             "(installed on this machine) instead of the system's (glibc)")
    add_knob_arguments(parser, partial_fc=True)
    add_warmup_arguments(parser)
    parser.add_argument("--steps", type=integer, default=100,
                        help="at least this many measured steps in the window (default 100)")
    parser.add_argument("--min-duration", type=finite_float, dest="min_duration_s", default=0.0,
                        metavar="SECONDS",
                        help="and a window of at least this many seconds (default 0)")
    parser.add_argument("--repeats", type=repeats_count, default=7,
                        help="fresh worker processes (default 7), or auto: until the 95%% "
                             "interval of the median is within --target-ci (at most "
                             f"{AUTO_REPEATS})")
    parser.add_argument("--target-ci", type=fraction, default=0.0, metavar="PCT",
                        help="stop repeating once the 95%% interval of the median is within "
                             f"this of it (e.g. 2%%; --repeats auto: {DEFAULT_TARGET_CI * 100:.0f}%%); "
                             "--repeats is then the most")
    parser.add_argument("--max-time", type=finite_float, dest="max_time_s", default=0.0,
                        metavar="SECONDS",
                        help="with --target-ci: start no repeat after this many seconds "
                             "(default 0: no bound)")
    parser.add_argument("--seed", type=integer, default=0)
    add_timeout_argument(parser, 1800.0, "seconds one repeat may take (default 1800)")
    add_environment_arguments(parser)


def add_knob_arguments(parser: argparse.ArgumentParser, partial_fc: bool) -> None:
    """The model knobs that have flags of their own, and --knob NAME=VALUE for the others."""
    parser.add_argument("--image-size", type=integer, help="vision models (default 224)")
    parser.add_argument("--num-classes", type=integer, help="vision models (default 1000)")
    parser.add_argument("--seq-len", type=integer, help="language models (default 128)")
    parser.add_argument("--vocab-size", type=integer, help="language models")
    if partial_fc:
        parser.add_argument("--partial-fc", type=finite_float, default=None, metavar="FRACTION",
                            help="face models: the fraction of class centres sampled per step "
                                 "(Partial FC), e.g. 0.1; the knob partial_fc in percent")
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                        type=knob_pair, help="any other model knob (see `dlperf models`)")


def add_warmup_arguments(parser: argparse.ArgumentParser, step: str = "step") -> None:
    """--warmup-steps and --warmup-max-steps (the case's warmup_steps and warmup_max_steps), for
    every command that measures a case (``step``: what it calls one, an inference iteration)."""
    parser.add_argument("--warmup-steps", type=warmup_steps, default="auto",
                        help=f"auto (default): warm up until the {step} time is steady (5-{step} "
                             "window, CV and drift within 5%%, at most --warmup-max-steps / "
                             f"60 s); or a fixed count, the first {step} included")
    parser.add_argument("--warmup-max-steps", type=integer, default=steady.MAX_STEPS,
                        metavar="N",
                        help=f"the {step} bound of --warmup-steps auto: stop warming up after N "
                             f"{step}s even if not steady (default {steady.MAX_STEPS})")


PROFILE_STEPS = 3


def add_profile_arguments(parser: argparse.ArgumentParser, step: str = "step") -> None:
    """--profile and --profile-steps (the case's profile_steps), for every command that
    measures a case."""
    parser.add_argument("--profile", action="store_true",
                        help=f"after the timed window, run --profile-steps more {step}s under "
                             "the framework's own profiler: where the time goes by category, "
                             "the top operators, a Chrome trace (`dlperf explain`)")
    parser.add_argument("--profile-steps", type=integer, default=None,
                        metavar="N", help=f"{step}s profiled with --profile (default "
                                          f"{PROFILE_STEPS}; 1 or more, only with --profile)")


def profile_steps_from_args(args: argparse.Namespace) -> int:
    """The case's profile_steps; --profile-steps that would profile nothing (0, or without
    --profile) is refused rather than ignored."""
    steps = getattr(args, "profile_steps", None)
    if not getattr(args, "profile", False):
        if steps is not None:
            raise UsageError(f"--profile-steps: {steps} does nothing without --profile; add "
                             f"--profile or leave --profile-steps out")
        return 0
    if steps is not None and steps < 1:
        raise UsageError(f"--profile-steps: {steps} would profile nothing; give 1 or more "
                         f"with --profile")
    return PROFILE_STEPS if steps is None else steps


def add_environment_arguments(parser: argparse.ArgumentParser) -> None:
    """--env / --python (which environment runs the worker) and --label (the user's tag of the
    measurement), for every command that measures a case."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--env", metavar="FRAMEWORK==VERSION", default="",
                       help="run in a version environment (`dlperf envs install FRAMEWORK "
                            "--version VERSION`; `dlperf envs list`) instead of the pinned one")
    where.add_argument("--python", metavar="PATH", default="",
                       help="run the worker with this interpreter (your own build, a conda env): "
                            f"checked that the framework imports (within "
                            f"{selection.BYO_CHECK_TIMEOUT_S:g} s, at most "
                            f"{interpreters.OUTPUT_LIMIT // 2**20} MiB of its output read), "
                            f"recorded, never changed")
    parser.add_argument("--label", default="", metavar="TEXT",
                        help="tag the results (a commit, a build id): `dlperf history` and "
                             "`dlperf gate` order and select by it")


def environment_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The case fields of --env / --python / --label. A --python path is made absolute but not
    resolved: a venv's bin/python is a link to its base interpreter, and only the link's path
    finds the venv's packages."""
    python = getattr(args, "python", "") or ""
    if python:
        python = os.path.abspath(os.path.expanduser(python))
    env = getattr(args, "env", "") or ""
    if env and not VERSION_ENV.fullmatch(env):
        raise UsageError(f"--env: {env!r} is not an environment name; --env takes a version "
                         f"environment FRAMEWORK==VERSION (`dlperf envs list`); an interpreter "
                         f"of your own is --python PATH")
    return {"env": python or env,
            "run_label": getattr(args, "label", "") or ""}


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
                target_ci=getattr(args, "target_ci", 0.0) or 0.0,
                max_time_s=getattr(args, "max_time_s", 0.0) or 0.0,
                plant_slowdown=getattr(args, "plant_slowdown", 0.0) or 0.0,
                seed=args.seed, timeout_s=args.timeout_s,
                min_duration_s=getattr(args, "min_duration_s", None) or 0.0,
                launcher=getattr(args, "launcher", "native"),
                controller=getattr(args, "controller", "gloo"),
                options=",".join(getattr(args, "options", None) or []),
                allocator=getattr(args, "allocator", None) or "", link=link_from_args(args),
                profile_steps=profile_steps_from_args(args), **input_fields(args),
                **environment_fields(args))


def nnodes_from_args(args: argparse.Namespace) -> int:
    """--nnodes, else --emulate-hosts, else the Slurm step's node count, else 1."""
    if getattr(args, "nnodes", None) is not None:
        return int(args.nnodes)
    if getattr(args, "emulate_hosts", None) is not None:
        return int(args.emulate_hosts)
    position = slurm.position(os.environ)
    return position.nnodes if position else 1


# ------------------------------------------------------------------------------------------------
# the input pipeline: --data and the loader (dlperf run)
# ------------------------------------------------------------------------------------------------

def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "input pipeline", "train on a dataset folder (`dlperf data make-images DIR`) instead of "
                          "a synthetic batch made once on the device")
    group.add_argument("--data", default="synthetic", metavar="synthetic|DIR|both:DIR",
                       help="synthetic (default): compute only; DIR: decode + augment + train "
                            "from that folder; both:DIR: measure both, store both and report "
                            f"their ratio (input-bound below {inputbound.INPUT_BOUND_BELOW:g})")
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


def input_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The Case fields the input-pipeline flags set (none when the command has no such flags)."""
    if not hasattr(args, "data"):
        return {}
    return {"data": args.data, "loader_workers": args.loader_workers,
            "data_only": bool(args.data_only), "cold_cache": bool(args.cold_cache),
            "loader": args.loader}


def cases_from_args(args: argparse.Namespace) -> list[Case]:
    """The case the flags describe; with ``--data both:DIR`` the input-bound study's two:
    compute-only, then data+compute (:func:`dlperf.studies.inputbound.both_cases`)."""
    data = getattr(args, "data", "synthetic") or ""
    if not inputbound.is_both(data):
        return [case_from_args(args)]
    folder = inputbound.folder_of(data, bool(args.data_only))
    fed = case_from_args(argparse.Namespace(**{**vars(args), "data": folder}))
    return list(inputbound.both_cases(fed))


# ------------------------------------------------------------------------------------------------
# where the nodes of a multi-node case meet
# ------------------------------------------------------------------------------------------------

def add_rendezvous_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the nodes of a multi-node case meet (torchrun's static rendezvous)."""
    group = parser.add_argument_group(
        "multi-node", "run the same command on every node, each with its --node-rank; under "
        "Slurm these come from the SLURM_* variables")
    group.add_argument("--node-rank", type=integer, default=None,
                       help="this node's rank, 0 .. nnodes-1 (node 0 stores the result)")
    group.add_argument("--master-addr", default=None,
                       help="address of node 0, reachable from every node")
    group.add_argument("--master-port", type=integer, default=None,
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
    group.add_argument("--rdzv-dir", default=None, metavar="DIR",
                       help="a directory every node shares (NFS, a cluster file system), for "
                            "frameworks whose processes meet through files: Caffe2's file "
                            "store across nodes")


def rendezvous_from_args(args: argparse.Namespace, case: Case) -> launch.Rendezvous:
    """The flags, with any left out filled from Slurm's variables; checked against the case."""
    position = slurm.position(os.environ)
    node_rank, addr, port = args.node_rank, args.master_addr, args.master_port
    if position is not None:
        node_rank = position.node_rank if node_rank is None else node_rank
        addr = addr or position.master_addr
        port = port or position.master_port
    rendezvous = launch.Rendezvous(node_rank=node_rank or 0, master_addr=addr,
                                   master_port=port or launch.DEFAULT_PORT,
                                   timeout_s=args.rdzv_timeout,
                                   socket_ifname=args.socket_ifname,
                                   node_addrs=node_addrs_from_args(args, position, case.nnodes),
                                   store_dir=args.rdzv_dir)
    rendezvous.check(case.nnodes)
    return rendezvous


def node_addrs_from_args(args: argparse.Namespace, position: slurm.JobPosition | None,
                         nnodes: int) -> tuple[str, ...]:
    """--node-addrs (comma-separated), else the Slurm step's node list when it names exactly
    the case's nodes, else none."""
    text = getattr(args, "node_addrs", None)
    if text is not None:
        addrs = tuple(part.strip() for part in text.split(","))
        if not all(addrs):
            raise UsageError(f"--node-addrs: {text!r} must be addresses separated by commas")
        return addrs
    if position is None or nnodes == 1:
        return ()
    hosts = tuple(slurm.node_hosts(os.environ))
    return hosts if len(hosts) == nnodes else ()


def add_emulation_arguments(parser: argparse.ArgumentParser) -> None:
    """--emulate-hosts and --link (the case's link): the case across hosts emulated on this
    machine (:mod:`dlperf.launchers.emulated`)."""
    group = parser.add_argument_group(
        "emulated hosts", "run the case across N hosts emulated on this machine (as root: network "
        "namespaces on a bridge, each with its own address, host name and CPUs), every node's "
        "`dlperf run` started for you")
    group.add_argument("--emulate-hosts", type=integer, default=None, metavar="N",
                       help="hosts to emulate (2 or more, at most one per CPU); sets --nnodes")
    group.add_argument("--link", default=None, metavar="RATE",
                       help="with --emulate-hosts: shape each host's link to RATE (tc's "
                            "spelling: 10gbit, 1gbit, 100mbit; at least 1mbit); part of the case")


def link_from_args(args: argparse.Namespace) -> str:
    """The case's link: --link in its one spelling; only with --emulate-hosts, or in a node that
    an emulation started (whose hosts it shaped), since dlperf shapes no real network."""
    text = getattr(args, "link", None)
    if text is None:
        return ""
    if getattr(args, "emulate_hosts", None) is None and not os.environ.get(
            emulated.NODE_VARIABLE):
        raise UsageError(f"--link: {text} shapes the links between emulated hosts; it needs "
                         f"--emulate-hosts N (dlperf shapes no real network)")
    return emulated.normalize_rate(text, "--link")


# ------------------------------------------------------------------------------------------------
# --config best: the configuration a finished `dlperf tune` found (dlperf run, dlperf infer)
# ------------------------------------------------------------------------------------------------

CONFIG_CHOICES = tuned.WHICH


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """--config: measure the case in the configuration its newest tune in --db found."""
    parser.add_argument("--config", choices=CONFIG_CHOICES, default=None,
                        help="the settings the newest finished `dlperf tune` of this case in "
                             "--db found: best, or best-fixed (the best at the case's own batch "
                             "size and precision); they replace the flags' values of the knobs "
                             "it searched")


def config_from_args(args: argparse.Namespace, case: Case) -> tuned.Tuned | None:
    """None without --config; else the tuned case, its result's marker and the line saying what
    was applied. A database without a finished tune of the case is one line (exit 2)."""
    which = getattr(args, "config", None)
    if not which:
        return None
    return tuned.from_db(args.db, case, which)
