"""JAX backend: what it runs (``SUPPORT``), and ``build`` from :mod:`.backend`.

Light to import (standard library only): the harness reads ``SUPPORT`` without JAX.
"""

from dlperf.backends.contract import Backend
from dlperf.worker.support import Packing, Support

SUPPORT = Support(
    framework="jax",
    models=("resnet50", "bert-base", "gpt", "wide-deep"),
    precisions={
        "cpu": {"train": ("fp32", "amp-bf16"), "infer": ("fp32", "amp-bf16")},
        "cuda": {"train": ("fp32", "tf32", "amp-bf16", "amp-fp16"),
                 "infer": ("fp32", "tf32", "amp-bf16", "amp-fp16")},
    },
    # no eager mode: the whole step exists only as one jax.jit program
    modes={True: "jax.jit (XLA), whole step, state donated on a GPU"},
    # jax.distributed over the processes dlperf.launchers.spawn starts, jax.shard_map over every device
    # of the job, the gradients of the devices' mean loss (lax.pmean): gloo on CPUs, NCCL on GPUs
    distributed=("cpu", "cuda"),
    data_pipeline="numpy loader (Pillow decode in a thread pool, batches prefetched), then "
                  "jax.device_put",
    # shard_map sums the replicated parameters' gradients in one all-reduce of every leaf (one
    # tuple all-reduce in ResNet-50's optimised step), which XLA's CPU runtime sends one operand
    # after another (backends/cpu/runtime/all_reduce_thunk.cc: a gloo all-reduce per leaf); on
    # GPUs NCCL's grouping is not declared here
    packing={"cpu": Packing("shard_map's sum of the gradients: one tuple all-reduce, which "
                            "XLA's CPU runtime sends a gradient tensor at a time", tensors=1)},
    reasons={
        "compile=off": "jax always compiles the whole train step with jax.jit (XLA); there is "
                       "no eager mode to measure, so compile=false is not a separate case: run "
                       "with --compile",
        "cpu/tf32": "jax backend: precision tf32 needs a GPU (TF32 tensor cores); this run is on "
                    "cpu",
        "cpu/amp-fp16": "jax backend: precision amp-fp16 needs a GPU (fp16 with loss scaling); "
                        "this run is on cpu",
        "bf16": "jax backend: precision bf16: pure bf16 parameters are not offered; use amp-bf16 "
                "(fp32 params, bf16 compute)",
        "fp16": "jax backend: precision fp16: pure fp16 parameters are not offered; use amp-fp16 "
                "on a GPU",
        "int8": "jax backend: precision int8: int8 training does not exist in JAX/XLA",
    },
)


# where each piece lives (dlperf.backends.contract): imported only when the worker calls it
BACKEND = Backend(
    SUPPORT,
    resolve_device="dlperf.backends.jax.workload:resolve_device",
    build="dlperf.backends.jax.backend:build",
    build_info="dlperf.backends.jax.buildinfo:build_info",
    gather_results="dlperf.backends.jax.distributed:gather_results",
    profiler="dlperf.backends.jax.profiling:JaxProfiler",
    launcher="dlperf.launchers.jax:JaxDistributed",
)
