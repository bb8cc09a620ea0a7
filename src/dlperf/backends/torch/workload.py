"""Device, precision, compilation and distribution plumbing shared by every PyTorch model.

The model files only describe networks; everything that changes *how* they run (autocast,
GradScaler, TF32 switches, channels_last, torch.compile, DDP) lives here so all models are
measured under the same rules.
"""

import contextlib
import gc
import os
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import nn

from dlperf.backends.common import check_device_name, gather_json
from dlperf.worker.support import CPU_BUILD, resolved_device
from dlperf.worker.workload import UnsupportedError, Workload, cpu_name, median_seconds

COMPILE_MODE = "default"


# --------------------------------------------------------------------------------------------
# device and distribution
# --------------------------------------------------------------------------------------------


def world_size():
    # type: () -> int
    return int(os.environ.get("WORLD_SIZE", "1"))


def select_device(requested):
    # type: (str) -> torch.device
    """Resolve ``auto``/``cpu``/``cuda``; under torchrun each process takes cuda:LOCAL_RANK."""
    check_device_name(requested)
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise UnsupportedError(
            "device cuda requested but torch %s sees no CUDA device" % torch.__version__
        )
    if requested == "cpu" or not has_cuda:
        return torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def resolve_device(requested):
    # type: (str) -> Dict[str, Any]
    """Where :func:`select_device` puts this process (:func:`resolved_device`): the GPU's index
    and name, or why the CPU."""
    device = select_device(requested)
    if device.type == "cuda":
        return resolved_device("cuda", device.index, torch.cuda.get_device_name(device))
    if torch.version.cuda is None:
        return resolved_device("cpu", reason=CPU_BUILD % ("torch", "torch"))
    return resolved_device("cpu", reason="torch %s (CUDA %s) sees no usable CUDA device (driver, "
                                         "CUDA_VISIBLE_DEVICES)" % (torch.__version__,
                                                                    torch.version.cuda))


def maybe_wrap_ddp(model, device):
    # type: (nn.Module, torch.device) -> nn.Module
    """Join the process group torchrun described (RANK/WORLD_SIZE/MASTER_ADDR env) and wrap the
    model in DistributedDataParallel; a single process gets the model back untouched.

    NCCL on CUDA, gloo on CPU. DDP broadcasts rank 0's weights at construction, so every rank
    starts identical whatever its seed.
    """
    if not join_process_group(device):
        return model
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        return DistributedDataParallel(model, device_ids=[device.index], output_device=device.index)
    return DistributedDataParallel(model)


def rank():
    # type: () -> int
    return int(os.environ.get("RANK", "0"))


def join_process_group(device):
    # type: (torch.device) -> bool
    """Join the process group torchrun described (NCCL on CUDA, gloo on CPU), as
    :func:`maybe_wrap_ddp` does for training; False (nothing joined) for a single process."""
    if world_size() <= 1:
        return False
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return True


def barrier(device):
    # type: (torch.device) -> None
    """Every rank waits for the others (the timing loop brackets the window with this); a no-op
    outside a process group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def gather_ints(value, device):
    # type: (int, torch.device) -> List[int]
    """Every rank's ``value``: an all-reduce (sum) of a vector zero but for this rank's own
    entry, on the process group's device (NCCL's on the GPU, gloo's on the CPU); ``[value]``
    outside a process group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    votes = torch.zeros(dist.get_world_size(), dtype=torch.int64, device=device)
    votes[dist.get_rank()] = value
    dist.all_reduce(votes)
    return [int(v) for v in votes.tolist()]


def gather_results(payload):
    # type: (Dict[str, Any]) -> Optional[List[Dict[str, Any]]]
    """Every rank's result at global rank 0, None on the others; then leave the process group.
    A single process gets its own result back.

    The results travel as JSON bytes (:func:`dlperf.backends.common.gather_json`) through
    all_gather, which gloo and NCCL both have, on the process group's device."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [payload]
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend() == "nccl" else torch.device("cpu"))

    def all_gather(vector):
        # type: (Any) -> Any
        mine = torch.from_numpy(vector).to(device)
        rows = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(rows, mine)
        return torch.stack(rows).cpu().numpy()

    everyone = gather_json(payload, all_gather, dist.get_rank() == 0)
    # DDP's reducer sits in reference cycles; one that outlives the group makes torch 2.13 abort
    # the process at exit ("terminate called without an active exception") after gloo runs
    gc.collect()
    dist.destroy_process_group()
    return everyone


# --------------------------------------------------------------------------------------------
# precision
# --------------------------------------------------------------------------------------------


class Precision(object):
    """What a precision name means on a given device: autocast dtype, scaler, TF32 switches."""

    def __init__(self, name, device, train=True):
        # type: (str, torch.device, bool) -> None
        self.name = name  # which precisions run where: SUPPORT in __init__
        self.device = device
        self.autocast_dtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(name)
        self.scaler = None  # type: Optional[Any]
        self.tf32 = name == "tf32"
        if device.type == "cuda":
            # cuDNN allows TF32 convolutions by default; switch it off unless asked, so that
            # "fp32" really is IEEE fp32 on Ampere and later.
            torch.backends.cuda.matmul.allow_tf32 = self.tf32
            torch.backends.cudnn.allow_tf32 = self.tf32
            if name == "amp-fp16":
                self.scaler = torch.amp.GradScaler("cuda")
        if self.autocast_dtype is not None:
            self._probe_autocast()
        self.cast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name)
        if self.cast_dtype is not None:
            self._probe_cast()

    def _probe_cast(self):
        # type: () -> None
        """Fail at build time if this device has no kernels for a whole-model cast."""
        try:
            x = torch.ones(1, 2, 4, 4, device=self.device, dtype=self.cast_dtype)
            w = torch.ones(2, 2, 3, 3, device=self.device, dtype=self.cast_dtype)
            torch.nn.functional.conv2d(x, w)
            torch.mm(x[0, 0], x[0, 0])
        except (RuntimeError, TypeError) as exc:
            raise UnsupportedError(
                "precision %s: torch %s has no %s kernels on %s: %s"
                % (self.name, torch.__version__, self.cast_dtype, self.device.type, exc)
            )

    def _probe_autocast(self):
        # type: () -> None
        """Fail at build time, with a clear message, if this device cannot autocast to dtype."""
        try:
            with self.autocast():
                a = torch.ones(4, 4, device=self.device)
                out = torch.mm(a, a)
            ok = out.dtype == self.autocast_dtype
        except (RuntimeError, TypeError) as exc:
            raise UnsupportedError(
                "precision %s: torch %s cannot autocast to %s on %s: %s"
                % (self.name, torch.__version__, self.autocast_dtype, self.device.type, exc)
            )
        if not ok:
            raise UnsupportedError(
                "precision %s: torch %s autocast on %s does not produce %s"
                % (self.name, torch.__version__, self.device.type, self.autocast_dtype)
            )

    def autocast(self):
        # type: () -> Any
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def info(self):
        # type: () -> Dict[str, Any]
        out = {
            "precision": self.name,
            "autocast_dtype": str(self.autocast_dtype).replace("torch.", "")
            if self.autocast_dtype is not None
            else None,
            "grad_scaler": self.scaler is not None,
        }  # type: Dict[str, Any]
        if self.device.type == "cuda":
            out["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
            out["tf32_cudnn"] = torch.backends.cudnn.allow_tf32
        return out


# --------------------------------------------------------------------------------------------
# the workload
# --------------------------------------------------------------------------------------------


def count_params(model):
    # type: (nn.Module) -> int
    """Unique trainable parameters; ``parameters()`` already yields a tied tensor once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)




class CudaPeak(object):
    """The device-memory peak of a workload on ``self.device`` (a ``torch.device``): the CUDA
    caching allocator's, reset after the warm-up so that cuDNN's autotuning scratch does not
    count. Shared by the training workload and the pipeline-only one."""

    device = None  # type: torch.device

    def peak_device_bytes(self):
        # type: () -> Optional[int]
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return None

    def reset_device_peak(self):
        # type: () -> bool
        if self.device.type != "cuda":
            return False
        torch.cuda.reset_peak_memory_stats(self.device)
        return True


class TorchWorkload(CudaPeak, Workload):
    """A model, its optimizer and one synthetic batch already on the device.

    ``forward_loss(model)`` runs the model on the stored batch and returns the loss (training) or
    a scalar summary of the output (inference); everything else — autocast, backward, scaler,
    clipping, optimizer — is applied here identically for every model.
    """

    def __init__(
        self,
        model,  # type: nn.Module
        optimizer,  # type: Optional[torch.optim.Optimizer]
        forward_loss,  # type: Callable[[nn.Module], torch.Tensor]
        precision,  # type: Precision
        device,  # type: torch.device
        samples_per_step,  # type: int
        params,  # type: int
        clip_grad_norm=None,  # type: Optional[float]
        info=None,  # type: Optional[Dict[str, Any]]
        reduced_params=None,  # type: Optional[int]
    ):
        # type: (...) -> None
        self.model = model
        self.optimizer = optimizer
        self.forward_loss = forward_loss
        self.precision = precision
        self.device = device
        super(TorchWorkload, self).__init__(samples_per_step, params, dict(info or {}))
        # what DDP all-reduces each step: every parameter unless a model-parallel part is
        # each rank's own (the face model's sharded classifier)
        self.reduced_params = params if reduced_params is None else reduced_params
        self.clip_grad_norm = clip_grad_norm
        self.train = optimizer is not None

    def step(self):
        # type: () -> torch.Tensor
        if not self.train:
            with torch.inference_mode(), self.precision.autocast():
                return self.forward_loss(self.model)
        with self.precision.autocast():
            loss = self.forward_loss(self.model)
        # The previous step's gradients are dropped after the forward, not before it: the
        # order of torchvision's reference loop (forward, zero_grad, backward, step). Freed
        # before the forward, their blocks went to the activations, and on a CPU the backward's
        # new gradients then came from fresh pages every step (docs/fidelity.md, "Compiled
        # modes", torch). set_to_none, torch's default (Horovod's takes no argument).
        self.optimizer.zero_grad()
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.scale(loss).backward()
            with self.reduced():
                if self.clip_grad_norm is not None:
                    scaler.unscale_(self.optimizer)
                    nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
                scaler.step(self.optimizer)  # reads found_inf on the host: inherent to fp16 AMP
            scaler.update()
        else:
            loss.backward()
            with self.reduced():
                if self.clip_grad_norm is not None:
                    nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
                self.optimizer.step()
        return loss.detach()

    def reduced(self):
        # type: () -> Any
        """Around the update, which reads every rank's reduced gradients: DDP all-reduced them
        during backward, so nothing here (Horovod's workload waits for its all-reduces)."""
        return contextlib.nullcontext()

    def sync(self):
        # type: () -> None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self):
        # type: () -> None
        """Every rank waits for the others (the timing loop brackets the window with this)."""
        barrier(self.device)

    def all_gather_ints(self, value):
        # type: (int) -> List[int]
        """Every rank's ``value``: :func:`gather_ints` on this workload's device."""
        return gather_ints(value, self.device)

    def allreduce_probe(self):
        # type: () -> Optional[float]
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        buffer = torch.zeros(self.reduced_params, dtype=torch.float32, device=self.device)
        return median_seconds(lambda: dist.all_reduce(buffer), self.sync)

    def loss_value(self, handle):
        # type: (Any) -> float
        return float(handle.detach().float().item())

    def profiler(self):
        # type: () -> Any
        from dlperf.backends.torch.profiling import TorchProfiler

        return TorchProfiler(self.device)


def runtime_info(device):
    # type: (torch.device) -> Dict[str, Any]
    """Facts about this torch and device that change performance and belong with a result."""
    info = {
        "torch_version": torch.__version__,
        "device": str(device),
        "num_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "world_size": world_size(),
        "rank": rank(),
    }  # type: Dict[str, Any]
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["cuda_version"] = torch.version.cuda
        info["cudnn_version"] = torch.backends.cudnn.version()
        info["cudnn_benchmark"] = torch.backends.cudnn.benchmark
        info["device_capability"] = "%d.%d" % torch.cuda.get_device_capability(device)
    else:
        info["device_name"] = cpu_name()
    return info
