"""The one-host check of `dlperf project` (benchmarks/projection_validation.py --one-host) on
real torch runs at tiny shapes: a 2-process case projected from the 1-process one with the
overlap and overhead taken from a 2-process case at another batch size; and `--overlap-from`
at another batch refused where that batch has no 1-device result of its own."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import dlperf

ROOT = Path(__file__).resolve().parent.parent
SWEEP = """\
name: one-host-tiny
defaults: {framework: torch, model: resnet50, device: cpu, image_size: 32, threads: 1,
           warmup_steps: 1, steps: 2, repeats: 2}
matrix:
  devices: [1, 2]
  batch_size: [2, 4]
"""


@pytest.mark.spans_cores
def test_one_host_validation_projects_the_larger_batch_from_the_smaller(tmp_path):
    db = tmp_path / "oh.db"
    (tmp_path / "s.yaml").write_text(SWEEP)
    dlperf("sweep", str(tmp_path / "s.yaml"), "--db", str(db), check=True)
    md = tmp_path / "v.md"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "projection_validation.py"),
                           "--db", str(db), "--one-host", "--sweep", "one-host-tiny",
                           "--markdown", str(md)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in md.read_text().splitlines() if line.startswith("| torch ")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "one host"
    assert float(cells[3]) > 0  # measured
    assert cells[7].startswith("its probe at batch 2")  # no collective model stored: the probe
    assert cells[9].endswith("%")  # the overhead, measured from the batch-2 pair
    assert "1 cases: median |error|" in proc.stdout

    # the 2-process batch-4 run as the overlap's source of a batch-2 start is fine (batch 4 has
    # its own 1-process run); with that 1-process run gone it is refused in one line
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT id, case_json FROM runs").fetchall()
    con.close()
    ids = {(json.loads(case)["devices"], json.loads(case)["batch_size"]): str(i)
           for i, case in rows}
    one_b2, two_b4, one_b4 = ids[1, 2], ids[2, 4], ids[1, 4]
    ok = dlperf("project", one_b2, "--db", str(db), "--devices-per-node", "2", "--intra",
                "10gbit", "--overlap-from", two_b4, "--no-store")
    assert ok.returncode == 0, ok.stderr
    with sqlite3.connect(db) as con:  # the batch-4 1-process run gone
        con.execute("DELETE FROM runs WHERE id = ?", (int(one_b4),))
    con.close()
    refused = dlperf("project", one_b2, "--db", str(db), "--devices-per-node", "2", "--intra",
                     "10gbit", "--overlap-from", two_b4, "--no-store")
    assert refused.returncode == 2
    assert refused.stderr.startswith("dlperf project: error: --overlap-from:")
    assert "no 1-device result of its own configuration" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
