"""The profilers of Paddle, MXNet and OneFlow in the worker (issue 27): each framework's
ResNet-50 (and Paddle's BERT), tiny, in one worker process of its environment."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from conftest import pinned_env
from profile_checks import RESNET_CONV_LAYERS, case, check_bert_profile, check_profile, profiled


def test_paddle_profiles_resnet_and_bert(tmp_path: Path) -> None:
    resnet, bert = profiled("paddle", [case("paddle"), case("paddle", "bert-base")], tmp_path)
    block = check_profile(resnet)
    assert block["tool"]["name"] == "paddle.profiler"
    assert block["unmapped_count"] == 0, block["unmapped"]
    block = check_bert_profile(bert)


def test_mxnet_profiles_resnet_forward_and_backward(tmp_path: Path) -> None:
    """Imperative and hybridized: the profiled steps run with engine bulking off (the window
    with it on), so the backward's operators are seen one by one, not as bulks in ``other``."""
    cases = [case("mxnet"), case("mxnet", compile=True)]
    for result in profiled("mxnet", cases, tmp_path):
        block = check_profile(result)
        assert block["tool"]["name"] == "mx.profiler"
        assert "engine bulking off for the profiled steps" in block["tool"]["note"]
        assert "overhead" in block["tool"]["note"]
        assert ("hybridized graph was rebuilt" in block["tool"]["note"]) == bool(
            result["info"]["compile"]), block["tool"]["note"]
        assert block["unmapped_count"] == 0, block["unmapped"]
        assert block["categories"]["optimizer"] > 0
        named = {op["name"] for op in block["top_ops"]}
        assert {"Convolution", "_backward_Convolution"} <= named, named
        assert block["categories"]["other"] <= 0.05 * block["step_s"], block["categories"]
        # forward and backward: two convolution operators per convolution layer and step
        assert block["counts"]["convolution"] >= 2 * RESNET_CONV_LAYERS, block["counts"]


def test_oneflow_profile_is_unavailable_with_its_reason(tmp_path: Path) -> None:
    """OneFlow 0.9.0's profiler gives per-operator durations without start times (and aborts a
    CUDA build's process without a driver): the case is measured, its profile says why none."""
    (resnet,) = profiled("oneflow", [case("oneflow")], tmp_path)
    reason = resnet["profile"]["unavailable"]
    assert "oneflow.profiler" in reason and ("totals" in reason or "aborts" in reason), reason
    assert "\n" not in reason
    if "aborts" in reason:  # what was tried, and why it fails
        assert "cudaDeviceSynchronize" in reason and "CPU activity only" in reason, reason


ONEFLOW_CPU_PROFILE = """
import oneflow as flow
import oneflow.sysconfig
if not oneflow.sysconfig.with_cuda() or flow.cuda.is_available():
    print("profiler can run here")
    raise SystemExit(0)
conv = flow.nn.Conv2d(4, 4, 3)
with flow.profiler.profile(activities=[flow.profiler.ProfilerActivity.CPU], record_shapes=False):
    conv(flow.randn(1, 4, 8, 8)).sum().backward()
print("profiled")
"""


def test_oneflow_cpu_only_profiler_aborts_this_build() -> None:
    """The reason's claim, checked: on a CUDA build with no driver, OneFlow's profiler with CPU
    activity alone and no shapes kills its process when it stops (cudaDeviceSynchronize). When
    this fails, the profiler runs here and the backend can use it."""
    proc = subprocess.run([pinned_env("oneflow"), "-c", ONEFLOW_CPU_PROFILE],
                          capture_output=True, text=True, timeout=300)
    if "profiler can run here" in proc.stdout:
        pytest.skip("this host has a CUDA driver (or OneFlow is a CPU build)")
    assert proc.returncode == -signal.SIGABRT, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "profiled" not in proc.stdout
    assert "cudaDeviceSynchronize" in proc.stderr, proc.stderr[-2000:]
