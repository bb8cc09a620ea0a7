"""Shared helpers: run the real `dlperf` command in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Smallest real cases: seconds per repeat on a 2-core CPU.
TINY_RESNET = ["--framework", "torch", "--model", "resnet50", "--image-size", "32",
               "--batch-size", "2", "--warmup-steps", "2", "--steps", "3"]
TINY_BERT = ["--framework", "torch", "--model", "bert-base", "--seq-len", "16",
             "--batch-size", "2", "--warmup-steps", "2", "--steps", "3"]


def dlperf(*args: str, timeout: float = 900, check: bool = False, cwd: Path | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "dlperf.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **env} if env else None)
    if check and proc.returncode != 0:
        raise AssertionError(f"dlperf {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def load(path: Path) -> Any:
    return json.loads(Path(path).read_text())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "results.db"


# One real sweep per session, shared by the sweep, report and compare tests (issue 3).
from sweep_session import fixture_db  # noqa: E402,F401


def pinned_env(framework: str) -> str:
    """The framework's environment from its pinned set (`make test` installs every one first
    through `make envs`, so this is a no-op there); its interpreter."""
    from dlperf import envs

    done = envs.install(framework, say=lambda line: None)
    assert done.action in ("installed", "up to date"), done
    return envs.interpreter(framework)


def tiny_dataset(root: Path, count: int) -> Path:
    """A `dlperf data make-images` folder of ``count`` 40x30 JPEGs in 4 classes under ``root``."""
    out = root / "images"
    dlperf("data", "make-images", str(out), "--count", str(count), "--size", "40x30",
           "--classes", "4", "--jobs", "1", check=True)
    return out


def files_of(root: Path) -> list[Path]:
    """The JPEGs of a dataset folder, in a stable order."""
    return sorted((root / "train").rglob("*.JPEG"))
