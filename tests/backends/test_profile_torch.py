"""torch.profiler in the worker (issue 27): ResNet-50 and BERT, tiny, in one worker process."""

from __future__ import annotations

from pathlib import Path

from profile_checks import case, check_bert_profile, check_profile, profiled


def test_torch_profiles_resnet_and_bert(tmp_path: Path) -> None:
    resnet, bert = profiled("torch", [case("torch"), case("torch", "bert-base")], tmp_path)
    check_profile(resnet)
    block = check_bert_profile(bert)
    assert block["tool"]["name"] == "torch.profiler"


def test_onnxruntime_profiles_inference_in_a_session_of_its_own(tmp_path: Path) -> None:
    (result,) = profiled("onnxruntime", [case("onnxruntime", task="infer")], tmp_path)
    block = check_profile(result)
    assert block["tool"]["name"] == "onnxruntime session profiling"
    assert {op["name"] for op in block["top_ops"]} & {"Conv", "FusedConv"}  # ONNX's own names
