"""Hostile sweep files: YAML tags, control characters, bytes that are not UTF-8, deep nesting,
alias-built matrices of millions of cases and bad knob values are one line `FILE:LINE: ...` with
exit 2, before anything is built or measured. Through dlperf's main in this process
(conftest.dlperf_main: ~1 CPU-s of a fresh interpreter's imports saved per file); test_fuzz_cli
checks that real processes, a sweep among them, answer as it does."""

from __future__ import annotations

import time

import pytest

from conftest import dlperf_main, own_lock
from dlperf.studies import sweep as sweep_mod

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel

LOCK = own_lock("test_sweep_files")
HEAD = b"defaults: {framework: torch, batch_size: 2}\nmatrix:\n"
ALIASED = b"""defaults: {framework: torch, model: resnet50}
matrix:
  batch_size: &v [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  steps: *v
  seed: *v
  repeats: *v
  image_size: *v
  warmup_steps: *v
  num_classes: *v
"""

FILES = [
    ("python tag", HEAD + b"  model: [!!python/name:os.system resnet50]\n", 3,
     "could not determine a constructor for the tag"),
    ("python object", b"name: !!python/object/apply:os.system echo hi\n", 1,
     "name: could not determine a constructor"),
    ("int tag on text", b'defaults: {framework: torch, batch_size: !!int "abc"}\n'
     b"matrix:\n  model: [resnet50]\n", 1, "defaults.batch_size: 'abc' is not a valid"),
    ("float tag on text", HEAD + b'  model: [resnet50]\n  steps: [!!float "x"]\n', 4,
     "matrix.steps: 'x' is not a valid"),
    ("control character", HEAD + b"  model: [res\x07net50]\n", 3,
     "special characters are not allowed #x0007"),
    ("escape character", HEAD + b"  model: [resnet50]\n  # \x1b[31m\n", 4, "#x001b"),
    ("not utf-8", HEAD + b"  model: [r\xff\xfeesnet50]\n", 3, "not UTF-8 text (byte 0xff)"),
    ("deep nesting", b"[" * 5000 + b"]" * 5000, 1, "nested too deeply"),
    ("aliases to 10^7 cases", ALIASED, 2, "matrix: 10,000,000 cases (10 batch_size x 10 steps"),
    ("knob in include", b"defaults: {framework: torch, batch_size: 2, model: bert-base}\n"
     b"include:\n  - seq_len: 16\n  - {seq_len: -4}\n", 4, "seq_len: -4 must be an integer"),
    ("knob in matrix", b"defaults: {framework: torch, batch_size: 2, model: bert-base}\n"
     b"matrix:\n  seq_len:\n    - 16\n    - abc\n", 5, "seq_len: 'abc' must be an integer"),
    ("knob under knobs", b"defaults:\n  framework: torch\n  batch_size: 2\n  model: bert-base\n"
     b"  knobs:\n    layers: 0\nmatrix:\n  seq_len: [16]\n", 6, "layers: 0 must be an integer"),
    ("nan timeout", b"defaults: {framework: torch, batch_size: 2, model: resnet50}\nmatrix:\n"
     b"  seed: [1]\n  timeout: [10, .nan]\n", 4, "timeout_s: nan must be a finite number"),
    ("mapping as a key", HEAD + b"  ? [a]\n  : [1]\n", 3, "field names are text"),
]


@pytest.mark.parametrize("what,content,line,says", FILES, ids=[f[0] for f in FILES])
def test_bad_file_is_one_line_with_its_line(what, content, line, says, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    db = tmp_path / "never.db"
    started = time.monotonic()
    proc = dlperf_main("sweep", str(path), "--db", str(db), timeout=60, env=LOCK)
    assert time.monotonic() - started < 30  # counted, never built
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"dlperf sweep: error: {path}:{line}: "), lines[0]
    assert says in lines[0], lines[0]
    assert not db.exists()


def test_the_limit_is_exact(tmp_path):
    """10 x 10 x 10 x 10 = 10,000 cases passes the count, one more case does not. The first
    case's warmup_steps is bad, so past the count the load stops at that case's own error
    (quickly, building nothing else): that error, not the count's, says 10,000 was allowed."""
    values = "[" + ", ".join(str(i) for i in range(1, 11)) + "]"
    text = ("defaults: {framework: torch, model: resnet50}\nmatrix:\n"
            f"  batch_size: {values}\n  steps: [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\n"
            f"  seed: {values}\n  warmup_steps: [-1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(sweep_mod.SpecError, match="warmup_steps: -1 must be an integer"):
        sweep_mod.load(path)
    path.write_text(text + "include:\n  - {batch_size: 99}\n")
    with pytest.raises(sweep_mod.SpecError, match="10,001 cases"):
        sweep_mod.load(path)
