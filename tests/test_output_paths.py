"""Output paths are checked when a command starts: a result must never be measured and then lost
to a `--json` or `-o` that cannot be written. Each refusal is one line naming the flag, exit 2,
with nothing measured (no database, the stand-in never ran) and no stray temporary file."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from conftest import dlperf, dlperf_main, own_lock

LOCK = own_lock("test_output_paths")
RUN = ["run", "--framework", "torch", "--model", "resnet50", "--batch-size", "2", "--steps", "3",
       "--repeats", "1"]
SCRIPT = str(Path(__file__).resolve().parent / "data" / "fake_train.py")
SWEEP = "defaults: {framework: torch, batch_size: 2, steps: 3, repeats: 1}\n" \
        "matrix:\n  model: [resnet50]\n"


def refused(args: list[str], says: str, cwd: Path, run=dlperf_main) -> None:
    """Refused when the command starts: through dlperf's main in this process, or, where
    ``run`` is ``dlperf``, as a real process (test_fuzz_cli checks both answer alike)."""
    proc = run(*args, timeout=120, env=LOCK, cwd=cwd)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert says in lines[0], lines[0]


def external(tmp_path: Path, *flags: str) -> list[str]:
    """An external case whose command leaves a marker file if it ever runs."""
    marker = tmp_path / "ran"
    return ["external", "--name", "x", "--metric", r"imgs_per_sec : ([\d.]+)", "--repeats", "1",
            "--db", str(tmp_path / "m.db"), *flags, "--", sys.executable, "-c",
            f"open({str(marker)!r}, 'w').close()"]


@pytest.mark.parallel
@pytest.mark.parametrize("target,says", [
    ("missing/x.json", "--json: directory missing does not exist"),
    (".", "--json: . is a directory"),
])
def test_measuring_commands_check_json_first(target, says, tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP)
    for args in ([*RUN, "--db", "m.db", "--json", target],
                 ["infer", "--framework", "torch", "--model", "resnet50", "--batch-sizes", "1",
                  "--db", "m.db", "--json", target],
                 external(tmp_path, "--json", target),
                 ["accuracy", "--model", "resnet50", "--json", target],
                 ["sweep", "s.yaml", "--db", "m.db", "--json", target],
                 ["ab", "--pairs", "2", "--json", target, "--", *RUN[:-2], "--", *RUN[:-2]]):
        # the missing directory as real processes, the directory through dlperf's main
        refused(args, says, tmp_path, run=dlperf if target.startswith("missing") else dlperf_main)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # no db, no marker


@pytest.mark.parallel
def test_external_cwd_must_exist(tmp_path):
    refused(external(tmp_path, "--cwd", str(tmp_path / "missing")),
            f"--cwd: {tmp_path / 'missing'} is not a directory", tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("outputs") / "r.db"
    dlperf("external", "--name", "fake", "--metric", r"imgs_per_sec : ([\d.]+)", "--repeats", "1",
           "--db", str(db), "--", sys.executable, SCRIPT, timeout=120, check=True, env=LOCK)
    return db


def test_report_to_a_directory_or_missing_directory(stored, tmp_path):
    db = tmp_path / "r.db"
    shutil.copy(stored, db)
    refused(["report", "--db", str(db), "-o", str(tmp_path)], f"-o: {tmp_path} is a directory",
            tmp_path, run=dlperf)
    refused(["report", "--db", str(db), "-o", "gone/r.md"], "-o: directory gone does not exist",
            tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.db"]  # no r.md.tmp, no stray file
    proc = dlperf_main("report", "--db", str(db), "-o", str(tmp_path / "r.md"), timeout=300)
    assert proc.returncode == 0 and (tmp_path / "r.md").read_text().startswith("# dlperf")
    assert not (tmp_path / "r.md.tmp").exists()


def test_compare_json_to_a_missing_directory(stored, tmp_path):
    refused(["compare", str(stored), str(stored), "--json", "/missing/dir/x.json"],
            "--json: directory /missing/dir does not exist", tmp_path)
    refused(["compare", str(stored), str(stored), "--json", str(tmp_path)],
            "is a directory", tmp_path)
    assert list(tmp_path.iterdir()) == []
