"""The short GPU check's order and budget (tests/gpu/check_order.py), on this machine whether or
not it has a GPU: what never ran on a GPU comes first, and the budget is checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu import check_order

pytestmark = pytest.mark.parallel


def test_what_never_ran_on_a_gpu_comes_first():
    names = ["test_torch_cuda_matrix", "test_nvml_columns_in_the_timeline_are_filled",
             "test_cuda_smoke[paddle]", "test_onnxruntime_cuda_int8_against_fp32",
             "test_dali_decodes_on_the_gpu"]
    assert sorted(names, key=check_order.rank) == [
        "test_onnxruntime_cuda_int8_against_fp32", "test_dali_decodes_on_the_gpu",
        "test_cuda_smoke[paddle]", "test_nvml_columns_in_the_timeline_are_filled",
        "test_torch_cuda_matrix"]


def test_every_ordered_name_is_a_gpu_test():
    text = (Path(__file__).resolve().parents[1] / "gpu" / "test_gpu.py").read_text()
    for name in check_order.ORDER:
        assert f"def {name}(" in text, name


def test_the_budget():
    assert check_order.budget({}) is None
    assert check_order.budget({check_order.BUDGET_VARIABLE: "420"}) == 420.0
    with pytest.raises(ValueError, match="must be seconds > 0"):
        check_order.budget({check_order.BUDGET_VARIABLE: "0"})
    assert check_order.spent(420, started=1000.0, now=1420.0)
    assert not check_order.spent(420, started=1000.0, now=1419.0)
