"""The TensorFlow profilers in the worker (issue 27): tf.profiler's XSpace (tensorflow) and the
FULL_TRACE step stats (tensorflow1), tiny ResNet-50 (and BERT in tensorflow), one worker process
each."""

from __future__ import annotations

from pathlib import Path

from profile_checks import case, check_bert_profile, check_profile, profiled


def test_tensorflow_profiles_resnet_and_bert(tmp_path: Path) -> None:
    resnet, bert = profiled("tensorflow", [case("tensorflow"), case("tensorflow", "bert-base")],
                            tmp_path)
    block = check_profile(resnet, nonzero=("convolution", "matmul", "normalization",
                                                   "optimizer"))
    assert block["tool"]["name"] == "tf.profiler"
    assert block["unmapped_count"] == 0, block["unmapped"]
    block = check_bert_profile(bert)
    assert block["unmapped_count"] == 0, block["unmapped"]


def test_tensorflow1_profiles_resnet(tmp_path: Path) -> None:
    (resnet,) = profiled("tensorflow1", [case("tensorflow1")], tmp_path)
    block = check_profile(resnet, nonzero=("convolution", "matmul", "normalization",
                                                   "optimizer"))
    assert block["tool"]["name"].startswith("tf.RunMetadata")
    assert block["unmapped_count"] == 0, block["unmapped"]
