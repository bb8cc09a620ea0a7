"""A model knob given twice (two --knob pairs, or --knob beside the knob's own flag), or a
--profile-steps that profiles nothing, is refused with one line, in every command that builds a
case from flags: never silently resolved or ignored."""
from __future__ import annotations

import pytest

from conftest import dlperf_main

RUN = ["--framework", "torch", "--model", "resnet50", "--batch-size", "2", "--steps", "3",
       "--repeats", "1"]
INFER = ["--framework", "torch", "--model", "resnet50", "--batch-sizes", "1", "--steps", "3"]


def refused_alone(tmp_path, command: str, argv: list[str], says: str) -> None:
    """``dlperf COMMAND ARGV`` exits 2 with ``says`` as its one line, and creates no database."""
    db = tmp_path / "r.db"
    proc = dlperf_main(command, *argv, "--db", str(db), timeout=30,
                       env={"DLPERF_LOCK_DIR": str(tmp_path)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [f"dlperf {command}: error: {says}"], proc.stderr
    assert not db.exists()


@pytest.mark.parallel
@pytest.mark.parametrize("command, base", [("run", RUN), ("infer", INFER),
                                           ("capacity", RUN + ["--param", "batch_size"])])
@pytest.mark.parametrize("extra, says", [
    (["--image-size", "32", "--knob", "image_size=0"],
     "--knob image_size=0: image_size has its own flag, --image-size, also given; give it once"),
    (["--knob", "num_classes=10", "--knob", "num_classes=20"],
     "--knob num_classes: given twice (10 and 20); give it once"),
])
def test_a_knob_given_twice_is_refused(tmp_path, command, base, extra, says):
    refused_alone(tmp_path, command, [*base, *extra], says)


@pytest.mark.parallel
def test_partial_fc_beside_its_knob_is_refused(tmp_path):
    proc = dlperf_main("run", "--framework", "torch", "--model", "face-resnet50",
                       "--batch-size", "2", "--partial-fc", "0.1", "--knob", "partial_fc=50",
                       "--db", str(tmp_path / "r.db"), timeout=30,
                       env={"DLPERF_LOCK_DIR": str(tmp_path)})
    assert proc.returncode == 2
    assert "--knob partial_fc=50: partial_fc has its own flag, --partial-fc" in proc.stderr


@pytest.mark.parallel
@pytest.mark.parametrize("command, base", [("run", RUN), ("infer", INFER)])
@pytest.mark.parametrize("extra, says", [
    (["--profile", "--profile-steps", "0"],
     "--profile-steps: 0 would profile nothing; give 1 or more with --profile"),
    (["--profile-steps", "5"],
     "--profile-steps: 5 does nothing without --profile; add --profile or leave --profile-steps "
     "out"),
])
def test_profile_steps_that_profile_nothing_are_refused(tmp_path, command, base, extra, says):
    refused_alone(tmp_path, command, [*base, *extra], says)
