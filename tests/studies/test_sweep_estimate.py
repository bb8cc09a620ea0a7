"""The sweep's time estimate (`dlperf sweep FILE --dry-run`): warm-up under `auto` is bounded by
the case's warmup_max_steps, as the worker bounds it."""

from __future__ import annotations

import dataclasses

from pathlib import Path

import pytest

from dlperf.studies import sweep
from dlperf.studies.sweep_runner import AUTO_WARMUP_GUESS, Estimator
from dlperf.worker import steady

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel


def test_auto_warmup_estimate_honours_warmup_max_steps(tmp_path: Path):
    path = tmp_path / "capped.yaml"
    path.write_text("name: capped\ndefaults:\n  framework: torch\n  model: resnet50\n"
                    "  batch_size: 16\n  steps: 10\n  repeats: 1\n"
                    "matrix:\n"
                    f"  warmup_max_steps: [2, 5, {AUTO_WARMUP_GUESS}, {steady.MAX_STEPS}]\n")
    cases = sweep.load(path).cases
    assert [c.warmup_max_steps for c in cases] == [2, 5, AUTO_WARMUP_GUESS, steady.MAX_STEPS]
    assert all(c.warmup_steps == "auto" for c in cases)
    estimator = Estimator([])  # nothing stored: the same guessed step time for every case
    seconds = [estimator.repeat_seconds(c)[0] for c in cases]
    two, five, guess, default = seconds
    # a cap of 5 cannot be estimated as more warm-up steps than 5 ...
    assert two < five < guess
    assert five - two == pytest.approx(guess - five)  # 3 steps each
    # ... and a cap above the guess changes nothing
    assert default == pytest.approx(guess)
    # a fixed count ignores the bound, here and in the worker
    fixed = [estimator.repeat_seconds(dataclasses.replace(c, warmup_steps=7))[0] for c in cases]
    assert fixed == pytest.approx([fixed[0]] * 4)


def test_estimate_honours_min_duration_and_the_timeout(tmp_path: Path):
    """A repeat lasts at least --min-duration of window, and never longer than its timeout;
    a case whose repeat would time out costs one repeat, since the harness stops there."""
    from dlperf.studies.sweep_runner import CaseState

    path = tmp_path / "bounds.yaml"
    path.write_text("name: bounds\ndefaults:\n  framework: torch\n  model: resnet50\n"
                    "  batch_size: 1\n  image_size: 32\n  steps: 2\n  repeats: 3\n"
                    "  warmup_steps: 1\n"
                    "matrix:\n  min_duration_s: [0, 30]\n")
    plain, long_window = sweep.load(path).cases
    # the timeout is not part of a case's identity (a sweep merges cases that differ only there)
    short_window_timeout = dataclasses.replace(plain, timeout_s=20.0)
    long_window_timeout = dataclasses.replace(long_window, timeout_s=20.0)
    estimator = Estimator([])
    base = estimator.repeat_seconds(plain)[0]
    assert base < 30  # a tiny case: a couple of guessed steps and the guessed overhead
    assert estimator.repeat_seconds(long_window)[0] > 30  # overhead + a 30-s window
    assert estimator.repeat_seconds(long_window)[0] < base + 30
    # the timeout bounds a repeat, and the case stops at the first timed-out repeat
    assert estimator.repeat_seconds(long_window_timeout)[0] == 20
    assert estimator.case_seconds(CaseState(long_window_timeout)) == 20
    assert estimator.case_seconds(CaseState(long_window)) == pytest.approx(
        3 * estimator.repeat_seconds(long_window)[0])
    assert estimator.case_seconds(CaseState(short_window_timeout)) == pytest.approx(3 * base)


def test_auto_is_read_as_where_the_worker_will_run_by_sweeps_and_tunes_alike():
    """``--device auto`` before any worker starts: cuda only where the backend declares CUDA and
    an NVIDIA driver is loaded, else cpu; an explicit device is itself. The sweep's refusal
    check and the tune's search space read the same answer (spec.expected_device)."""
    from dlperf import envs
    from dlperf.spec import Case, declared_refusal, expected_device, frameworks, support
    from dlperf.tune import knobs

    driver = envs.driver_present()
    for framework in frameworks():
        auto = Case(framework=framework, model="resnet50", batch_size=2, device="auto")
        declared = support(framework).precisions
        assert expected_device(auto) == ("cuda" if "cuda" in declared and driver else "cpu")
        assert expected_device(Case(framework=framework, model="resnet50", batch_size=2,
                                    device="cpu")) == "cpu"
    torch_auto = Case(framework="torch", model="resnet50", batch_size=2, device="auto")
    where = expected_device(torch_auto)
    precision = next(knob for knob in knobs.space(torch_auto) if knob.name == "precision")
    assert set(precision.values) == set(support("torch").precisions[where]["train"])
    tf32 = Case(framework="torch", model="resnet50", batch_size=2, device="auto",
                precision="tf32")  # TensorFloat-32 is an NVIDIA GPU's
    assert (declared_refusal(tf32) is None) == (where == "cuda")


def test_a_declared_refusal_costs_one_short_repeat():
    """The worker refuses before building and the harness stops at the first failed repeat."""
    from dlperf.spec import Case, declared_refusal
    from dlperf.studies.sweep_runner import UNSUPPORTED_S, CaseState

    refused = Case(framework="torch", model="resnet50", batch_size=2, precision="tf32",
                   device="cpu", repeats=3)
    assert declared_refusal(refused) is not None
    estimator = Estimator([])
    assert estimator.repeat_seconds(refused) == (UNSUPPORTED_S, "declared unsupported")
    assert estimator.case_seconds(CaseState(refused)) == UNSUPPORTED_S
