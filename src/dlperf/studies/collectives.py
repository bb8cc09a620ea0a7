"""``dlperf collectives``: what one job of collectives measures, and how it is started, read back
and stored.

The job's ranks are started by the launcher ``dlperf run`` uses for the framework's path
(:func:`dlperf.launchers.registry.launcher_for`: torchrun, dlperf's spawn, horovodrun, ...), as
one repeat of a :class:`~dlperf.spec.Case` that carries only what a launcher reads (framework,
processes, nodes, threads, launcher, environment, link); its model fields are not read. The case
file adds a ``collectives`` block, which turns the worker into the collectives' driver
(:mod:`dlperf.worker.collectives`). Rank 0's result holds the job's times: each iteration's the
slowest rank's.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlperf import runner
from dlperf.errors import UsageError
from dlperf.host import emulated
from dlperf.launchers.launch import Launcher
from dlperf.spec import Case, frameworks
from dlperf.worker.collectives import OPS, CollectivePath, bus_factor, elements

UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}
SIZE = re.compile(r"(\d+)\s*([KMG]?)(?:I?B)?", re.I)
MAX_BYTES = 2 ** 32  # 4 GiB: a float32 buffer of 2**30 elements, per rank and per buffer
# a stand-in for the fields a launcher never reads (the worker reads the collectives block)
VEHICLE_MODEL = "resnet50"


def parse_size(text: str) -> int:
    """Bytes of one size: digits with an optional K, M or G (powers of 1024)."""
    found = SIZE.fullmatch(text.strip())
    if not found:
        raise UsageError(f"--sizes: {text.strip()!r} is not a size; write bytes with an "
                         f"optional K, M or G (4K, 1M), a list (4K,64K) or a range (4K:64M)")
    nbytes = int(found.group(1)) * UNITS[found.group(2).upper()]
    if nbytes % 4 or not 4 <= nbytes <= MAX_BYTES:
        raise UsageError(f"--sizes: {text.strip()} is not a whole number of float32 elements "
                         f"between 4 bytes and 4G (a multiple of 4 bytes)")
    return nbytes


def parse_sizes(text: str) -> tuple[int, ...]:
    """``A:B`` (A, then every doubling up to B) or ``A,B,...``; two different sizes at least, as
    the model fits a latency and a bandwidth."""
    if ":" in text:
        low, _, high = text.partition(":")
        first, last = parse_size(low), parse_size(high)
        if first > last:
            raise UsageError(f"--sizes: {text!r} runs downwards; write SMALLEST:LARGEST")
        sizes = []
        while first <= last:
            sizes.append(first)
            first *= 2
    else:
        sizes = [parse_size(part) for part in text.split(",")]
    ordered = tuple(sorted(set(sizes)))
    if len(ordered) < 2:
        raise UsageError(f"--sizes: {text!r} gives one size; give two or more (the model fits "
                         f"a latency and a bandwidth), e.g. 4K:64M")
    return ordered


def with_paths() -> tuple[str, ...]:
    """The frameworks whose backend declares collective paths."""
    return tuple(name for name in frameworks()
                 if (Path(__file__).parent.parent / "backends" / name / "collectives.py"
                     ).is_file())


def paths_of(framework: str) -> tuple[CollectivePath, ...]:
    """The collective paths the framework's backend declares (``backends/<fw>/collectives.py``,
    read without the framework); UsageError where it has none."""
    if framework not in frameworks():
        raise UsageError(f"--framework: {framework!r} is not one of {', '.join(frameworks())}")
    if framework not in with_paths():
        raise UsageError(f"--framework: the {framework} backend has no collective path "
                         f"(backends/{framework}/collectives.py); `dlperf collectives` "
                         f"measures {', '.join(with_paths())}")
    return tuple(importlib.import_module(f"dlperf.backends.{framework}.collectives").PATHS)


def path_named(framework: str, name: str | None) -> CollectivePath:
    """The framework's path called ``name``; without one, its first CPU path."""
    paths = paths_of(framework)
    if name is None:
        return next(path for path in paths if path.device == "cpu")
    for path in paths:
        if path.name == name:
            return path
    raise UsageError(f"--path: {framework} has no collective path {name!r}; it has "
                     f"{', '.join(path.name for path in paths)}")


def parse_ops(text: str, path: CollectivePath, framework: str) -> tuple[str, ...]:
    """The operations asked for, each one the path has, in the order given, once each."""
    asked = [part.strip() for part in text.split(",") if part.strip()]
    if not asked:
        raise UsageError(f"--ops: {text!r} names no operation; {framework} {path.name} has "
                         f"{', '.join(path.ops)}")
    for op in asked:
        if op not in path.ops:
            known = "" if op in OPS else f" (dlperf knows {', '.join(OPS)})"
            raise UsageError(f"--ops: {framework} {path.name} has no {op!r}{known}; it has "
                             f"{', '.join(path.ops)}")
    return tuple(dict.fromkeys(asked))


@dataclass(frozen=True)
class Request:
    """One job of collectives, checked: every size and operation on ``nproc`` x ``nnodes``
    ranks through ``path``."""

    framework: str
    path: CollectivePath
    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    iters: int
    warmup: int
    nproc: int  # processes per node
    nnodes: int
    env: str = ""
    threads: int | None = None
    link: str = ""
    timeout_s: float = 900.0
    label: str = ""  # the user's tag (--label), kept with the rows

    def __post_init__(self) -> None:
        if self.nproc * self.nnodes < 2:
            raise UsageError(f"--nproc: {self.nproc} process(es) on {self.nnodes} node(s) "
                             f"exchange nothing; a collective needs 2 or more ranks")
        if self.iters < 1:
            raise UsageError(f"--iters: {self.iters} must be 1 or more")
        if self.warmup < 0:
            raise UsageError(f"--warmup: {self.warmup} must be 0 or more")
        ranks = self.nproc * self.nnodes
        for op in self.ops:
            if elements(op, self.sizes[0], ranks) == 0:
                raise UsageError(f"--sizes: {self.sizes[0]} bytes of {op} is less than one "
                                 f"float32 element per rank on {ranks} ranks; start at "
                                 f"{4 * ranks} bytes or more")

    def case(self) -> Case:
        """What the launcher reads: the framework, its environment, the ranks and their threads,
        the launcher the path declares, the device and the link."""
        return Case(framework=self.framework, model=VEHICLE_MODEL, batch_size=1,
                    device=self.path.device, devices=self.nproc, nnodes=self.nnodes,
                    threads=self.threads, launcher=self.path.launcher,
                    controller=self.path.controller, env=self.env,
                    link=self.link, repeats=1, timeout_s=self.timeout_s)

    def block(self) -> dict[str, Any]:
        """The case file's ``collectives`` block, which the worker's driver reads."""
        return {"path": self.path.name, "ops": list(self.ops), "sizes": list(self.sizes),
                "iters": self.iters, "warmup": self.warmup}


def run_job(request: Request, launcher: Launcher) -> dict[str, Any]:
    """Start the job through ``launcher`` and wait for it (at most the request's timeout):
    rank 0's result on the node holding it, this node's first rank's elsewhere, each with its
    ``status``; the launch's facts as ``launch``."""
    case = request.case()
    with tempfile.TemporaryDirectory(prefix="dlperf-collectives-") as tmp:
        work = Path(tmp)
        case_file = work / "case.json"
        case_file.write_text(json.dumps({**case.to_dict(), "collectives": request.block()}))
        spec = launcher(case, case_file, work)
        outcome = runner.execute(spec, work / "worker.log", case.timeout_s)
        ranks = sorted(work.glob("rank*.json"), key=lambda p: int(p.stem[4:]))
        results = [json.loads(path.read_text()) for path in ranks]
        log = ((work / "worker.log").read_text(errors="replace")
               if (work / "worker.log").exists() else outcome.log_tail)
    first = results[0] if results else {}
    out = dict(first, launch=spec.facts, wall_s=outcome.wall_s)
    failed = sorted((r for r in results if r.get("status") != "ok"),
                    key=lambda r: runner.is_peer_symptom(r, spec.peer_symptoms))
    if outcome.timed_out:
        out.update(status="timeout", error=f"the job exceeded the timeout of "
                                           f"{case.timeout_s:g} s (--timeout); it was stopped"
                                           f"{outcome.stacks_said}")
    elif failed and not runner.is_peer_symptom(failed[0], spec.peer_symptoms):
        out.update(status=failed[0]["status"], error=f"rank {failed[0]['rank']}: "
                                                     f"{failed[0]['error']}")
    elif outcome.returncode != 0 or not results:
        explained = spec.explain(log) if spec.explain is not None else None
        if explained is None and failed:
            explained = failed[0]["status"], f"rank {failed[0]['rank']}: {failed[0]['error']}"
        if explained is None and outcome.returncode and outcome.returncode < 0:
            explained = runner.signal_failure(outcome.returncode, outcome.log_tail)
        if explained is None:
            last = outcome.log_tail.splitlines()[-1] if outcome.log_tail.strip() else "no output"
            explained = "crash", (f"the job exited with code {outcome.returncode} and no "
                                  f"result: {last[:300]}")
        out.update(status=explained[0], error=explained[1])
    if out.get("status") != "ok":
        out["log_tail"] = outcome.failure_tail
    return out


def summary(times_s: list[float], op: str, nbytes: int, ranks: int) -> dict[str, float]:
    """Median time with the 10th and 90th percentiles (us), and the algorithm and bus
    bandwidths at the median (GB/s, 1e9 bytes): nccl-tests' algbw = bytes / time, busbw =
    algbw x the operation's factor."""
    times = np.asarray(times_s, dtype=float)
    median = float(np.median(times))
    algbw = nbytes / median / 1e9
    return {"time_us": median * 1e6, "time_p10_us": float(np.percentile(times, 10)) * 1e6,
            "time_p90_us": float(np.percentile(times, 90)) * 1e6, "algbw_gbs": algbw,
            "busbw_gbs": algbw * bus_factor(op, ranks)}


def cpu_summary(cpu_s: list[float] | None) -> dict[str, Any]:
    """The busiest rank's process CPU per iteration (``cpu_s``) and its median in us
    (``cpu_us``), kept in a row's detail; nothing for a worker that did not take it."""
    if not cpu_s:
        return {}
    return {"cpu_s": cpu_s, "cpu_us": float(np.median(np.asarray(cpu_s, dtype=float))) * 1e6}


def cpu_us(row: dict[str, Any]) -> float | None:
    """A stored row's median CPU per iteration in us, None where it was not taken."""
    value = (row.get("detail") or {}).get("cpu_us")
    return float(value) if isinstance(value, (int, float)) else None


def rows(request: Request, result: dict[str, Any]) -> list[dict[str, Any]]:
    """The store's rows of a finished job (rank 0's result): one per operation and size."""
    node = bool(os.environ.get(emulated.NODE_VARIABLE))  # started by --emulate-hosts
    ranks = request.nproc * request.nnodes
    detail = {**(result.get("facts") or {}), "launch": result.get("launch"),
              "placement": result.get("placement"), "label": request.label,
              "python": (result.get("env") or {}).get("python")}
    out = []
    for item in result["ops"]:
        out.append({"framework": request.framework, "path": request.path.name,
                    "env": request.env, "device": request.path.device, "nproc": request.nproc,
                    "nnodes": request.nnodes, "link": request.link or None,
                    "emulated": int(node), "host": result.get("host") or socket.gethostname(),
                    "op": item["op"], "bytes": int(item["bytes"]), "iters": request.iters,
                    "warmup": request.warmup, "times": item["times_s"],
                    "detail": {**detail, **cpu_summary(item.get("cpu_s"))},
                    **summary(item["times_s"], item["op"], int(item["bytes"]), ranks)})
    return out
