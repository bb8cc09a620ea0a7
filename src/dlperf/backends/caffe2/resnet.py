"""ResNet-50 v1.5 in Caffe2's own idiom: ``caffe2.python.models.resnet.create_resnext`` (50 layers,
one group of width 64 = ResNet-50, the call Caffe2's ``examples/imagenet_trainer.py`` makes), on a
``model_helper.ModelHelper``, with the loss and the optimizer added by ``brew``/``model_helper``.

Why ``create_resnext`` and not ``create_resnet50``: the latter's default ``no_bias=0`` gives every
convolution a bias (53 x C_out parameters the catalogue network does not have); the trainer calls
``create_resnext(..., no_bias=True)``, which is the catalogue network exactly: the stride of a
downsampling bottleneck on its 3x3 convolution (v1.5), a 1x1 projection shortcut with the same
stride, BatchNorm (momentum 0.9, epsilon 1e-5) after every convolution, global average pooling
(so any ``image_size`` works) and a ``num_classes`` classifier with a bias: 25,557,032 parameters
at the defaults. As in the other backends, the last BatchNorm of each bottleneck starts with scale
0 (``create_resnext`` fills 1; :func:`zero_last_bn_scales` rewrites those fills in the init net):
with scale 1, SGD at lr 0.1 on the fixed synthetic batch diverges within a few steps (NaN at
image 32, batch 2), which the other frameworks' identically initialised networks do not.

The ``max_blocks`` knob (each stage cut to its first blocks) is the same call with a shorter block
configuration: ``create_resnext`` looks its stages up in ``RESNEXT_BLOCK_CONFIG`` by depth, so
:func:`add_forward` enters the cut network's (3 convolutions a bottleneck + conv1 + the
classifier: 14 layers at ``max_blocks=1``) for the length of the call; at the default the depth
is 50 and the table's own (3, 4, 6, 3) is used untouched.

:func:`add_forward` takes the model helper and builds under whatever device scope the caller set,
so it serves one process (``backend.build``) and ``data_parallel_model.Parallelize``'s
``forward_pass_builder_fun`` (called once per device, inside that device's scope and name scope)
alike. Valid Python 3.7; imports numpy and caffe2 only.
"""

import re
from typing import Any, Dict, List, Tuple

from caffe2.python import core

from dlperf import models
from caffe2.python.models import resnet

DATA, LABEL = "data", "label"
LOSS = "loss"
LR = 0.1
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4
OPTIMIZER = ("SGD(lr=0.1, momentum=0.9, not Nesterov: caffe2.python.optimizer.build_sgd, fixed "
             "policy) + L2 weight decay 1e-4 on all parameters (WeightedSum into each gradient)")
LOSS_DESC = "SoftmaxWithLoss (mean cross-entropy over the batch)"


def add_forward(model, knobs, train, loss_scale=1.0):
    # type: (Any, Dict[str, int], bool, float) -> List[Any]
    """ResNet-50 v1.5 (cut to ``max_blocks`` where the knobs ask) on blob ``data`` (NCHW
    float32) of ``model``; training: the mean softmax cross-entropy against ``label`` (int32),
    scaled by ``loss_scale`` (data_parallel_model passes 1 / devices). Returns ``[loss]`` when
    training (what Parallelize's forward-pass builder returns, for AddGradientOperators) and
    ``[logits]`` in test mode."""
    depth, blocks = block_config(knobs)
    table = resnet.RESNEXT_BLOCK_CONFIG
    entered = depth not in table
    if table.setdefault(depth, blocks) != blocks:
        raise ValueError("create_resnext's %d layers are %s, not the %s asked for"
                         % (depth, table[depth], blocks))
    try:
        logits = resnet.create_resnext(
            model, DATA,
            num_input_channels=3,
            num_labels=int(knobs["num_classes"]),
            num_layers=depth, num_groups=1, num_width_per_group=64,
            no_bias=True, no_loss=True, is_test=not train,
            # global pooling either way; MKL-DNN's pooling also wants the kernel to be the map
            final_avg_kernel=models.resnet50_convs(int(knobs["image_size"]))[-1].size_out)
    finally:
        if entered:
            del table[depth]
    zero_last_bn_scales(model)
    if not train:
        return [logits]
    _, loss = model.SoftmaxWithLoss([logits, LABEL], ["softmax", LOSS])
    if loss_scale != 1.0:
        loss = model.Scale(loss, LOSS + "_scaled", scale=loss_scale)
    return [loss]


def block_config(knobs):
    # type: (Dict[str, int]) -> Tuple[int, Tuple[int, ...]]
    """``create_resnext``'s (num_layers, blocks per stage) for the ResNet-50 of ``knobs``:
    (50, (3, 4, 6, 3)) at the default, (14, (1, 1, 1, 1)) at ``max_blocks=1``."""
    blocks = tuple(b for _, b in models.resnet50_stages(knobs))
    return 3 * sum(blocks) + 2, blocks


# create_resnext's names: block k's BatchNorms are comp_<k>_spatbn_<1..3>; _3 follows its last 1x1
LAST_BN_SCALE = re.compile(r"(^|/)comp_\d+_spatbn_3_s$")


def zero_last_bn_scales(model):
    # type: (Any) -> int
    """Make the init net fill the scale of every bottleneck's last BatchNorm with 0 (in whatever
    name scope the model was built); returns how many it changed (16 for ResNet-50)."""
    changed = 0
    for op in model.param_init_net.Proto().op:
        if op.type == "ConstantFill" and len(op.output) == 1 and LAST_BN_SCALE.search(op.output[0]):
            for arg in op.arg:
                if arg.name == "value":
                    arg.f = 0.0
                    changed += 1
    return changed


def add_weight_decay(model, weight_decay=WEIGHT_DECAY):
    # type: (Any, float) -> None
    """grad += weight_decay * param for every parameter: Caffe2's ``WeightDecayBuilder`` (what
    ``optimizer.add_weight_decay`` applies) over all of them, as the other backends decay all;
    ``add_weight_decay`` itself passes ``weights_only=True`` and would skip biases and
    BatchNorm's scale and shift. Its constants are named per device type and id, so it also
    serves data_parallel_model's per-device optimizer builder."""
    from caffe2.python import optimizer

    optimizer._build(model, optimizer.WeightDecayBuilder(weight_decay=weight_decay),
                     weights_only=False, use_param_info_optim=False)


def add_optimizer(model):
    # type: (Any) -> Any
    """The recipe of the other backends in Caffe2's optimizer module: weight decay into the
    gradients, then momentum SGD (``MomentumSGDUpdate``: m = 0.9 m + lr g; w -= m, which is
    torch's SGD at a constant learning rate)."""
    from caffe2.python import optimizer

    add_weight_decay(model)
    return optimizer.build_sgd(model, base_learning_rate=LR, momentum=MOMENTUM, nesterov=False,
                               policy="fixed")


def count_params(model):
    # type: (Any) -> int
    """Trainable parameters as built: the size of every blob ``GetParams`` names (BatchNorm's
    running statistics are computed parameters, not counted), read from the workspace after the
    init net ran."""
    from caffe2.python import workspace

    return sum(int(workspace.FetchBlob(str(p)).size) for p in model.GetParams())


def param_shapes(model):
    # type: (Any) -> Dict[str, List[int]]
    """Every parameter's shape without running anything: the shape argument of its fill op in
    the init net (MSRAFill / ConstantFill / XavierFill all carry one)."""
    params = set(str(p) for p in model.GetParams())
    shapes = {}  # type: Dict[str, List[int]]
    for op in model.param_init_net.Proto().op:
        for out in op.output:
            if out in params:
                for arg in op.arg:
                    if arg.name == "shape":
                        shapes[out] = list(arg.ints)
    return shapes


def device_option(ideep, cuda=False, gpu_id=0):
    # type: (bool, bool, int) -> Any
    """The device option a net and its blobs run under: CPU, IDEEP (MKL-DNN) or CUDA."""
    from caffe2.proto import caffe2_pb2

    if cuda:
        return core.DeviceOption(caffe2_pb2.CUDA, gpu_id)
    return core.DeviceOption(caffe2_pb2.IDEEP if ideep else caffe2_pb2.CPU, 0)


__all__ = ["add_forward", "add_optimizer", "add_weight_decay", "block_config", "count_params",
           "param_shapes", "device_option"]
