"""Flush subnormal floats to zero on a worker's CPU threads, for frameworks that do not.

dlperf trains on one fixed synthetic batch, which the network memorises within a few steps; the
loss then reaches 0 and the gradients shrink into float32's subnormal range, where an x86 core
computes 10-100x slower unless the MXCSR register's flush-to-zero (FTZ) and
denormals-are-zero (DAZ) bits are set. oneDNN's kernels (torch, TensorFlow, MXNet and Paddle on a
CPU) and XLA's CPU runtime set them themselves; a framework whose own kernels do not would be
measured in the memorised regime, not on the network: OneFlow 0.9.0's nn.Graph ResNet-50 steps
an order of magnitude slower soon after its loss reaches 0, and does not with the bits set.
A backend that needs it calls :func:`flush_denormals` before its framework starts its thread
pools: the register is per thread, and a thread created afterwards starts with a copy of it.

Standard library only (glibc's ``fegetenv``/``fesetenv`` through ctypes); valid Python 3.7.
"""

import ctypes
import ctypes.util
import platform
from typing import Optional

# glibc's x86-64 fenv_t: the x87 environment (28 bytes), then the 32-bit MXCSR
FENV_T_BYTES = 32
MXCSR_OFFSET = 28
FTZ = 1 << 15  # results that would be subnormal are written as zero
DAZ = 1 << 6  # subnormal inputs are read as zero


def _read(libm, env):
    # type: (ctypes.CDLL, ctypes.Array) -> Optional[int]
    if libm.fegetenv(env) != 0:
        return None
    return int.from_bytes(bytes(env[MXCSR_OFFSET:MXCSR_OFFSET + 4]), "little")


def flush_denormals():
    # type: () -> Optional[str]
    """Set FTZ and DAZ on this thread; what was done, for the result, or None where it cannot
    be done (not x86-64 Linux with glibc: there the register and ``fenv_t`` differ)."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64") \
            or platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("m")
    if name is None:
        return None
    libm = ctypes.CDLL(name)
    env = (ctypes.c_ubyte * FENV_T_BYTES)()
    before = _read(libm, env)
    if before is None:
        return None
    wanted = before | FTZ | DAZ
    env[MXCSR_OFFSET:MXCSR_OFFSET + 4] = list(wanted.to_bytes(4, "little"))
    if libm.fesetenv(env) != 0:
        return None
    after = _read(libm, (ctypes.c_ubyte * FENV_T_BYTES)())
    if after is None or after & (FTZ | DAZ) != FTZ | DAZ:
        return None
    return "flushed to zero (MXCSR FTZ and DAZ set by dlperf: %#06x -> %#06x)" % (before, after)
