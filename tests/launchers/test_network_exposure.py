"""Multi-process torch: rank results reach rank 0 as JSON (never unpickled from the network),
and the collectives use the interface the user names."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TINY_RESNET
from measured import check_measured

# a two-process job over loopback.
# spans_cores: in `make test`'s framework phase it gets every CPU back (tests/conftest.py)
pytestmark = pytest.mark.spans_cores

SRC = Path(__file__).resolve().parents[2] / "src" / "dlperf"


BANNED = {"gather_object", "broadcast_object_list", "all_gather_object", "scatter_object_list",
          "loads"}


def _names_used(tree: ast.AST) -> set[str]:
    """Every name and attribute the code touches (docstrings may mention what they avoid)."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else ""
            used.add(node.attr if node.attr != "loads" else f"{owner}.loads")
        elif isinstance(node, ast.ImportFrom) and node.module == "pickle":
            used.update(f"pickle.{alias.name}" for alias in node.names)
    return used


@pytest.mark.parallel
def test_no_pickled_objects_cross_the_network():
    for path in sorted((SRC / "backends").rglob("*.py")) + sorted(SRC.glob("*.py")):
        used = _names_used(ast.parse(path.read_text()))
        found = used & (BANNED - {"loads"} | {"pickle.loads"})
        assert not found, f"{path}: {sorted(found)}"


@pytest.mark.parallel
def test_the_scan_sees_a_pickled_gather():
    code = "import pickle\nimport torch.distributed as d\nd.all_gather_object(x, y)\npickle.loads(b)\n"
    assert {"all_gather_object", "pickle.loads"} <= _names_used(ast.parse(code))


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
    check_measured(result)
