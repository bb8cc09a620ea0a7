"""The profilers of Paddle, MXNet and OneFlow in the worker (issue 27): each framework's
ResNet-50 (and Paddle's BERT), tiny, in one worker process of its environment."""

from __future__ import annotations

from pathlib import Path

from profile_checks import case, check_bert_profile, check_profile, profiled


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
        assert block["counts"]["convolution"] >= 2 * 53, block["counts"]


def test_oneflow_profile_is_unavailable_with_its_reason(tmp_path: Path) -> None:
    """OneFlow 0.9.0's profiler gives per-operator totals without start times (and aborts a CUDA
    build's process without a driver): the case is measured, its profile says why none."""
    (resnet,) = profiled("oneflow", [case("oneflow")], tmp_path)
    reason = resnet["profile"]["unavailable"]
    assert "oneflow.profiler" in reason and ("totals" in reason or "aborts" in reason), reason
