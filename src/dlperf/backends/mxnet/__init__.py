"""Apache MXNet 1.9 (Gluon) backend: what it runs (``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only): the harness reads ``SUPPORT`` without MXNet.

Why amp-bf16 is declared: with mxnet 1.9.1 from PyPI and
``mxnet.contrib.amp.init(target_dtype="bfloat16")``, Convolution and FullyConnected outputs are
bfloat16 and oneDNN runs them with its ``jit_bf16`` kernels (``DNNL_VERBOSE``:
``jit_bf16:avx512_core``, bf16 sources, weights and destinations) on a CPU with AVX-512 even
without avx512_bf16 or AMX, where it may be slower than fp32: the declaration says what MXNet
can run, not what is fast. On a CPU without AVX-512 oneDNN has no bf16 kernel at all, so the
build probes one on the machine at hand (``bf16_probe``), refuses the case naming the probe,
and records which operators ended up in bf16. float16 has no CPU kernels.
"""

from dlperf.backends.common import CPU_TF32
from dlperf.backends.contract import Backend
from dlperf.worker.support import Option, Packing, Support, Wire

CPU_FP16 = ("mxnet 1.9.1 has no float16 kernels on a CPU: mxnet.contrib.amp float16 casts a "
            "convolution and MXNet fails with 'FP16 gemm on cpu not implemented!'")
NOT_OFFERED = ("the mxnet backend offers fp32 and mixed precision (amp-bf16: mxnet.contrib.amp, "
               "fp32 weights, bf16 Convolution/FullyConnected) only")
NO_GPU_BUILD = ("the mxnet environment is the CPU build of mxnet 1.9.1 from PyPI; the "
                "backend runs on cpu only")

SUPPORT = Support(
    framework="mxnet",
    models=("resnet50", "bert-base"),
    precisions={
        "cpu": {"train": ("fp32", "amp-bf16"), "infer": ("fp32", "amp-bf16")},
    },
    modes={False: "imperative (Gluon, not hybridized)",
           True: "hybridize(static_alloc=True, static_shape=True)"},
    # the parameter-server kvstore (dist_sync): a ps-lite scheduler, a server per node and the
    # workers, started with DMLC_ROLE as MXNet's tools/launch.py --launcher local does
    distributed=("cpu",),
    # --launcher horovod: horovodrun starts the workers, Gluon's hvd.DistributedTrainer sums
    # their gradients (:mod:`.horovod`), in the mxnet+horovod environment
    launchers=("native", "horovod"),
    # read by libmxnet when it is loaded, so the launcher sets it (harness side)
    options={"onednn": Option(("on", "off"), (
        "MXNet's oneDNN (MKL-DNN) accelerator on the CPU (MXNET_MKLDNN_ENABLED, read when MXNet "
        "is loaded; MXNet's default is on in its oneDNN builds, the PyPI wheel's): on runs "
        "convolutions, batch norms, activations, pooling and fully connected layers through "
        "oneDNN's kernels, in its blocked layouts; off runs MXNet's own CPU kernels (im2col + "
        "BLAS), what oneDNN is measured against; amp-bf16 needs it on (oneDNN has MXNet's only "
        "bf16 kernels). MXNET_SUBGRAPH_BACKEND's oneDNN fusion is not offered: MXNet applies it "
        "to inference graphs only"),
        variables={"on": {"MXNET_MKLDNN_ENABLED": "1"}, "off": {"MXNET_MKLDNN_ENABLED": "0"}},
        precisions={"off": (("fp32",), "oneDNN has MXNet's only bf16 kernels, so amp-bf16 "
                                       "needs onednn=on")})},
    # Gluon's Trainer pushes and pulls each parameter's gradient under its own key
    packing={"cpu": Packing("Gluon Trainer over the dist_sync kvstore: a push and a pull per "
                            "parameter key", tensors=1)},
    # ps-lite's servers, one per node (the launcher's), each holding its share of the keys
    # (the large ones split over every server): each worker's push and pull cross the links,
    # the sum is made on the servers: on 2 hosts a ring's bytes, which tests/projection/
    # test_wire.py checks against the stored 2-host results. A key of MXNET_KVSTORE_BIGARRAY_BOUND
    # (10^6) values or more is split over every server: 4 MB of fp32, the push-and-pull model's
    # smallest fitted size (its 1 and 2 MiB keys, each to one server, moved 6 MB/s at 100 Mbit/s
    # where 4-32 MiB moved 11: docs/projection.md)
    wire={"cpu": Wire(1.0, "ps-lite's dist_sync kvstore, a server per node; measured on 2 "
                           "emulated hosts", exchange="parameter-server",
                      split_bytes=4 * 10**6)},
    reasons={
        "cuda": NO_GPU_BUILD,
        "cpu/tf32": CPU_TF32,
        "cpu/amp-fp16": "precision amp-fp16: " + CPU_FP16,
        "cpu/fp16": "precision fp16: " + CPU_FP16,
        "bf16": "precision bf16: a whole-model bf16 cast is not offered; " + NOT_OFFERED,
        "train/int8": "precision int8: int8 training does not exist in MXNet; " + NOT_OFFERED,
        "int8": "precision int8: MXNet's post-training quantization (mxnet.contrib.quantization) "
                "is not wired into this backend; " + NOT_OFFERED,
    },
)


# where each piece lives (dlperf.backends.contract): imported only when the worker calls it
BACKEND = Backend(
    SUPPORT,
    resolve_device="dlperf.backends.mxnet.workload:resolve_device",
    build="dlperf.backends.mxnet.backend:build",
    build_info="dlperf.backends.mxnet.buildinfo:build_info",
    gather_results="dlperf.backends.mxnet.horovod:gather_results",
    profiler="dlperf.backends.mxnet.profiling:MXNetProfiler",
    launcher="dlperf.launchers.mxnet:KVStoreLaunch",
)
