"""What one benchmark case is, with its defaults and validation.

A :class:`Case` is one point of the matrix. Everything that changes the measurement is a field,
so that two cases with the same normalised fields are the same experiment (see :meth:`Case.key`).
Validation raises :class:`SpecError` with one line that names the field and what is allowed;
the command line turns it into exit code 2.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, cast

from dlperf import models
from dlperf.backends.contract import Backend
from dlperf.data import imagefolder
from dlperf.envs import registry as envs_registry
from dlperf.envs.versions import ENV_NAME as VERSION_ENV
from dlperf.host import emulated
from dlperf.host.allocators import ALLOCATORS
from dlperf.numbers import MAX_SECONDS, is_number
from dlperf.worker import steady
from dlperf.worker.support import RING_WIRE, Support, Wire, format_options, parse_options

BACKENDS_DIR = Path(__file__).parent / "backends"

TASKS = ("train", "infer")
PRECISIONS = ("fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16", "int8")
DEVICES = ("auto", "cpu", "cuda")
DATA_SOURCES = ("synthetic",)  # or a dataset directory (dlperf data make-images)
# the input pipeline that reads a dataset directory: the framework's own, or NVIDIA DALI
LOADERS = ("native", "dali")
SCENARIOS = ("offline", "single-stream", "server")
# what starts and connects a case's processes: the framework's own data parallelism, or Horovod
# (horovodrun, hvd.DistributedOptimizer) over its Gloo or MPI controller
LAUNCHERS = ("native", "horovod")
CONTROLLERS = ("gloo", "mpi")
SERVER_FIELDS = ("rate_qps", "target_latency_ms", "min_queries")
# Knobs added to a model after results were first stored, likewise left out while at default.
LATER_KNOBS = {"clip_grad_norm": 1, "classifier_width": models.VGG_HIDDEN,
               "max_blocks": models.RESNET50_MAX_BLOCKS}
MAX_PROFILE_STEPS = 100
# `--repeats auto`: fresh-process repeats until the 95 % interval of the median (the percentile
# bootstrap of dlperf.stats) is within DEFAULT_TARGET_CI of it, at least AUTO_MIN_REPEATS (fewer
# give no interval worth the name) and at most AUTO_REPEATS. The values and what they cost are
# in docs/method.md ("Repeats until the interval is tight").
AUTO_REPEATS = 15
AUTO_MIN_REPEATS = 3
DEFAULT_TARGET_CI = 0.02




class SpecError(ValueError):
    """A case or sweep field holds a value that is not allowed."""


def frameworks() -> tuple[str, ...]:
    """Frameworks with a backend package in this install; adding a backend registers it."""
    return tuple(sorted(p.name for p in BACKENDS_DIR.iterdir()
                        if (p / "__init__.py").is_file()))


def contract(framework: str) -> Backend:
    """The backend's contract (:class:`dlperf.backends.contract.Backend`): a light import, no
    framework loaded."""
    return importlib.import_module(f"dlperf.backends.{framework}").BACKEND


def support(framework: str) -> Support:
    """The backend's own declaration of what it runs (a light import: no framework loaded)."""
    return contract(framework).support


def wire_of(framework: str, launcher: str | None, kind: str) -> Wire:
    """What a job's all-reduce puts on the wire on device ``kind``: Horovod's ring for
    ``launcher`` horovod, else the framework's own declaration (a ring's bytes where it declares
    none, or where no backend of that name is installed)."""
    if (launcher or "native") != "native" or framework not in frameworks():
        return RING_WIRE
    return support(framework).wire_for(kind)


def expected_device(case: "Case") -> str:
    """``cpu`` or ``cuda``: where the worker will run ``case``, from the declaration alone (no
    framework imported). ``auto`` is cuda where the backend declares CUDA and an NVIDIA driver is
    loaded (what selects the framework's CUDA build), else cpu."""
    if case.device != "auto":
        return case.device
    from dlperf.envs import manage  # imported here: the environments' modules import this one

    declared = support(case.framework)
    return "cuda" if "cuda" in declared.precisions and manage.driver_present() else "cpu"


def declared_refusal(case: "Case") -> str | None:
    """The backend's declared reason it will not run ``case`` where it would run, or None: such
    a case is never started (a sweep stores it refused, a tune leaves it out)."""
    return support(case.framework).refusal(case.to_dict(), expected_device(case))


def default_compile(framework: str) -> bool:
    """Off, unless the framework has no uncompiled mode (JAX jit-compiles the whole step), so
    that `dlperf run --framework jax` works without a flag."""
    return False not in support(framework).modes


# How a case field takes part in the case's identity (:meth:`Case.identity`, :meth:`Case.key`):
ALWAYS = "always"  # in every case's key
# added after results were first stored: out of the key while at its default, so the keys of
# earlier cases (and `sweep --resume`) stay what they were
UNLESS_DEFAULT = "unless-default"
NEVER = "never"  # how often, how long or how it is tagged, not what is measured


def declared(identity: str, baseline: bool, flag: str, default: Any = dataclasses.MISSING,
             factory: Any = dataclasses.MISSING) -> Any:
    """A :class:`Case` field with what the rest of dlperf needs to know about it, declared once:
    ``identity`` (ALWAYS, UNLESS_DEFAULT or NEVER), ``baseline`` (a multi-device result's
    1-device baseline must share it: :mod:`dlperf.scaling`) and ``flag`` (the `dlperf run` or
    `dlperf infer` flag that sets it). A row stored before the field existed reads its default.
    """
    metadata = {"identity": identity, "baseline": baseline, "flag": flag}
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Case:
    """One point of the benchmark matrix. ``batch_size`` is per device."""

    framework: str = declared(ALWAYS, True, "--framework")
    model: str = declared(ALWAYS, True, "--model")
    batch_size: int = declared(ALWAYS, True, "--batch-size")
    task: str = declared(ALWAYS, True, "--task", "train")
    precision: str = declared(ALWAYS, True, "--precision", "fp32")
    # None: the framework's default (see default_compile)
    compile: bool | None = declared(ALWAYS, True, "--compile", None)
    # what was asked; the baseline shares the device it resolved to (dlperf.scaling.config)
    device: str = declared(ALWAYS, False, "--device", "auto")
    devices: int = declared(ALWAYS, False, "--devices", 1)
    nnodes: int = declared(ALWAYS, False, "--nnodes", 1)
    # per process; None: the node's cores divided among its processes
    threads: int | None = declared(UNLESS_DEFAULT, True, "--threads-per-process", None)
    data: str = declared(ALWAYS, True, "--data", "synthetic")
    knobs: Mapping[str, Any] = declared(ALWAYS, True, "--knob", factory=dict)
    # "auto": until steady (dlperf.worker.steady), or a count
    warmup_steps: int | str = declared(ALWAYS, False, "--warmup-steps", "auto")
    # the step bound of "auto" (a fixed count ignores it)
    warmup_max_steps: int = declared(UNLESS_DEFAULT, False, "--warmup-max-steps",
                                     steady.MAX_STEPS)
    steps: int = declared(ALWAYS, False, "--steps", 100)
    # fresh worker processes; with target_ci > 0 the most of them (``--repeats auto``): stop
    # once the 95 % interval of the median is within target_ci of it (dlperf.runner)
    repeats: int = declared(NEVER, False, "--repeats", 7)
    target_ci: float = declared(NEVER, False, "--target-ci", 0.0)
    # with target_ci: no repeat starts after this many seconds of the case (0: no bound)
    max_time_s: float = declared(NEVER, False, "--max-time", 0.0)
    seed: int = declared(ALWAYS, False, "--seed", 0)
    timeout_s: float = declared(NEVER, False, "--timeout", 1800.0)
    # inference: how queries arrive (see dlperf.studies.infer / dlperf.studies.server), and a
    # minimum window time
    scenario: str = declared(UNLESS_DEFAULT, True, "--scenario", "offline")
    min_duration_s: float = declared(UNLESS_DEFAULT, False, "--min-duration", 0.0)
    server: Mapping[str, Any] = declared(UNLESS_DEFAULT, True, "--rate", factory=dict)
    # real input pipelines (``data`` a dataset directory): loader processes (None: min(4, the
    # worker's CPUs)), the pipeline alone with no model, the page cache dropped before each repeat
    loader_workers: int | None = declared(UNLESS_DEFAULT, True, "--loader-workers", None)
    data_only: bool = declared(UNLESS_DEFAULT, True, "--data-only", False)
    cold_cache: bool = declared(UNLESS_DEFAULT, True, "--cold-cache", False)
    # which pipeline reads the folder: "native" (the framework's own) or "dali" (NVIDIA DALI)
    loader: str = declared(UNLESS_DEFAULT, True, "--loader", "native")
    # what starts the processes and carries the gradients: "native" (the framework's own data
    # parallelism) or "horovod" (horovodrun; its controller "gloo" or "mpi"). Not in the
    # baseline: every engine is scaled over the framework's own 1-device run
    launcher: str = declared(UNLESS_DEFAULT, False, "--launcher", "native")
    controller: str = declared(UNLESS_DEFAULT, False, "--controller", "gloo")
    # the framework's own settings (its backend's SUPPORT.options), "name=value,..." sorted by
    # name: e.g. Caffe2's engine=cpu
    options: str = declared(UNLESS_DEFAULT, True, "--option", "")
    # steps run after the timed window under the framework's own profiler (0: none); like
    # repeats, not part of the experiment: the window is over before the profiler starts
    profile_steps: int = declared(NEVER, False, "--profile-steps", 0)
    # which environment runs the worker: "" the framework's pinned one; "FW==X" a version
    # environment (`dlperf envs install FW --version X`); an absolute path, a Python interpreter
    # dlperf did not make (bring your own: a source build, a conda env), run as it is
    env: str = declared(UNLESS_DEFAULT, True, "--env", "")
    # the user's tag for this measurement (a commit, a build id: `--label`); like repeats, not
    # part of the experiment: history and gate order and select results by it
    run_label: str = declared(NEVER, False, "--label", "")
    # the worker's malloc: "" the system's (glibc), or "jemalloc" / "tcmalloc" preloaded by the
    # launcher (LD_PRELOAD; dlperf.host.allocators finds the library on this machine)
    allocator: str = declared(UNLESS_DEFAULT, True, "--allocator", "")
    # the rate of the links between emulated hosts (`dlperf run --emulate-hosts N --link RATE`,
    # dlperf.host.emulated) in one spelling, "1gbit"; "": not shaped. Not in the baseline: a
    # 1-node result has no link
    link: str = declared(UNLESS_DEFAULT, False, "--link", "")
    # calibration only (benchmarks/calibration.py): the share of throughput a fixed sleep inside
    # every timed step takes away, so a verdict's power can be measured against a known change.
    # Part of the case (its own key and label), never a baseline (gate, history), never in a sweep
    plant_slowdown: float = declared(UNLESS_DEFAULT, False, "--plant-slowdown", 0.0)

    def __post_init__(self) -> None:
        if cast(Any, self.repeats) == "auto":  # repeats until the interval is tight, AUTO_REPEATS at most
            object.__setattr__(self, "repeats", AUTO_REPEATS)
            if not self.target_ci:
                object.__setattr__(self, "target_ci", DEFAULT_TARGET_CI)
        if isinstance(self.data, str) and self.data not in DATA_SOURCES and self.data:
            # one dataset, one identity, wherever the command was run from
            object.__setattr__(self, "data", str(Path(self.data).expanduser().resolve()))
        if self.compile is None:
            _choice("framework", self.framework, frameworks())
            # a data-only case runs no model: nothing to compile, whatever the framework
            object.__setattr__(self, "compile", False if self.data_only is True
                               else default_compile(self.framework))
        if isinstance(self.options, str):
            try:
                object.__setattr__(self, "options", format_options(parse_options(self.options)))
            except ValueError as error:
                raise SpecError(f"options: {error}; write NAME=VALUE[,NAME=VALUE]") from None
        if isinstance(self.link, str):  # one spelling per rate: 1000mbit is 1gbit, none is ""
            try:
                object.__setattr__(self, "link", emulated.normalize_rate(self.link, "link"))
            except ValueError as error:
                raise SpecError(str(error)) from None
        validate(self)
        try:
            resolved = models.resolve_knobs(self.model, dict(self.knobs))
        except (KeyError, ValueError) as error:
            raise SpecError(f"knobs: {error.args[0] if error.args else error}") from None
        object.__setattr__(self, "knobs", resolved)

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.devices * self.nnodes

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["knobs"] = dict(self.knobs)
        out["server"] = dict(self.server)
        return out

    def identity(self) -> dict[str, Any]:
        """The fields that define the experiment: not how many times or how long we wait."""
        out = self.to_dict()
        for field in dataclasses.fields(self):
            rule = field.metadata["identity"]
            at_default = out[field.name] == stored_default(field)
            if rule == NEVER or (rule == UNLESS_DEFAULT and at_default):
                out.pop(field.name)
        if out["warmup_steps"] != "auto":  # the bound of auto warm-up bounds nothing else
            out.pop("warmup_max_steps", None)
        for knob, default in LATER_KNOBS.items():
            if out["knobs"].get(knob) == default:
                out["knobs"].pop(knob)
        return out

    def key(self) -> str:
        """Stable hash of the normalised identity; equal cases share it across runs."""
        text = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def label(self) -> str:
        parts = [self.framework, self.model, self.task, f"bs{self.batch_size}", self.precision]
        if self.compile:
            parts.append("compile")
        if self.devices * self.nnodes > 1:
            parts.append(f"{self.nnodes}n{self.devices}d")
        if self.threads is not None:
            parts.append(f"{self.threads}thr")
        if self.launcher != "native":
            parts.append(self.launcher if self.controller == "gloo"
                         else f"{self.launcher}-{self.controller}")
        if self.options:
            parts.append(self.options)
        if self.env:
            parts.append(environment_name(self.framework, self.env))
        if self.allocator:
            parts.append(self.allocator)
        if self.link:
            parts.append(f"{self.link}-link")
        if self.plant_slowdown:
            parts.append(f"PLANTED-{self.plant_slowdown:.0%}-slower")
        if self.scenario != "offline":
            parts.append(self.scenario)
        if self.server:
            parts.append(f"{self.server['rate_qps']:g}qps")
        if self.data not in DATA_SOURCES:
            parts.append("data-only" if self.data_only else "data")
            if self.loader != "native":
                parts.append(self.loader)
            if self.loader_workers is not None:
                parts.append(f"{self.loader_workers}lw")
            if self.cold_cache:
                parts.append("cold")
        return " ".join(parts)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Case":
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise SpecError(f"unknown case field {unknown[0]!r}; allowed: "
                            + ", ".join(f.name for f in dataclasses.fields(cls)))
        return cls(**data)


def stored_default(field: dataclasses.Field) -> Any:
    """The value of ``field`` in a case stored before it existed: its default."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def field_defaults() -> dict[str, Any]:
    """Every defaulted case field's value for a row stored before it existed."""
    return {f.name: stored_default(f) for f in dataclasses.fields(Case)
            if not (f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING)}


def baseline_fields() -> tuple[str, ...]:
    """The case fields a multi-device result's 1-device baseline must share (dlperf.scaling)."""
    return tuple(f.name for f in dataclasses.fields(Case) if f.metadata["baseline"])


# Fields added after results were first stored, with the default at which they leave the key.
LATER_FIELDS = {f.name: stored_default(f) for f in dataclasses.fields(Case)
                if f.metadata["identity"] == UNLESS_DEFAULT}


BYO_PREFIX = "python:"  # the environment name of a bring-your-own interpreter
LABEL = re.compile(r"[^\x00-\x1f\x7f]{1,100}")  # fullmatch: `$` lets a final newline through


def environment_name(framework: str, env: str) -> str:
    """What a case's environment is called in tables and results: the framework's name for its
    pinned environment, ``FW==X`` for a version environment, ``python:PATH`` for one of the
    user's own."""
    if not env:
        return framework
    return env if VERSION_ENV.fullmatch(env) else BYO_PREFIX + env


def _validate_env(case: Case) -> None:
    """``env``: empty, ``FRAMEWORK==VERSION`` of this case's framework, or an absolute path to
    an interpreter (which :mod:`dlperf.envs.selection` checks before anything runs)."""
    if not isinstance(case.env, str):
        raise SpecError(f"env: {case.env!r} must be text: FRAMEWORK==VERSION or a Python path")
    if not isinstance(case.run_label, str) or (case.run_label
                                               and not LABEL.fullmatch(case.run_label)):
        raise SpecError(f"label: {case.run_label!r} must be 1-100 printable characters")
    if not case.env:
        return
    if case.launcher == "horovod":
        raise SpecError(f"env: --launcher horovod runs in the {case.framework}+horovod "
                        f"environment (`dlperf envs install {case.framework} --horovod`), not "
                        f"in {case.env}")
    version = VERSION_ENV.fullmatch(case.env)
    if version:
        if version.group(1) != case.framework:
            raise SpecError(f"env: {case.env!r} is an environment of {version.group(1)}, not of "
                            f"{case.framework}; write {case.framework}==VERSION")
        return
    if not os.path.isabs(case.env):
        raise SpecError(f"env: {case.env!r} must be FRAMEWORK==VERSION (`dlperf envs list`) or "
                        f"an absolute path to a Python interpreter")


def _choice(field: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise SpecError(f"{field}: {value!r} is not one of {', '.join(allowed)}")


def _at_least(field: str, value: Any, low: float, kind: type = int,
              high: float | None = None) -> None:
    """``low <= value (<= high)``; NaN and infinity fail (every comparison with NaN is false)."""
    # is_number first: a finite int or float, False (not OverflowError) for an int past float's
    # range, which YAML and JSON read from a long run of digits
    ok = is_number(value) and isinstance(value, (kind, int))
    if ok:
        number = cast(float, value)
        ok = low <= number and (high is None or number <= high)
    if not ok:
        what = "an integer" if kind is int else "a finite number"
        bound = f" and <= {high:g}" if high is not None else ""
        raise SpecError(f"{field}: {value!r} must be {what} >= {low}{bound}")


def validate(case: Case) -> None:
    """Raise SpecError naming the first bad field of ``case``."""
    _choice("framework", case.framework, frameworks())
    _choice("model", case.model, tuple(models.CATALOGUE))
    _choice("task", case.task, TASKS)
    _choice("precision", case.precision, PRECISIONS)
    _choice("device", case.device, DEVICES)
    if not isinstance(case.compile, bool):
        raise SpecError(f"compile: {case.compile!r} must be true or false")
    _at_least("batch_size", case.batch_size, 1)
    _at_least("devices", case.devices, 1)
    _at_least("nnodes", case.nnodes, 1)
    if case.threads is not None:
        _at_least("threads", case.threads, 1)
    if case.warmup_steps != "auto":
        if isinstance(case.warmup_steps, str):
            raise SpecError(f"warmup_steps: {case.warmup_steps!r} must be auto or an integer >= 1")
        _at_least("warmup_steps", case.warmup_steps, 1)
    _at_least("warmup_max_steps", case.warmup_max_steps, 1)
    _at_least("steps", case.steps, 2)
    _at_least("repeats", case.repeats, 1)
    _at_least("target_ci", case.target_ci, 0, kind=float, high=0.5)
    _at_least("plant_slowdown", case.plant_slowdown, 0, kind=float, high=0.5)
    if case.plant_slowdown and case.task != "train":
        raise SpecError("plant_slowdown: plants a slowdown in training steps only")
    _at_least("max_time_s", case.max_time_s, 0, kind=float, high=MAX_SECONDS)
    if case.target_ci and case.repeats < AUTO_MIN_REPEATS:
        raise SpecError(f"repeats: {case.repeats} is too few to stop on an interval "
                        f"(target_ci); give at least {AUTO_MIN_REPEATS}, or auto")
    if case.max_time_s and not case.target_ci:
        raise SpecError("max_time_s: bounds repeats until an interval is tight; it needs "
                        "target_ci (--repeats auto or --target-ci)")
    _at_least("seed", case.seed, 0)
    _at_least("timeout_s", case.timeout_s, 1, kind=float, high=MAX_SECONDS)
    _at_least("profile_steps", case.profile_steps, 0, high=MAX_PROFILE_STEPS)
    _validate_scenario(case)
    _validate_launcher(case)
    _validate_options(case)
    _validate_env(case)
    if case.allocator != "" and case.allocator not in ALLOCATORS:
        raise SpecError(f"allocator: {case.allocator!r} is not one of {', '.join(ALLOCATORS)} "
                        f"(or empty: the system's malloc)")
    _validate_link(case)
    allowed_knobs = models.get(case.model).knobs
    for name, value in case.knobs.items():
        if value is None:
            continue
        if name not in allowed_knobs:
            raise SpecError(f"{name}: not a knob of model {case.model}; "
                            f"allowed: {', '.join(allowed_knobs)}")
        _at_least(name, value, models.get(case.model).minimums.get(name, 1))
    _validate_data(case)


def _validate_data(case: Case) -> None:
    """``synthetic``, or a dataset directory with its manifest feeding an image classifier in a
    backend that has a real input pipeline; the pipeline's own fields only with a directory."""
    for field in ("data_only", "cold_cache"):
        if not isinstance(getattr(case, field), bool):
            raise SpecError(f"{field}: {getattr(case, field)!r} must be true or false")
    if case.loader_workers is not None:
        _at_least("loader_workers", case.loader_workers, 0)
    _choice("loader", case.loader, LOADERS)
    if case.loader == "dali" and case.loader_workers == 0:
        raise SpecError("loader_workers: DALI decodes in its own threads; --loader dali needs "
                        "--loader-workers 1 or more (or the default)")
    if case.data in DATA_SOURCES:
        for field, flag in (("loader_workers", "--loader-workers"), ("data_only", "--data-only"),
                            ("cold_cache", "--cold-cache"), ("loader", "--loader")):
            if getattr(case, field) != LATER_FIELDS[field]:
                raise SpecError(f"{field}: {flag} needs data to be a dataset directory "
                                f"(--data DIR), not {case.data}")
        return
    if not isinstance(case.data, str) or not case.data or not os.path.isdir(case.data):
        raise SpecError(f"data: {case.data!r} is neither {', '.join(DATA_SOURCES)} nor a "
                        "directory (make one with `dlperf data make-images DIR`)")
    try:
        manifest = imagefolder.read_manifest(case.data)
    except imagefolder.DatasetError as error:
        raise SpecError(f"data: {error}") from None
    if support(case.framework).data_pipeline is None:
        readers = [name for name in frameworks() if support(name).data_pipeline]
        raise SpecError(f"data: {case.framework} measures synthetic data only; a dataset "
                        f"directory is read by: {', '.join(readers)}")
    spec = models.get(case.model)
    if spec.kind != "vision":
        vision = ", ".join(name for name in models.CATALOGUE
                           if models.get(name).kind == "vision")
        raise SpecError(f"data: {case.model} is a {spec.kind} model; a dataset directory feeds "
                        f"the image classifiers only ({vision})")
    if case.task != "train":
        raise SpecError(f"data: a dataset directory feeds training (task train), not "
                        f"{case.task}")
    classes = models.resolve_knobs(case.model, dict(case.knobs))["num_classes"]
    if manifest["classes"] > classes:
        raise SpecError(f"data: the dataset has {manifest['classes']} classes but num_classes "
                        f"is {classes}; use --num-classes {manifest['classes']} or more")
    processes = case.devices * case.nnodes
    if manifest["count"] // processes < case.batch_size:
        raise SpecError(f"batch_size: {case.batch_size} per process is more than the dataset's "
                        f"{manifest['count']} images give each of {processes} processes")
    if case.data_only:
        if case.compile:
            raise SpecError("compile: --data-only runs no model, so there is nothing to compile")
        if case.precision != "fp32":
            raise SpecError(f"precision: --data-only runs no model; leave precision at fp32, "
                            f"not {case.precision}")
        # several processes: each reads its own shard, the window barriered and the warm-up
        # voted through the framework's collectives (one process with several GPUs, e.g.
        # tensorflow's MirroredStrategy, is the backend's own unsupported result)


def _validate_link(case: Case) -> None:
    """A link rate (normalised by ``__post_init__``: :func:`dlperf.host.emulated.normalize_rate`)
    only between two or more nodes."""
    if not isinstance(case.link, str):
        raise SpecError(f"link: {case.link!r} must be a rate such as 1gbit, or empty")
    if case.link and case.nnodes < 2:
        raise SpecError(f"link: a link rate shapes the network between nodes; it needs nnodes "
                        f"2 or more, not {case.nnodes}")


def _validate_launcher(case: Case) -> None:
    """The launcher the backend declares (its reason when it has none), Horovod for training
    only, and a controller only with Horovod."""
    _choice("launcher", case.launcher, LAUNCHERS)
    _choice("controller", case.controller, CONTROLLERS)
    if case.launcher != "horovod":
        if case.controller != "gloo":
            raise SpecError(f"controller: --controller {case.controller} is Horovod's; it needs "
                            f"--launcher horovod")
        return
    why = support(case.framework).launcher_refusal(case.launcher)
    if why is not None:
        offered = [name for name in frameworks() if "horovod" in support(name).launchers]
        built = envs_registry.load().get(case.framework)
        if built is not None and built.horovod_refused:  # why Horovod is not even built for it
            why += f" (and Horovod is not built for it: {built.horovod_refused})"
        raise SpecError(f"launcher: {why}; --launcher horovod runs: {', '.join(offered)}")
    if case.task != "train":
        raise SpecError(f"launcher: Horovod distributes training (hvd.DistributedOptimizer); "
                        f"task {case.task} runs with --launcher native")
    if case.data not in DATA_SOURCES:
        raise SpecError("launcher: the Horovod path trains on the synthetic batch; a dataset "
                        "directory runs with --launcher native")


def _validate_options(case: Case) -> None:
    """Each option a name and value the framework's backend declares (its SUPPORT.options)."""
    if not isinstance(case.options, str):
        raise SpecError(f"options: {case.options!r} must be text NAME=VALUE[,NAME=VALUE]")
    declared = support(case.framework)
    for name, value in parse_options(case.options).items():
        why = declared.option_refusal(name, value)
        if why is not None:
            raise SpecError(f"options: {why}")


def _validate_scenario(case: Case) -> None:
    """Scenario, minimum window time and server load; only inference has scenarios."""
    _choice("scenario", case.scenario, SCENARIOS)
    _at_least("min_duration_s", case.min_duration_s, 0, kind=float, high=MAX_SECONDS)
    if case.scenario != "offline" and case.task != "infer":
        raise SpecError(f"scenario: {case.scenario!r} needs task infer, not {case.task!r}")
    if case.scenario == "single-stream" and case.batch_size != 1:
        raise SpecError(f"batch_size: single-stream sends one sample per query, got "
                        f"{case.batch_size}; use scenario offline for larger batches")
    if case.scenario != "server":
        if case.server:
            raise SpecError("server: only the server scenario takes server settings")
        return
    missing = [name for name in SERVER_FIELDS if name not in case.server]
    unknown = sorted(set(case.server) - set(SERVER_FIELDS))
    if missing or unknown:
        raise SpecError(f"server: needs exactly {', '.join(SERVER_FIELDS)}"
                        + (f"; missing {', '.join(missing)}" if missing else "")
                        + (f"; unknown {', '.join(unknown)}" if unknown else ""))
    for name in ("rate_qps", "target_latency_ms"):
        value = case.server[name]
        if not is_number(value) or value <= 0:
            raise SpecError(f"server.{name}: {value!r} must be a finite number > 0")
    _at_least("server.min_queries", case.server["min_queries"], 1)
