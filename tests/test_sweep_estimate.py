"""The sweep's time estimate (`dlperf sweep FILE --dry-run`): warm-up under `auto` is bounded by
the case's warmup_max_steps, as the worker bounds it."""

from __future__ import annotations

import dataclasses

from pathlib import Path

import pytest

from dlperf import sweep
from dlperf.sweep_runner import AUTO_WARMUP_GUESS, Estimator
from dlperf.worker import steady


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
