"""Caffe2 backend (the ``caffe2`` package inside PyTorch 1.8.1's cp37 wheel): what it runs
(``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only, valid Python 3.7): read without Caffe2.

The engine is a case option (``--option engine=ideep|cpu``; ideep, MKL-DNN, where the wheel has
it when none is given), part of the case's identity and recorded in the result; see docs/envs.md.
"""

from dlperf.backends.common import CPU_TF32
from dlperf.backends.contract import Backend
from dlperf.worker.support import Option, Packing, Support

# Caffe2 1.8.1's IDEEP update of conv1 was wrong without optimizeForMKLDNN(training_mode=True)
# (backend.py says how it was found), so every ideep training run applies it: training has no
# compiled mode of its own.
TRAIN_TRANSFORM_ALWAYS = (
    "compile on: Caffe2's MKL-DNN transform changes inference only (BN folded, Conv+ReLU/Sum "
    "fused); in training its only step, optimizeForMKLDNN(training_mode=True) pre-converting the "
    "filters, is applied to every ideep training run already, because without it Caffe2 1.8.1's "
    "IDEEP update of conv1 is wrong; train with compile off")

#: Where the processes of a data-parallel run meet: the directory of Caffe2's file store handler,
#: set by the launcher (dlperf.launchers.caffe2) and read by the worker (.distribute).
STORE_VARIABLE = "DLPERF_CAFFE2_STORE"

ONLY_FP32 = "the caffe2 backend trains and infers in fp32 only"
NO_TRANSFORMER = (
    "Caffe2 ships no transformer: caffe2.python has no multi-head self-attention block and no "
    "BERT or GPT model (its attention.py is the RNN decoder attention of the seq2seq example); "
    "one written out op by op from brew.fc, batch_mat_mul and layer_norm would be dlperf's own "
    "network, not one Caffe2 offered its users, and the study dlperf reproduces measured Caffe2 "
    "on CNNs only (ResNet-50 with resnet50_trainer.py)")

ONLY_RESNET50 = ("the caffe2 backend builds the network of the study it reproduces, ResNet-50 "
                 "v1.5 (create_resnext, as Caffe2's imagenet_trainer.py), and no other")

#: Why each catalogue model other than resnet50 is refused (the shared check names no reason).
MODEL_REASONS = {
    "bert-base": NO_TRANSFORMER,
    "gpt": NO_TRANSFORMER,
    "wide-deep": "Caffe2's recommendation models live in its layers/ framework "
                 "(layer_model_helper), which dlperf does not build; " + ONLY_RESNET50,
}


class Caffe2Support(Support):
    """The shared declaration, plus the framework's reason for each model it does not build."""

    def refusal(self, case, device):
        # type: (dict, str) -> object
        model = case.get("model")
        if model not in self.models:
            return "the caffe2 backend does not build model %r: %s" % (
                model, MODEL_REASONS.get(model, ONLY_RESNET50))
        return super(Caffe2Support, self).refusal(case, device)


SUPPORT = Caffe2Support(
    framework="caffe2",
    models=("resnet50",),
    precisions={
        "cpu": {"train": ("fp32",), "infer": ("fp32",)},
        # CUDA 10.2 build: GPUs up to compute capability 7.5; a newer one is refused by the
        # worker (backend.check_gpu) naming its capability
        "cuda": {"train": ("fp32",), "infer": ("fp32",)},
    },
    # on: Caffe2's MKL-DNN graph optimisation for inference (BN folded into Conv, Conv+ReLU and
    # Conv+Sum fused); its training form (filters pre-converted) is part of every ideep training
    # run, which is wrong without it, so a compiled training case is refused by the worker
    modes={False: "net as built (RunNet)",
           True: "optimizeForMKLDNN net transform (ideep engine, inference)"},
    task_modes={"train": (False,)},
    # data_parallel_model over processes (dlperf.launchers.caffe2), Gloo all-reduce; training only
    distributed=("cpu", "cuda"),
    # Parallelize's _AllReduceBlobsDistributed: one Gloo Allreduce operator per gradient blob
    # (up to max_concurrent_distributed_ops, 16, in flight on cloned common worlds)
    packing={kind: Packing("data_parallel_model.Parallelize over Gloo: one Allreduce operator per "
                           "gradient blob (max_concurrent_distributed_ops default 16 at once)",
                           tensors=1) for kind in ("cpu", "cuda")},
    options={"engine": Option(("ideep", "cpu"), (
        "ideep: every operator on Caffe2's IDEEP device (MKL-DNN), the default where the wheel "
        "has it (workspace.C.use_mkldnn); cpu: Caffe2's own CPU operators (im2col + MKL GEMM), "
        "the engine imagenet_trainer.py --use_cpu runs"))},
    reasons={
        "train/compile=on": TRAIN_TRANSFORM_ALWAYS,
        "cpu/tf32": CPU_TF32,
        "tf32": "precision tf32: Caffe2 in torch 1.8.1's CUDA 10.2 build predates TF32 (CUDA 11, "
                "Ampere); use fp32",
        "amp-fp16": "precision amp-fp16: Caffe2 has no automatic mixed precision; its fp16 "
                    "training (imagenet_trainer --dtype float16, fp16 weights with fp32 master "
                    "copies) is not wired into this backend; " + ONLY_FP32,
        "amp-bf16": "precision amp-bf16: Caffe2 has no bfloat16 kernels or mixed precision; "
                    + ONLY_FP32,
        "bf16": "precision bf16: Caffe2 has no bfloat16 kernels; " + ONLY_FP32,
        "fp16": "precision fp16: a whole-model fp16 cast is not offered; " + ONLY_FP32,
        "train/int8": "precision int8: Caffe2 has no int8 training; " + ONLY_FP32,
        "int8": "precision int8: the wheel registers Caffe2's Int8 operators (Int8Conv, the "
                "DNNLOWP engine), but they need a quantized net (quantization parameters from a "
                "calibration pass) that this backend does not build; " + ONLY_FP32,
    },
)

# where each piece lives (dlperf.backends.contract): imported only when the worker calls it
BACKEND = Backend(
    SUPPORT,
    resolve_device="dlperf.backends.caffe2.backend:resolve_device",
    build="dlperf.backends.caffe2.backend:build",
    # what the framework says it is: Caffe2 ships inside the torch wheel, which says it
    build_info="dlperf.backends.torch.buildinfo:build_info",
    gather_results="dlperf.backends.caffe2.distribute:gather_results",
    launcher="dlperf.launchers.caffe2:Caffe2Gloo",
)
