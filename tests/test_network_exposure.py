"""Multi-process torch: rank results reach rank 0 as JSON (never unpickled from the network),
and the collectives use the interface the user names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import TINY_RESNET

SRC = Path(__file__).resolve().parent.parent / "src" / "dlperf"


def test_no_pickled_objects_cross_the_network():
    for path in sorted((SRC / "backends").rglob("*.py")) + sorted(SRC.glob("*.py")):
        text = path.read_text()
        for banned in ("gather_object", "broadcast_object_list", "all_gather_object",
                       "scatter_object_list", "pickle.loads"):
            assert banned not in text, f"{path}: {banned}"


def test_two_processes_on_loopback_gather_every_rank(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "dlperf.cli", "run", *TINY_RESNET,
                           "--devices", "2", "--repeats", "1", "--socket-ifname", "lo",
                           "--db", str(tmp_path / "r.db"), "--json", str(out)],
                          capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["status"] == "ok"
    assert result["launch"]["socket_ifname"] == "lo"
    assert sorted(r["rank"] for r in result["ranks"]) == [0, 1]
    assert all(len(r["throughput"]) == 1 and r["throughput"][0] > 0 for r in result["ranks"])
