"""``mx.profiler`` for dlperf's profiled steps, and the table that maps MXNet's operator names to
dlperf's categories (:mod:`dlperf.worker.profile`).

MXNet's profiler records the operators as the engine runs them (``profile_imperative`` and
``profile_symbolic``), on the engine's worker threads: the work ``step()`` only queued, which the
workload's ``sync()`` (``mx.nd.waitall``) waits for inside the profiled span. ``mx.profiler.dump``
writes them as a Chrome trace (B/E pairs per device and thread); that file is read back here.

Bulks: with ``MXNET_EXEC_BULK_EXEC_TRAIN=1`` (MXNet's default, the setting dlperf measures
with) the engine runs up to ``MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_*`` operators as ONE engine
operation, and the profiler sees only that (``ImperativeBulk``), not its operators. So the
profiled steps, and only they, run with bulking off (MXNet 1.9.1's source):

- imperative (the backward's ``ImperativeBulk``): ``Imperative::Backward`` sets the engine's
  bulk size from ``backward_bulk_size_``, which the ``Imperative`` singleton reads from the
  environment once (include/mxnet/imperative.h:203-206, src/imperative/imperative.cc:516), so
  neither a variable set now nor ``mx.engine.bulk`` changes it; but the engine's
  ``bulk_size()`` is 0 while the profiler runs with ``aggregate_stats``
  (src/engine/threaded_engine.h:413-416), and ``PushSync`` then runs each operator as its own
  engine operation (src/engine/threaded_engine.cc:351). The profiler is configured so.
- hybridized (``hybridize(static_alloc=True)``): a CachedOp cuts its graph into engine
  segments once, when its first forward and backward build them, reading
  ``MXNET_EXEC_BULK_EXEC_TRAIN``/``_INFERENCE`` from the environment there
  (src/imperative/cached_op.cc:500-515; a size of 0 is one operator per segment,
  src/imperative/imperative_utils.h ``CreateEngineOpSeg``). The block is re-hybridized with its
  own flags (same parameters, the same computation) and its segments built by one unprofiled
  forward and backward (no update, no collective) with both variables 0; after the profiled
  steps it is re-hybridized again, so anything later runs bulked as measured.

Bulking off costs time (each operator is an engine operation of its own): the profile's
``overhead`` (profiled / measured step - 1) includes it, and ``tool.note`` says so. A bulk the
profiler still sees (a segment named by its operators joined with commas) is ``other`` unless
every operator its name lists has one category: no split of its time is made up.
"""

import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import mxnet as mx

from dlperf.worker import profile
from dlperf.worker.profile import ENCLOSES

BULK = "ImperativeBulk"
BULKING_OFF = ("engine bulking off for the profiled steps (the measured window ran with it on, "
               "%s=%s): its operators would otherwise be hidden in bulks; mx.profiler's "
               "aggregate_stats turns the engine's bulking off%s. Bulking off can cost time "
               "(an engine operation per operator), so the overhead (profiled vs measured step) "
               "includes what bulking saves")
REBUILT = ("; the hybridized graph was rebuilt with MXNET_EXEC_BULK_EXEC_TRAIN=0 and "
           "MXNET_EXEC_BULK_EXEC_INFERENCE=0 (one engine operation per operator) by one unprofiled "
           "forward%s, and rebuilt as measured after")
ALREADY_OFF = ("engine bulking off for the measured window (%s=%s) and the profiled steps alike; "
               "mx.profiler's aggregate_stats keeps it off%s")
# read by a CachedOp when its first forward and backward cut the graph into engine segments
SEGMENT_VARIABLES = ("MXNET_EXEC_BULK_EXEC_TRAIN", "MXNET_EXEC_BULK_EXEC_INFERENCE")

# first match wins: the engine's bookkeeping first (None: part of whatever encloses it), then
# the operators by kind; ``_backward_X`` goes with X
OPS = [
    (r"^ImperativeBulk$", "other"),
] + [(r"^bulk of %s$" % name, name) for name in profile.CATEGORIES] + [
    (r"(?i)dataloader|dali", "input_pipeline", ENCLOSES),
    (r"^(?:_backward_|_backward)?(?:KVStore\w*|kvstore\w*|_contrib_allreduce\w*|allreduce\w*|"
     r"horovod\w*|Horovod\w*|NCCL\w*|ps-?lite\w*)", "communication", ENCLOSES),
    (r"^(?:DeleteVariable|WaitForVar|WaitForAll|_NoGradient|_copyto_sync)$", None),
    (r"^(?:_backward_|_backward)?(?:\w*sgd\w*_update|\w*adam\w*_update|\w*lamb\w*|\w*nag\w*_update|"
     r"\w*rmsprop\w*_update|\w*adagrad\w*_update|\w*ftrl\w*_update|\w*signum\w*_update|"
     r"\w*lars\w*|multi_sum_sq|multi_all_finite|all_finite|amp_multicast|"
     r"_contrib_mp_\w+)$", "optimizer"),
    (r"(?i)conv", "convolution"),
    (r"^(?:_backward_|_backward)?(?:FullyConnected|dot|batch_dot|_linalg_gemm2?|linalg_gemm2?|"
     r"_sg_mkldnn_fully_connected|_sg_onednn_fully_connected|"
     r"_contrib_interleaved_matmul_\w+|_npi_matmul|_npi_dot|_npi_einsum|_np_dot|khatri_rao)$",
     "matmul"),
    (r"^(?:_backward_|_backward)?(?:BatchNorm|BatchNorm_v1|_contrib_SyncBatchNorm|SyncBatchNorm|"
     r"LayerNorm|GroupNorm|InstanceNorm|_contrib_BatchNormWithReLU|LRN|L2Normalization|"
     r"_sg_mkldnn_batch_norm\w*|_sg_onednn_batch_norm\w*)$", "normalization"),
    (r"^(?:_backward_|_backward)?(?:Pooling|Pooling_v1|_contrib_AdaptiveAvgPooling2D|ROIPooling|"
     r"_contrib_ROIAlign)$", "pooling"),
    (r"^(?:_backward_|_backward)?(?:softmax|log_softmax|SoftmaxOutput|SoftmaxActivation|Softmax|"
     r"masked_softmax|masked_log_softmax|softmax_cross_entropy|pick|_npx_pick|"
     r"LogisticRegressionOutput|LinearRegressionOutput|MakeLoss|make_loss|"
     r"_contrib_div_sqrt_dim)$", "softmax_loss"),
    (r"^(?:_backward_|_backward)?(?:Reshape|reshape|reshape_like|Flatten|flatten|transpose|"
     r"SwapAxis|swapaxes|expand_dims|squeeze|Concat|concat|stack|split|SliceChannel|"
     r"_split_v2|slice|slice_axis|slice_like|_slice_assign\w*|_crop_assign\w*|crop|"
     r"Cast|cast|amp_cast|_copy|_copyto|copy|tile|repeat|broadcast_to|broadcast_like|"
     r"broadcast_axis|broadcast_axes|Pad|pad|_npi_\w*reshape\w*|_np_reshape|_np_transpose|"
     r"_npx_reshape|_np_squeeze|_npi_concatenate|_npi_stack|_split_v2_backward|"
     r"_contrib_arange_like|shape_array|size_array|_mkldnn_reorder|_onednn_reorder|"
     r"reorder\w*)$", "layout"),
    (r"^(?:_backward_|_backward)?(?:Embedding|SparseEmbedding|_contrib_SparseEmbedding|take|"
     r"batch_take|gather_nd|scatter_nd|_scatter_set_nd|_backward_gather_nd|one_hot|"
     r"SequenceMask|SequenceLast|SequenceReverse|where|_npi_where\w*|boolean_mask|"
     r"_contrib_boolean_mask|_contrib_index_copy|_contrib_index_array)$", "memory_copy"),
    (r"^(?:_backward_|_backward)?(?:Activation|LeakyReLU|relu|sigmoid|tanh|softrelu|softsign|gelu|"
     r"erf|erfinv|exp|expm1|log|log1p|log2|log10|sqrt|rsqrt|cbrt|rcbrt|square|abs|sign|"
     r"negative|reciprocal|round|rint|floor|ceil|fix|trunc|clip|Dropout|"
     r"_contrib_quadratic|elemwise_\w+|broadcast_\w+|_plus|_minus|_mul|_div|_grad_add|"
     r"_plus_scalar|_minus_scalar|_rminus_scalar|_mul_scalar|_div_scalar|_rdiv_scalar|"
     r"_power|_power_scalar|_rpower_scalar|_maximum|_minimum|_maximum_scalar|"
     r"_minimum_scalar|_hypot\w*|_equal\w*|_not_equal\w*|_greater\w*|_lesser\w*|"
     r"_logical_\w+|add_n|ElementWiseSum|_zeros|_ones|_full|zeros_like|ones_like|"
     r"_zeros_without_dtype|_arange|_linspace|_eye|SetValueOp|_set_value|sum|sum_axis|"
     r"mean|prod|nansum|nanprod|max|min|max_axis|min_axis|argmax|argmin|argmax_channel|"
     r"norm|_square_sum|topk|sort|argsort|smooth_l1|relu6|hard_sigmoid|selu|elu|"
     r"_random_\w+|_sample_\w+|_npi_\w+|_np_\w+|_npx_relu|_npx_sigmoid|"
     r"_contrib_gradientmultiplier|BlockGrad|stop_gradient|identity|_identity_with_attr_"
     r"like_rhs|IdentityAttachKLSparseReg|_mul_scalar|_sg_mkldnn_\w+|"
     r"_sg_onednn_\w+)$", "elementwise"),
]


class MXNetProfiler(profile.Profiler):
    """``mx.profiler`` over the profiled steps, with engine bulking off for them: the operators
    as MXNet's engine ran them (see the module's docstring)."""

    def __init__(self, ctx, workload):
        # type: (Any, Any) -> None
        self._workload = workload
        self._flags = workload.hybridized  # type: Optional[Dict[str, Any]]
        self.tool = {"name": "mx.profiler", "version": mx.__version__,
                     "events": "engine operations on the engine's threads (%s)" % ctx,
                     "note": note(workload.trainer is not None, self._flags is not None)}
        self.rules = profile.rules(OPS)
        self._folder = None  # type: Optional[str]
        self._path = None  # type: Optional[str]

    def start(self):
        # type: () -> None
        if self._flags is not None:
            self._rebuild(bulked=False)
        self._folder = tempfile.mkdtemp(prefix="dlperf-mxprof-")
        self._path = os.path.join(self._folder, "profile.json")
        # aggregate_stats: the engine bulks nothing while they are recorded
        mx.profiler.set_config(profile_symbolic=True, profile_imperative=True,
                               profile_memory=False, profile_api=False,
                               aggregate_stats=True, filename=self._path)
        mx.profiler.set_state("run")

    def stop(self):
        # type: () -> List[profile.Event]
        mx.profiler.set_state("stop")
        try:
            mx.profiler.dumps(reset=True)  # the aggregate statistics: not kept
            # finished=False: a later case in this process can profile again (after a final
            # dump, set_config fails)
            mx.profiler.dump(finished=False)
            with open(self._path) as handle:
                trace = dumped(handle.read())
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)
            if self._flags is not None:
                self._rebuild(bulked=True)
        return [_bulk_named(e, self.rules) for e in events(trace)]

    def _rebuild(self, bulked):
        # type: (bool) -> None
        """Re-hybridize the workload's block with its own flags; unbulked, build its segments
        now (one forward and backward) with the segment variables 0. Bulked, the next step
        builds them as the measured steps had them."""
        self._workload.objective.hybridize(**self._flags)
        if bulked:
            return
        saved = dict((name, os.environ.get(name)) for name in SEGMENT_VARIABLES)
        try:
            for name in SEGMENT_VARIABLES:
                os.environ[name] = "0"
            self._workload.forward_backward()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def note(train, hybridized):
    # type: (bool, bool) -> str
    """What the profiled steps changed: bulking off (and how), against the measured setting."""
    name = "MXNET_EXEC_BULK_EXEC_TRAIN" if train else "MXNET_EXEC_BULK_EXEC_INFERENCE"
    value = os.environ.get(name, "1")
    rebuilt = REBUILT % (" and backward" if train else "") if hybridized else ""
    if value.strip().lower() in ("0", "false"):
        return ALREADY_OFF % (name, value, rebuilt)
    return BULKING_OFF % (name, value, rebuilt)


def dumped(text):
    # type: (str) -> List[Dict[str, Any]]
    """The trace events of one ``mx.profiler.dump(finished=False)``: the process's first dump
    opens the Chrome trace (``{"traceEvents": [...``) and leaves it open, a later one writes the
    events since the last dump as a continuation (``, {...}, {...}``)."""
    text = text.strip()
    if text.startswith("{"):
        text = text[text.index("[") + 1:]
    text = text.strip().strip(",").strip()
    if text.endswith("}") and text.rstrip("} \n").endswith('"ms"'):  # a final dump's footer
        text = text[:text.rindex("]")]
    return json.loads("[" + text + "]") if text else []


def events(trace):
    # type: (List[Dict[str, Any]]) -> List[profile.Event]
    """The operators of a Chrome trace from ``mx.profiler.dump``: its B/E pairs (and any X
    events) in the ``operator`` category, matched per device and thread."""
    out = []  # type: List[profile.Event]
    open_ = {}  # type: Dict[Tuple[Any, Any], List[Tuple[str, float]]]
    for event in sorted((e for e in trace if e.get("cat") == "operator"
                         and e.get("ph") in ("B", "E", "X")),
                        key=lambda e: (e.get("ts", 0), 0 if e.get("ph") == "E" else 1)):
        thread = (event.get("pid"), event.get("tid"))
        phase = event["ph"]
        start = float(event.get("ts", 0)) / 1e6
        if phase == "X":
            out.append(profile.Event(event["name"], thread, start,
                                     float(event.get("dur", 0)) / 1e6))
        elif phase == "B":
            open_.setdefault(thread, []).append((event["name"], start))
        else:
            stack = open_.get(thread)
            if not stack:
                continue
            for depth in range(len(stack) - 1, -1, -1):  # the latest open one of that name
                if stack[depth][0] == event["name"]:
                    name, began = stack.pop(depth)
                    if start > began:
                        out.append(profile.Event(name, thread, began, start - began))
                    break
    return out


def _bulk_named(event, table):
    # type: (profile.Event, List[profile.Rule]) -> profile.Event
    """A hybridized segment (its operators joined with commas) named ``bulk of CATEGORY`` where
    all its listed operators share one, else ``ImperativeBulk`` (other): never a made-up split of
    its time. A last name MXNet cut short (unmapped) is left out."""
    if "," not in event.name:
        return event
    listed = [profile.classify(name, table) for name in event.name.split(",")]
    if not listed[-1][2]:
        listed.pop()
    categories = set(category for category, _, _ in listed)
    if len(categories) == 1 and None not in categories and "other" not in categories:
        return event._replace(name="bulk of %s" % categories.pop())
    return event._replace(name=BULK)
