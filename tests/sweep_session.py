"""One real sweep per test session, shared by the sweep, report and compare tests.

``fixture_db`` holds two sweeps measured by real workers:

* ``fixture`` (run with the real ``dlperf sweep`` command): a tiny BERT at fp32 and amp-bf16,
  batch 2 with 2 repeats (a spread, two repeats to compare) and batch 4 with one (the
  batch-size plot and the best amp-bf16 cell need only a median: each repeat is a fresh worker
  that imports torch); one repeat of fp32 batch 2 on 2 devices (torchrun: the costliest
  repeat, and its speedup needs only a median); tf32 on the CPU (``unsupported``: a failure is a
  result and the sweep goes on); and one repeat of a ResNet-50 at image 32.
* ``oom-halve`` (the sweep library with a launcher that caps the worker's address space at
  3 GiB, so the kernel's allocator really refuses): a BERT with a 100k vocabulary at batch 32
  runs out of memory and ``on_oom: halve`` measures it at 16. It runs while the ``dlperf sweep``
  process runs (the library takes no measurement lock; the store's SQLite file takes both
  writers): its two workers overlap that sweep's instead of adding ~8 s after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# A BERT-Base with tiny knobs: the same code path, seconds per repeat.
TINY_BERT_KNOBS = """\
  seq_len: 8
  vocab_size: 1000
  hidden: 64
  layers: 1
  heads: 2
  intermediate: 128
"""

FIXTURE_SWEEP = f"""\
name: fixture
defaults:
  framework: torch
  device: cpu
  warmup_steps: 2
  steps: 3
  repeats: 2
  image_size: 32
{TINY_BERT_KNOBS}matrix:
  model: [bert-base]
  precision: [fp32, amp-bf16]
  batch_size: [2]
include:
  - {{model: bert-base, precision: fp32, batch_size: 4, repeats: 1}}
  - {{model: bert-base, precision: amp-bf16, batch_size: 4, repeats: 1}}
  - {{model: bert-base, precision: fp32, batch_size: 2, devices: 2, repeats: 1}}
  - {{model: bert-base, precision: tf32, batch_size: 2}}
  - {{model: resnet50, precision: fp32, batch_size: 2, repeats: 1}}
"""

OOM_SWEEP = """\
name: oom-halve
defaults:
  framework: torch
  device: cpu
  warmup_steps: 1
  steps: 2
  repeats: 1
  seq_len: 64
  vocab_size: 100000
  hidden: 32
  layers: 1
  heads: 2
  intermediate: 64
matrix:
  model: [bert-base]
  batch_size: [32]
on_oom: halve
"""

ADDRESS_SPACE_LIMIT = 3 * 2**30
LIMITED_WORKER = (
    "import resource, runpy, sys; limit = {limit}; "
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); "
    "sys.argv = ['dlperf.worker'] + sys.argv[1:]; "
    "runpy.run_module('dlperf.worker', run_name='__main__', alter_sys=True)"
)


def limited_launcher_for(limit: int) -> Any:
    """A launcher of the real worker under an address-space limit of ``limit`` bytes: large
    batches really run out."""

    def launcher(case: Any, case_file: Path, out_dir: Path) -> Any:
        from dlperf.launchers import launch

        argv = launch.worker_argv(sys.executable, case_file, out_dir)
        assert argv[1:3] == ["-m", "dlperf.worker"]
        return launch.Launch([sys.executable, "-c", LIMITED_WORKER.format(limit=limit),
                              *argv[3:]])

    return launcher


limited_launcher = limited_launcher_for(ADDRESS_SPACE_LIMIT)  # the session's 3 GiB


@dataclass
class FixtureDb:
    path: Path
    sweep_file: Path
    sweep_json: list[dict[str, Any]]  # what `dlperf sweep --json` wrote
    sweep_stdout: str
    sweep_stderr: str
    sweep_returncode: int
    oom_results: list[dict[str, Any]]


@pytest.fixture(scope="session")
def fixture_db(tmp_path_factory: pytest.TempPathFactory) -> FixtureDb:
    from dlperf.host import sysinfo
    from dlperf.store import Store
    from dlperf.studies.sweep import load as load_sweep
    from dlperf.studies.sweep_runner import SweepRun

    tmp = tmp_path_factory.mktemp("sweep-session")
    db = tmp / "fixture.db"
    sweep_file = tmp / "fixture.yaml"
    sweep_file.write_text(FIXTURE_SWEEP)
    oom_file = tmp / "oom.yaml"
    oom_file.write_text(OOM_SWEEP)
    # the store (its tables) exists before the sweep process opens it; files, not pipes, take
    # that process's output while nobody reads it
    with Store(db) as store, open(tmp / "sweep.stdout", "w+") as out, \
            open(tmp / "sweep.stderr", "w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "dlperf.cli", "sweep", str(sweep_file),
                                 "--db", str(db), "--json", str(tmp / "sweep.json")],
                                stdout=out, stderr=err, text=True)
        try:
            outcome = SweepRun(load_sweep(oom_file), store, launcher=limited_launcher,
                               env=sysinfo.capture()).run()
            returncode = proc.wait(timeout=1800)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    # exactly 1: the tf32 case is unsupported on a CPU, and every other case must be ok
    assert returncode == 1, stderr
    statuses = {r["label"]: r["status"] for r in json.loads((tmp / "sweep.json").read_text())}
    assert [label for label, status in statuses.items() if status != "ok"] == [
        "torch bert-base train bs2 tf32"], statuses
    assert statuses["torch bert-base train bs2 fp32 1n2d"] == "ok"  # the sweep -> torchrun path
    return FixtureDb(db, sweep_file, json.loads((tmp / "sweep.json").read_text()), stdout, stderr,
                     returncode, outcome.results)
