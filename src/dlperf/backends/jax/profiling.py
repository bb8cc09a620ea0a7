"""``jax.profiler`` for dlperf's profiled steps, and how XLA's operators map to dlperf's
categories (:mod:`dlperf.worker.profile`).

The step is one jitted XLA program. On the CPU the XLA runtime runs it as thunks, one per
instruction of the optimized HLO module, and ``jax.profiler`` records each thunk as an event
carrying its instruction's name (stat ``hlo_op``: ``convolution.18``, ``dot``,
``multiply_add_fusion.278``, ``wrapped_reduce-window.1``...) on the thread that ran it; thunks
run concurrently on the runtime's threads. The trace is read back from the ``*.xplane.pb`` that
``jax.profiler.stop_trace`` writes, with jax's own reader (``jax.profiler.ProfileData``).

A fusion's name says little of what it holds, so its category comes from the compiled module
(``jitted.lower(...).compile().as_text()``): the opcodes inside the fused computation and the
JAX name scopes of its instructions (``.../layer1_0/bn1/mul``, ``.../optimizer/...``,
``.../loss/...``), in this order: the optimizer's scope; a convolution, a dot, a pooling window
anywhere in it; a fusion that only moves data is ``layout``; then the loss's and a norm layer's
scopes; a gather/scatter is ``memory_copy``; the rest is ``elementwise``. Each
instruction's derived category becomes an exact-name rule ahead of :data:`OPS`, the table by
name that decides for instructions the compiled text does not cover.
"""

import glob
import os
import re
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Set, Tuple

import jax

from dlperf.worker import profile

# by instruction name (XLA names an instruction after its opcode, a fusion after the opcodes it
# fuses): the fallback for names the compiled module does not explain; first match wins
OPS = [
    (r"^(while|call|conditional)(\.\d+)?$", None),  # control flow: their bodies' thunks decide
    (r"^(all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all|"
     r"(all_reduce|all_gather|reduce_scatter)\w*)", "communication"),
    (r"convolution|conv_general_dilated|__onednn\$convolution", "convolution"),
    (r"^(wrapped_)?dot|__onednn\$matmul|dot_general", "matmul"),
    (r"reduce-window|select-and-scatter|reduce_window|select_and_scatter", "pooling"),
    (r"__onednn\$(layernorm|batchnorm)", "normalization"),
    (r"__onednn\$softmax", "softmax_loss"),
    (r"^(wrapped_)?(scatter|gather|dynamic-slice|dynamic-update-slice|dynamic_slice|"
     r"dynamic_update_slice)", "memory_copy"),
    (r"^(wrapped_)?(copy|transpose|reverse|pad|slice|concatenate|bitcast|reshape|broadcast|"
     r"iota)(\.\d+)?$|^((copy|transpose|reverse|pad|slice|concatenate|bitcast|reshape|"
     r"broadcast|iota)_)+fusion(\.\d+)?$", "layout"),
    (r"^(wrapped_)?(add|subtract|multiply|divide|maximum|minimum|select|compare|negate|rsqrt|"
     r"sqrt|exponential|log|tanh|logistic|erf|convert|abs|power|xor|or|and|not|"
     r"shift-left|shift-right-logical|reduce|rng-bit-generator)(\.\d+)?$", "elementwise"),
]

# opcodes that only move or create data: a fusion of nothing else is layout work
_DATA = {"parameter", "constant", "copy", "transpose", "reverse", "pad", "slice", "concatenate",
         "bitcast", "reshape", "broadcast", "iota", "tuple", "get-tuple-element"}
_CONTROL = {"while", "call", "conditional"}
_COLLECTIVES = {"all-reduce", "all-gather", "reduce-scatter", "collective-permute",
                "all-to-all", "all-reduce-start", "all-gather-start", "collective-permute-start"}
_INDEXING = {"scatter", "gather", "dynamic-slice", "dynamic-update-slice"}
_CUSTOM = [("convolution", "convolution"), ("matmul", "matmul"), ("layernorm", "normalization"),
           ("softmax", "softmax_loss")]
# JAX name scopes (a path component of an instruction's op_name)
# (a scope traced through a transform reads ``jvp(loss)``, ``transpose(jvp(loss))``)
_OPTIMIZER_SCOPE = re.compile(r"(^|[/(])optimizer([/)]|$)")
_LOSS_SCOPE = re.compile(r"(^|[/(])loss([/)]|$)|softmax|cross_entropy|logsumexp")
_POOL_PRIMITIVE = re.compile(r"(^|/)(reduce_window\w*|select_and_scatter\w*)$")
_NORM_SCOPE = re.compile(r"/(\w+_)?(bn|ln)\d*/|/(BatchNorm|LayerNorm|GroupNorm)(_\d+)?/")

_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) ")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT )?%?([\w.\-]+) = (.*)$")
_OPCODE = re.compile(r"^\s*([a-z][\w\-]*)\(")
_CALLS = re.compile(r"(?:calls|to_apply|body|condition|branch_computations)="
                    r"(\{[^}]*\}|%?[\w.\-]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_TARGET = re.compile(r'custom_call_target="([^"]*)"')


class _Instruction(object):
    __slots__ = ("opcode", "calls", "op_name", "target")

    def __init__(self, opcode, calls, op_name, target):
        # type: (str, List[str], str, str) -> None
        self.opcode, self.calls, self.op_name, self.target = opcode, calls, op_name, target


def _split_type(rest):
    # type: (str) -> str
    """What follows an instruction's result type (a tuple type holds spaces)."""
    if rest.startswith("("):
        depth = 0
        for index, char in enumerate(rest):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                return rest[index + 1:]
        return ""
    return rest.split(" ", 1)[1] if " " in rest else ""


def parse_hlo(text):
    # type: (str) -> Tuple[Dict[str, Dict[str, _Instruction]], Dict[str, _Instruction]]
    """(computation -> its instructions by name, every instruction by name) of an HLO module's
    text."""
    computations = {}  # type: Dict[str, Dict[str, _Instruction]]
    everything = {}  # type: Dict[str, _Instruction]
    current = None  # type: Optional[Dict[str, _Instruction]]
    for line in text.splitlines():
        found = _INSTRUCTION.match(line)
        if found and current is not None:
            body = _split_type(found.group(2))
            opcode = _OPCODE.match(body)
            if not opcode:
                continue
            calls = []  # type: List[str]
            for called in _CALLS.findall(body):
                calls.extend(name.strip().lstrip("%") for name in called.strip("{}").split(",")
                             if name.strip())
            op_name = _OP_NAME.search(body)
            target = _TARGET.search(body)
            instruction = _Instruction(opcode.group(1), calls,
                                       op_name.group(1) if op_name else "",
                                       target.group(1) if target else "")
            current[found.group(1)] = instruction
            everything[found.group(1)] = instruction
            continue
        if line.endswith("{") and not line.startswith(" "):
            header = _COMPUTATION.match(line)
            if header:
                current = computations.setdefault(header.group(1), {})
        elif line.startswith("}"):
            current = None
    return computations, everything


def _contents(instruction, computations, seen=None):
    # type: (_Instruction, Dict[str, Dict[str, _Instruction]], Optional[Set[str]]) -> List[_Instruction]
    """The instruction and, for a fusion, everything in its fused computation (nested fusions
    included)."""
    seen = set() if seen is None else seen
    out = [instruction]
    if instruction.opcode != "fusion":
        return out
    for name in instruction.calls:
        if name in seen or name not in computations:
            continue
        seen.add(name)
        for inner in computations[name].values():
            out.extend(_contents(inner, computations, seen))
    return out


def categorize(instruction, computations):
    # type: (_Instruction, Dict[str, Dict[str, _Instruction]]) -> Tuple[Optional[str], bool]
    """(category, decided) of one instruction of the compiled module; not decided: left to
    :data:`OPS` by its name."""
    if instruction.opcode in _CONTROL:
        return None, True
    parts = _contents(instruction, computations)
    opcodes = set(part.opcode for part in parts[1:] if instruction.opcode == "fusion") or \
        {instruction.opcode}
    targets = " ".join(part.target for part in parts if part.target)
    scopes = [part.op_name for part in parts if part.op_name]
    if opcodes & _COLLECTIVES:
        return "communication", True
    if any(_OPTIMIZER_SCOPE.search(scope) for scope in scopes):
        return "optimizer", True
    for word, category in _CUSTOM:
        if word in targets:
            return category, True
    if "convolution" in opcodes:
        return "convolution", True
    if "dot" in opcodes:
        return "matmul", True
    if any(_POOL_PRIMITIVE.search(part.op_name) for part in parts):
        return "pooling", True  # by the primitive: XLA also tiles plain reductions as
        # reduce-windows, and lowers max pooling's gradient to a scatter
    if "custom-call" in opcodes:
        return "other", False
    if opcodes <= _DATA:
        return "layout", True
    if any(_LOSS_SCOPE.search(scope) for scope in scopes):
        return "softmax_loss", True
    if any(_NORM_SCOPE.search(scope) for scope in scopes):
        return "normalization", True
    if opcodes & _INDEXING:
        return "memory_copy", True
    return "elementwise", True


def module_rules(text):
    # type: (str) -> List[Tuple[str, Optional[str]]]
    """Exact-name rows for every instruction of a compiled module's text whose category its
    contents decide."""
    computations, everything = parse_hlo(text)
    fused = set()  # type: Set[str]
    for instruction in everything.values():
        if instruction.opcode == "fusion":
            fused.update(instruction.calls)
    rows = []  # type: List[Tuple[str, Optional[str]]]
    for computation, instructions in computations.items():
        if computation in fused:  # inside a fusion: no thunk of its own
            continue
        for name, instruction in instructions.items():
            if instruction.opcode in ("parameter", "constant", "tuple", "get-tuple-element"):
                continue
            category, decided = categorize(instruction, computations)
            if decided:
                rows.append(("^%s$" % re.escape(name), category))
    return rows


class JaxProfiler(profile.Profiler):
    """``jax.profiler.start_trace``/``stop_trace`` over the profiled steps: the XLA runtime's
    thunk events, named by their HLO instruction, categorized through the compiled step."""

    def __init__(self, compiled_text=None):
        # type: (Optional[Any]) -> None
        """``compiled_text``: a callable returning the compiled step's HLO text (called after the
        trace, so compiling never falls in the profiled steps), or None."""
        self.tool = {"name": "jax.profiler", "version": jax.__version__}
        self.rules = profile.rules(OPS)
        self._compiled_text = compiled_text
        self._dir = None  # type: Optional[str]

    def start(self):
        # type: () -> None
        self._dir = tempfile.mkdtemp(prefix="dlperf-jax-profile-")
        jax.profiler.start_trace(self._dir)

    def stop(self):
        # type: () -> List[profile.Event]
        jax.profiler.stop_trace()
        try:
            found = glob.glob(os.path.join(self._dir or "", "plugins", "profile", "*",
                                           "*.xplane.pb"))
            if not found:
                raise profile.ProfileUnavailable("jax.profiler wrote no .xplane.pb")
            events = read_xspace(found[0])
        finally:
            shutil.rmtree(self._dir or "", ignore_errors=True)
        if not events:
            raise profile.ProfileUnavailable(
                "jax.profiler recorded no XLA operator (thunk) events with an hlo_op on %s"
                % jax.default_backend())
        if self._compiled_text is not None:
            rows = module_rules(self._compiled_text())
            self.rules = profile.rules(rows + OPS)
            self.tool = dict(self.tool, fusions="categorized by the compiled HLO module")
        return events


def read_xspace(path):
    # type: (str) -> List[profile.Event]
    """The XLA operator events of an XSpace file: those carrying an ``hlo_op`` stat, per line
    (thread) of the host and device planes."""
    data = jax.profiler.ProfileData.from_file(path)
    events = []  # type: List[profile.Event]
    for plane in data.planes:
        for line in plane.lines:
            thread = (plane.name, line.name)
            for event in line.events:
                stats = dict(event.stats)
                op = stats.get("hlo_op")
                if not op or event.duration_ns <= 0:
                    continue
                events.append(profile.Event(str(op), thread, event.start_ns / 1e9,
                                            event.duration_ns / 1e9))
    return events
