"""What the CPU the tests run on can do, asked the way the backends ask, so that a test of a
CPU-dependent capability asserts the capability where the CPU has it and the refusal, with its
reason, where it does not (an AVX2-only EPYC has no bf16 kernels in MXNet 1.9's oneDNN)."""

from __future__ import annotations

import functools
import json
import subprocess

from conftest import pinned_env
from dlperf import envs

PROBE_TIMEOUT = 600


@functools.lru_cache(maxsize=None)
def mxnet_bf16_refusal() -> str | None:
    """MXNet's own bf16 kernel probe (``backends.mxnet.workload.bf16_probe``) in its
    environment, in a process of its own (a failed oneDNN primitive can leave MXNet unable to
    create the next one in the same process). None where amp-bf16 runs (AVX-512 CPUs), else
    the reason the backend gives."""
    code = ("import json, mxnet as mx\n"
            "from mxnet.contrib import amp\n"
            "amp.init(target_dtype='bfloat16')\n"
            "from dlperf.backends.mxnet.workload import bf16_probe\n"
            "print('OUT=' + json.dumps(bf16_probe(mx.cpu())))\n")
    proc = subprocess.run([pinned_env("mxnet"), "-c", code], capture_output=True, text=True,
                          timeout=PROBE_TIMEOUT, env=envs.worker_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("OUT="))[4:])


def check_bf16_refused(result: dict, refusal: str) -> None:
    """A stored amp-bf16 MXNet result on a CPU without bf16 kernels: refused, with the probe's
    reason, and no throughput."""
    assert result["status"] == "unsupported", (result["status"], result.get("error"))
    assert "bf16 kernel probe" in result["error"] and "no bf16 kernel" in result["error"]
    assert refusal.split(":")[0] in result["error"]
    assert not (result.get("throughput") or {}).get("median")
