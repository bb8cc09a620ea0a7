"""Flush-to-zero for a worker's threads: set in a fresh interpreter (the register is per thread
and would otherwise change pytest's own arithmetic), then checked by arithmetic, not by reading
the flag back: a float32 product below 2**-126 must come out as zero, on the calling thread and
on a thread started after the call."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel

SCRIPT = """
import sys, threading
import numpy as np
from dlperf.worker import fpenv
said = fpenv.flush_denormals() if sys.argv[1] == "flush" else "left"
out = {}
def product(where):
    out[where] = float(np.float32(1e-38) * np.float32(0.01))
product("caller")
t = threading.Thread(target=product, args=("thread",)); t.start(); t.join()
print(said)
print(out["caller"], out["thread"])
"""

X86_GLIBC = (platform.system() == "Linux" and platform.machine() == "x86_64"
             and platform.libc_ver()[0] == "glibc")


def run(mode: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                          timeout=60, check=True)
    return proc.stdout.splitlines()


@pytest.mark.skipif(not X86_GLIBC, reason="MXCSR through glibc's fenv_t: x86-64 Linux only")
def test_subnormal_products_become_zero_here_and_in_later_threads():
    said, products = run("flush")
    assert said.startswith("flushed to zero (MXCSR FTZ and DAZ set by dlperf: ")
    assert products == "0.0 0.0"


def test_without_the_call_subnormals_are_computed():
    said, products = run("keep")
    caller, thread = (float(x) for x in products.split())
    assert caller == pytest.approx(1e-40, rel=1e-2) and thread == pytest.approx(1e-40, rel=1e-2)
