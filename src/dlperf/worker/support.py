"""What a backend declares it can run, checked once by the shared worker before ``build``.

Every backend package's ``__init__`` holds a :class:`Support` named ``SUPPORT`` and imports
nothing heavier than the standard library, so the harness (``dlperf models``, ``dlperf envs
list``, the reports) can read it without the framework installed, and the worker can refuse an
unsupported case with the backend's own reason before spending a second on building it.

Standard library only; valid Python 3.7.
"""

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from dlperf.worker.workload import UnsupportedError

DEVICE_KINDS = ("cpu", "cuda")
TASKS = ("train", "infer")


class Option(object):
    """One setting of a framework's own that a case may choose: its allowed values, and why a
    user would change it (with what the backend does where a case sets none).

    ``variables``: ``{value: {VARIABLE: text}}``, the environment variables the launcher sets
    for the worker when a case chooses that value (harness side, before the worker starts), for
    settings a framework reads from its environment when it is imported (TensorFlow's
    ``TF_ENABLE_ONEDNN_OPTS``); a value without an entry sets none. Each value named here must
    be one of ``values`` (ValueError otherwise: a declaration error, found on import).

    ``models``: the models the setting changes anything for (a layout of images means nothing
    to BERT); None: every model. ``dlperf tune`` searches it only for those.

    ``precisions``: ``{value: ((precision, ...), why)}``, the only precisions a value runs in
    (MXNet's ``onednn=off``: fp32, since oneDNN has its only bf16 kernels); any other is refused
    with ``why`` before anything is built, and ``dlperf tune`` leaves the pair out of its
    search."""

    def __init__(self, values, help, variables=None, models=None, precisions=None):
        # type: (Sequence[str], str, Optional[Mapping[str, Mapping[str, str]]], Optional[Sequence[str]], Optional[Mapping[str, Tuple[Sequence[str], str]]]) -> None
        self.values = tuple(values)
        self.help = help
        self.models = None if models is None else tuple(models)
        self.precisions = {value: (tuple(allowed), why)
                           for value, (allowed, why) in (precisions or {}).items()}
        for value in self.precisions:
            if value not in self.values:
                raise ValueError("precisions for %r, which is not one of the option's values (%s)"
                                 % (value, ", ".join(self.values)))
        self.variables = {value: dict(names) for value, names in (variables or {}).items()}
        for value, names in self.variables.items():
            if value not in self.values:
                raise ValueError("variables for %r, which is not one of the option's values (%s)"
                                 % (value, ", ".join(self.values)))
            for name, text in names.items():
                if not name or not isinstance(text, str):
                    raise ValueError("variables for %r: %r=%r must be a name and a text"
                                     % (value, name, text))

    def applies_to(self, model):
        # type: (str) -> bool
        return self.models is None or model in self.models

    def precision_refusal(self, value, precision):
        # type: (str, str) -> Optional[str]
        """Why ``value`` cannot run in ``precision`` (its declared ``precisions``), or None."""
        allowed, why = self.precisions.get(value, (None, ""))
        if allowed is None or precision in allowed:
            return None
        return "runs in %s only, not %s: %s" % (", ".join(allowed), precision, why)


def parse_options(text):
    # type: (str) -> Dict[str, str]
    """A case's ``options`` text (``"name=value,name=value"``) as a mapping; ValueError naming
    the first malformed item. The worker and the harness read it alike."""
    out = {}  # type: Dict[str, str]
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ValueError("%r is not NAME=VALUE" % item.strip())
        if name in out:
            raise ValueError("%s given twice (%s and %s)" % (name, out[name], value))
        out[name] = value
    return out


def format_options(options):
    # type: (Mapping[str, str]) -> str
    """The one text of a set of options: sorted by name, so equal sets are equal cases."""
    return ",".join("%s=%s" % (name, options[name]) for name in sorted(options))


#: the suffixes a packing key may add to its device kind (compile on, compile off)
PACKING_MODES = ("compile=on", "compile=off")


def packing_mode(compiled):
    # type: (bool) -> str
    """The suffix naming ``compiled``'s mode in a packing key ("compile=on" or "compile=off")."""
    return PACKING_MODES[0 if compiled else 1]


class Packing(object):
    """How an engine hands one step's gradients to its all-reduce, which sets how many
    all-reduces a step pays the latency of (``dlperf project``): in buckets of ``bucket_bytes``
    (PyTorch DDP's ``bucket_cap_mb``), all of them in one (``whole``: TensorFlow's one pack), or
    one per ``tensors`` gradient tensors (1: XLA on CPUs, which has no all-reduce combiner, and
    MXNet's kvstore, a push and a pull per parameter; 32: TF 1.15's merge scope). ``source``:
    where the engine sets it (its default and the option), so a reader can check it."""

    def __init__(self, source, bucket_bytes=None, whole=False, tensors=None):
        # type: (str, Optional[int], bool, Optional[int]) -> None
        if [bucket_bytes is not None, whole, tensors is not None].count(True) != 1:
            raise ValueError("a packing is one of bucket_bytes, whole or tensors")
        for name, value in (("bucket_bytes", bucket_bytes), ("tensors", tensors)):
            if value is not None and (isinstance(value, bool) or int(value) != value
                                      or value < 1):
                raise ValueError("%s must be an integer >= 1, got %r" % (name, value))
        if not source:
            raise ValueError("a packing names its source")
        self.bucket_bytes = bucket_bytes
        self.whole = whole
        self.tensors = tensors
        self.source = source

    def messages(self, gradient_bytes, tensors):
        # type: (float, Optional[int]) -> Optional[int]
        """All-reduces per step for ``gradient_bytes`` in ``tensors`` gradient tensors; None
        where the packing counts tensors and the model does not (``tensors`` None)."""
        if self.whole:
            return 1
        if self.tensors is not None:
            if tensors is None:
                return None
            return max(1, -(-int(tensors) // self.tensors))
        assert self.bucket_bytes is not None
        return max(1, int(-(-gradient_bytes // self.bucket_bytes)))

    def message_bytes(self, gradient_bytes):
        # type: (float) -> Optional[float]
        """The size of each message where the packing makes them all one size (a bucket, the
        last one aside, or the one pack of every gradient); None where it cuts by tensor count
        (per tensor, per 32), whose messages span the sizes of the model's tensors."""
        if self.whole:
            return float(gradient_bytes)
        if self.bucket_bytes is not None:
            return float(min(self.bucket_bytes, gradient_bytes))
        return None

    def describe(self, exchange="ring"):
        # type: (str) -> str
        """The packing in words, each message named as ``exchange`` (:data:`EXCHANGES`) sends
        it: an all-reduce, or a push and pull through the parameter servers."""
        message = "push and pull" if exchange == "parameter-server" else "all-reduce"
        if self.whole:
            how = "one %s of every gradient" % message
        elif self.tensors == 1:
            how = "one %s per gradient tensor" % message
        elif self.tensors is not None:
            how = "one %s per %d gradient tensors" % (message, self.tensors)
        else:
            how = "%g MiB buckets" % (float(self.bucket_bytes or 0) / (1 << 20))
        return "%s (%s)" % (how, self.source)


#: how an engine's all-reduce moves the gradients: a ring (one through every process, across
#: nodes too), or every worker's push and pull through a parameter server on each node
#: (dlperf.projection)
EXCHANGES = ("ring", "parameter-server")


class Wire(object):
    """What an engine's all-reduce puts on the wire, as a share of a ring's 2(n-1)/n of the
    message a process (1: the ring's bytes, what every engine measured so far sends but one),
    and how (``exchange``: a ring, or a parameter server's push and pull, whose servers carry
    each node's workers' bytes separately: ``dlperf project`` prices the two differently).
    ``dlperf project`` prices a link given as a rate with it (a link measured through the
    engine's own collectives has it already); ``source``: where it was measured or read, so a
    reader can check it (tests/projection/test_wire.py checks it against the stored 2-host
    results' interface counters). ``split_bytes``: a parameter server's, the key size from which
    its keys are split over every server (ps-lite's big-array bound); a smaller key goes to one
    server whole, and one such key's push then pull uses one direction of a link at a time,
    which a step's many keys in flight do not, so its push-and-pull model is fitted over the
    split sizes alone (dlperf.collective_model)."""

    def __init__(self, share, source, exchange="ring", split_bytes=None):
        # type: (float, str, str, Optional[int]) -> None
        if isinstance(share, bool) or not float(share) > 0:
            raise ValueError("a wire share must be a number > 0, got %r" % (share,))
        if not source:
            raise ValueError("a wire share names its source")
        if exchange not in EXCHANGES:
            raise ValueError("exchange must be one of %s, got %r" % (", ".join(EXCHANGES),
                                                                      exchange))
        if split_bytes is not None and (isinstance(split_bytes, bool) or int(split_bytes) < 1):
            raise ValueError("split_bytes must be a whole number of bytes >= 1, got %r"
                             % (split_bytes,))
        self.share = float(share)
        self.source = source
        self.exchange = exchange
        self.split_bytes = None if split_bytes is None else int(split_bytes)

    def describe(self):
        # type: () -> str
        how = "" if self.exchange == "ring" else ", through a parameter server on each node"
        return "%gx a ring's bytes on the wire%s (%s)" % (self.share, how, self.source)


#: what an engine that declares no :class:`Wire` sends: a ring's bytes
RING_WIRE = Wire(1.0, "a ring's bytes")


class Support(object):
    """A backend's declaration: models, tasks, precisions per device and task, compile modes,
    data-parallel ability, and the reasons behind each refusal.

    ``precisions``: ``{device_kind: {task: (precision, ...)}}``; a device kind that is absent is
    not supported at all.
    ``modes``: what ``compile`` off and on mean in this framework (``{False: "eager",
    True: "torch.compile"}``); a missing key means that setting is refused. Reports use these
    labels, so a TF ``tf.function`` graph is never called "eager".
    ``distributed``: device kinds on which the backend runs data-parallel over several
    processes (``devices`` x ``nnodes`` > 1).
    ``data_pipeline``: the framework's own input pipeline that reads a dataset directory
    (``--data DIR``), e.g. ``"torch.utils.data.DataLoader"``; None = synthetic data only.
    ``loaders``: other pipelines ``--loader NAME`` may choose instead of that one, by name, with
    what each is (``{"dali": "NVIDIA DALI ..."}``); a name not here is refused.
    ``launchers``: the engines that may start and connect its processes (a case's
    ``launcher``): ``"native"``, the framework's own data parallelism (always), and
    ``"horovod"`` where the backend has a Horovod training path (``hvd.DistributedOptimizer``
    under ``horovodrun``); a name not here is refused with the ``"launcher/name"`` reason.
    ``options``: the framework's own settings a case may choose (``--option NAME=VALUE``, a
    case's ``options``), by name: ``{"engine": Option(("ideep", "cpu"), "why it matters")}``;
    the backend applies them and records each in the result, or, for a setting the framework
    reads from its environment at import, the option's ``variables`` name what the launcher
    sets for the chosen value. A name or value not declared here is refused before anything
    runs (the harness reads this declaration).
    ``packing``: ``{device_kind: Packing}``, how the framework's own data parallelism
    (``launcher: native``) hands a step's gradients to its all-reduce on that device kind;
    ``dlperf project`` counts the all-reduces a step pays the latency of from it. Where the
    compile modes pack differently (OneFlow's eager DDP and its nn.Graph), a key
    ``"device_kind/compile=on"`` or ``"device_kind/compile=off"`` declares one mode's, and wins
    over the device kind's (:meth:`packing_for`). A case without one is projected with PyTorch
    DDP's 25 MiB buckets, and says so.
    ``wire``: ``{device_kind: Wire}``, where the engine's all-reduce puts other than a ring's
    bytes on the wire on that device kind (:meth:`wire_for`: :data:`RING_WIRE` elsewhere).
    ``task_modes``: where a task has fewer modes than ``modes`` (``{"train": (False,)}``: a
    compiled mode for inference only), the modes that task has; refused with the
    ``"task/compile=on"`` reason.
    ``reasons``: why a combination is refused, keyed (most specific first) by
    ``"device/task/precision"``, ``"device/precision"``, ``"task/precision"``, ``"precision"``, ``"compile=on"`` /
    ``"compile=off"``, ``"distributed/device"``, ``"loader/name"``, ``"launcher/name"`` or
    ``"task"``; the first key that matches wins.
    """

    def __init__(self, framework, models, precisions, modes, distributed=(), reasons=None,
                 tasks=TASKS, data_pipeline=None, loaders=None, launchers=("native",),
                 options=None, task_modes=None, packing=None, wire=None):
        # type: (str, Sequence[str], Mapping[str, Mapping[str, Sequence[str]]], Mapping[bool, str], Sequence[str], Optional[Mapping[str, str]], Sequence[str], Optional[str], Optional[Mapping[str, str]], Sequence[str], Optional[Mapping[str, Option]], Optional[Mapping[str, Sequence[bool]]], Optional[Mapping[str, Packing]], Optional[Mapping[str, Wire]]) -> None
        self.framework = framework
        self.models = tuple(models)
        self.tasks = tuple(tasks)
        self.precisions = {device: {task: tuple(names) for task, names in per_task.items()}
                           for device, per_task in precisions.items()}
        self.modes = dict(modes)
        self.task_modes = {task: tuple(bool(m) for m in allowed)
                           for task, allowed in (task_modes or {}).items()}
        self.distributed = tuple(distributed)
        self.data_pipeline = data_pipeline
        self.loaders = dict(loaders or {})
        self.launchers = tuple(launchers)
        self.options = dict(options or {})  # type: Dict[str, Option]
        self.reasons = dict(reasons or {})
        self.packing = dict(packing or {})  # type: Dict[str, Packing]
        self.wire = dict(wire or {})  # type: Dict[str, Wire]
        packed = [key.split("/")[0] for key in self.packing] + list(self.wire)
        for key in self.packing:
            if "/" in key and key.split("/", 1)[1] not in PACKING_MODES:
                raise ValueError("packing key %r in %s's support: after the device kind, one of "
                                 "%s" % (key, framework, ", ".join(PACKING_MODES)))
        for device in list(self.precisions) + packed:
            if device not in DEVICE_KINDS:
                raise ValueError("unknown device kind %r in %s's support" % (device, framework))

    def packing_for(self, kind, compiled):
        # type: (str, bool) -> Optional[Packing]
        """The packing of ``compiled``'s mode on device ``kind`` (that mode's own declaration,
        else the device kind's), or None where neither is declared."""
        return self.packing.get("%s/%s" % (kind, packing_mode(compiled))) or self.packing.get(kind)

    def wire_for(self, kind):
        # type: (str) -> Wire
        """What the engine's all-reduce puts on the wire on device ``kind``."""
        return self.wire.get(kind, RING_WIRE)

    def mode(self, compiled):
        # type: (bool) -> str
        """The label of a compile setting ("eager", "XLA", ...); for a refused setting, which
        one it is ("no eager mode"), so a report row of refused cases still says what they were."""
        compiled = bool(compiled)
        return self.modes.get(compiled, "no compiled mode" if compiled else "no eager mode")

    def modes_for(self, task):
        # type: (str) -> Tuple[bool, ...]
        """The compile settings ``task`` runs in (``modes``, narrowed by ``task_modes``)."""
        declared = tuple(mode for mode in (False, True) if mode in self.modes)
        return tuple(mode for mode in declared if mode in self.task_modes.get(task, declared))

    def reason(self, *keys):
        # type: (*str) -> Optional[str]
        for key in keys:
            if key in self.reasons:
                return self.reasons[key]
        return None

    def refusal(self, case, device):
        # type: (Mapping[str, Any], str) -> Optional[str]
        """Why this backend cannot run ``case`` on ``device`` ("cpu" or "cuda"), or None."""
        fw = self.framework
        model, task, precision = case["model"], case["task"], case["precision"]
        compiled = bool(case.get("compile", False))
        if model not in self.models:
            return "the %s backend does not build model %r; it builds: %s" % (
                fw, model, ", ".join(self.models))
        if task not in self.tasks:
            return self.reason(task) or "the %s backend has no %s task; it runs: %s" % (
                fw, task, ", ".join(self.tasks))
        if device not in self.precisions:
            return self.reason(device) or "the %s backend does not run on %s; it runs on: %s" % (
                fw, device, ", ".join(self.precisions))
        allowed = self.precisions[device].get(task, ())
        if precision not in allowed:
            return self.reason("%s/%s/%s" % (device, task, precision),
                               "%s/%s" % (device, precision), "%s/%s" % (task, precision),
                               precision) or (
                "%s %s does not run in %s on %s; allowed there: %s" % (
                    fw, task, precision, device, ", ".join(allowed) or "none"))
        if compiled not in self.modes_for(task) and not case.get("data_only"):  # no model
            flag = "compile=on" if compiled else "compile=off"
            return self.reason("%s/%s" % (task, flag), flag) or "%s %s has no %s mode" % (
                fw, task, flag)
        loader = case.get("loader", "native")
        if loader != "native" and loader not in self.loaders:
            return self.reason("loader/" + str(loader)) or (
                "the %s backend reads a dataset folder with its own pipeline (%s) only; it has "
                "no --loader %s" % (fw, self.data_pipeline or "none", loader))
        why = self.launcher_refusal(case.get("launcher", "native"))
        if why is not None:
            return why
        why = self.options_refusal(case.get("options") or "", precision)
        if why is not None:
            return why
        processes = int(case.get("devices", 1)) * int(case.get("nnodes", 1))
        if processes > 1 and device not in self.distributed:
            return self.reason("distributed/" + device) or (
                "the %s backend runs on one %s process; %d processes (devices x nnodes) asked"
                % (fw, device, processes))
        return None

    def options_refusal(self, options, precision):
        # type: (str, str) -> Optional[str]
        """Why a case's options (``"name=value,..."``) cannot run in ``precision``, or None
        (names and values themselves are checked when the case is read)."""
        try:
            chosen = parse_options(options)
        except ValueError:
            return None  # malformed: the case's own validation names it
        for name in sorted(chosen):
            option = self.options.get(name)
            why = None if option is None else option.precision_refusal(chosen[name], precision)
            if why is not None:
                return "option %s=%s %s" % (name, chosen[name], why)
        return None

    def launcher_refusal(self, launcher):
        # type: (str) -> Optional[str]
        """Why this backend's processes cannot be started by ``launcher``, or None."""
        if launcher in self.launchers:
            return None
        return self.reason("launcher/" + str(launcher)) or (
            "the %s backend has no %s training path; it runs with --launcher %s"
            % (self.framework, launcher, " or ".join(self.launchers)))

    def option_refusal(self, name, value):
        # type: (str, str) -> Optional[str]
        """Why ``--option name=value`` is not this framework's, or None."""
        option = self.options.get(name)
        if option is None:
            return "%r is not a %s option; %s" % (
                name, self.framework, ("its options: " + ", ".join(sorted(self.options)))
                if self.options else "it has none")
        if value not in option.values:
            return "%s=%r is not allowed for %s; allowed: %s" % (
                name, value, self.framework, ", ".join(option.values))
        return None

    def option_variables(self, options):
        # type: (Mapping[str, str]) -> Dict[str, str]
        """The environment variables a case's ``options`` (``{name: value}``, declared ones)
        set for its workers: each chosen value's ``variables``, merged."""
        out = {}  # type: Dict[str, str]
        for name in sorted(options):
            option = self.options.get(name)
            if option is not None:
                out.update(option.variables.get(options[name], {}))
        return out

    def check(self, case, device):
        # type: (Mapping[str, Any], str) -> None
        """Raise UnsupportedError with the declared reason when ``case`` cannot run."""
        why = self.refusal(case, device)
        if why is not None:
            raise UnsupportedError(why)

    def matrix(self):
        # type: () -> Dict[str, Any]
        """The declaration as plain data, for ``dlperf models`` / ``envs list`` and JSON."""
        return {
            "framework": self.framework,
            "models": list(self.models),
            "tasks": list(self.tasks),
            "precisions": {d: {t: list(p) for t, p in per.items()}
                           for d, per in self.precisions.items()},
            "modes": {"off" if not k else "on": v for k, v in sorted(self.modes.items())},
            "distributed": list(self.distributed),
            "data_pipeline": self.data_pipeline,
            "loaders": dict(self.loaders),
            "launchers": list(self.launchers),
            "options": {name: {"values": list(o.values), "help": o.help,
                               "variables": {v: dict(n) for v, n in o.variables.items()}}
                        for name, o in sorted(self.options.items())},
            "reasons": dict(self.reasons),
        }


def device_kind(device_name):
    # type: (str) -> str
    """"cuda" for any GPU device string a framework uses ("cuda:0", "gpu:0", "gpu"), else "cpu"."""
    lowered = str(device_name).lower()
    return "cuda" if lowered.startswith(("cuda", "gpu")) else "cpu"



# The device a worker resolved: the one shared piece every backend's ``resolve_device`` returns,
# the rank file records (``device``) and the harness turns into the label results show.

#: Why a backend ran ``--device auto`` on the CPU when its framework has a GPU build dlperf pins:
#: the environment holds the CPU build (fill in the framework's name twice).
CPU_BUILD = ("the %s environment has the CPU build; install its GPU build with "
             "`dlperf envs install %s --variant cuda`")

#: Why a backend whose framework has no pinned GPU build runs on the CPU (framework, its name).
CPU_ONLY = ("the %s backend runs %s's CPU build only: dlperf pins no GPU build of it "
            "(`dlperf envs list` says why)")


def resolved_device(kind, index=None, name=None, reason=None):
    # type: (str, Optional[int], Optional[str], Optional[str]) -> Dict[str, Any]
    """What ``resolve_device(requested)`` returns in every backend: the device kind ("cpu" or
    "cuda"), on a GPU its index in this process and the GPU's name (None where the framework
    cannot tell), and on the CPU, why (``reason``: the framework has no GPU build here, or sees
    no GPU), so that a ``--device auto`` run that lands on the CPU of a GPU host can say why.
    Plain JSON data: the worker writes it into the rank file as it is."""
    if kind not in DEVICE_KINDS:
        raise ValueError("device kind %r; allowed: %s" % (kind, ", ".join(DEVICE_KINDS)))
    gpu = kind == "cuda"
    return {"kind": kind, "index": int(index) if gpu and index is not None else None,
            "name": str(name).strip() or None if gpu and name else None,
            "reason": None if gpu else reason}


def device_label(device, gpu_names=()):
    # type: (Mapping[str, Any], Sequence[str]) -> str
    """``cpu``, or ``cuda:0 NVIDIA H100 80GB HBM3`` (kind, index, GPU name) for a
    :func:`resolved_device` record; a GPU whose framework gave no name takes it from
    ``gpu_names`` (the host's GPUs, by index) when the index is there."""
    if device.get("kind") != "cuda":
        return "cpu"
    index = device.get("index")
    label = "cuda" if index is None else "cuda:%d" % index
    name = device.get("name")
    if not name and index is not None and 0 <= index < len(gpu_names):
        name = gpu_names[index]
    return label + (" " + " ".join(str(name).split()) if name else "")
