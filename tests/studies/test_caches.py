"""Cached ONNX exports under a test-private DLPERF_CACHE: the first worker exports, the second
(another process, another batch size: the batch axis is dynamic) reuses, a file changed since it
was cached is exported again (never loaded), and the cache directories are private."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf.host import peak
from dlperf.worker import cache

# a 1-layer BERT: exported in a fraction of ResNet-50's time; the cache does not care what it holds
TINY = ["--framework", "onnxruntime", "--model", "bert-base", "--seq-len", "16", "--knob",
        "layers=1", "--knob", "hidden=32", "--knob", "heads=2", "--knob", "intermediate=64",
        "--knob", "vocab_size=500", "--warmup-steps", "2", "--steps", "3", "--repeats", "1"]


def infer(tmp_path: Path, name: str, batch_sizes: str = "2") -> list[dict]:
    """`dlperf infer` at ``batch_sizes`` (a fresh worker each): each worker's ONNX facts."""
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, "-m", "dlperf.cli", "infer", *TINY, "--batch-sizes",
                           batch_sizes, "--db", str(tmp_path / "r.db"), "--json", str(out)],
                          capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, DLPERF_CACHE=str(tmp_path / "cache")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())
    assert [r["case"]["batch_size"] for r in results] == [
        int(b) for b in batch_sizes.split(",")]
    return [result["env"]["worker"]["framework"]["onnx"] for result in results]


def seed_cache(tmp_path: Path) -> None:
    """The test's DLPERF_CACHE made beforehand as a plain 0755 folder (dlperf must tighten it to
    0700) holding nothing but this machine's matmul-peak probe, copied from the cache dlperf
    uses without DLPERF_CACHE where one is there: into a cache without it `dlperf infer` first
    probes the peaks for MFU (~15 s of matmuls), which is not what this test checks."""
    private = tmp_path / "cache"
    private.mkdir()
    os.chmod(private, 0o755)
    machine = peak.cache_path()
    if machine.is_file():
        (private / machine.name).write_bytes(machine.read_bytes())


def test_export_cached_then_reused_then_remade_when_changed(tmp_path):
    seed_cache(tmp_path)
    # one command, two workers one after the other (a CLI start fewer than two commands)
    first, second = infer(tmp_path, "first", "1,2")
    assert first["cached"] is False
    path = Path(first["path"])
    assert first["sha256"] == cache.file_sha256(str(path))
    for directory in (tmp_path / "cache", path.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700

    assert second["cached"] is True and second["sha256"] == first["sha256"]
    assert second["path"] == first["path"]

    with open(path, "ab") as handle:  # the file changes behind dlperf's back
        handle.write(b"tampered")
    # at the first worker's batch size: the export's example inputs come from the batch timed
    # (a batch of 1 is repeated to 2), and its bytes follow them
    (third,) = infer(tmp_path, "third", "1")
    assert third["cached"] is False
    assert cache.file_sha256(str(path)) == third["sha256"] == first["sha256"]


@pytest.mark.parallel  # measures nothing, starts no framework
def test_verified_facts_by_hand(tmp_path):
    data, meta = tmp_path / "w.bin", tmp_path / "w.bin.json"
    data.write_bytes(b"weights")
    assert cache.verified_facts(str(data), str(meta)) is None  # no record
    meta.write_text(json.dumps({"sha256": cache.file_sha256(str(data)), "epochs": 3}))
    # sha256 of b"weights", computed independently
    import hashlib
    assert cache.verified_facts(str(data), str(meta)) == {
        "sha256": hashlib.sha256(b"weights").hexdigest(), "epochs": 3}
    data.write_bytes(b"weightz")
    assert cache.verified_facts(str(data), str(meta)) is None
    meta.write_text("{not json")
    assert cache.verified_facts(str(data), str(meta)) is None
