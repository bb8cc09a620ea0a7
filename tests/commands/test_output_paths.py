"""Output paths are checked when a command starts: a result must never be measured and then lost
to a `--json` or `-o` that cannot be written. Each refusal is one line naming the flag, exit 2,
with nothing measured (no database, the stand-in never ran) and no stray temporary file."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import dlperf, dlperf_main, own_lock

LOCK = own_lock("test_output_paths")
RUN = ["run", "--framework", "torch", "--model", "resnet50", "--batch-size", "2", "--steps", "3",
       "--repeats", "1"]
SCRIPT = str(Path(__file__).resolve().parents[1] / "fixtures" / "fake_train.py")
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


def test_a_device_fifo_or_link_is_written_through_never_replaced(stored, tmp_path):
    """`-o` naming a character device, a FIFO or a link writes through it: each keeps its type
    (as root, a rename over /dev/null would make it a regular file), a link's target gets the
    report, and no temporary is left."""
    db = tmp_path / "r.db"
    shutil.copy(stored, db)
    out = tmp_path / "out"
    out.mkdir()
    # a null device of our own where this user may make one; else /dev/null itself, which a
    # user who cannot make one cannot replace either
    device: Path | None = out / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        device = Path("/dev/null") if os.geteuid() != 0 else None
    (out / "to-null").symlink_to("/dev/null")
    (out / "real.md").write_text("old\n")
    (out / "link.md").symlink_to("real.md")
    os.mkfifo(out / "pipe")
    reader = subprocess.Popen(["cat", str(out / "pipe")], stdout=subprocess.PIPE)
    try:
        for target in [device, out / "to-null", out / "link.md", out / "pipe"]:
            if target is None:
                continue
            proc = dlperf_main("report", "--db", str(db), "--format", "md", "-o", str(target),
                               timeout=120)
            assert proc.returncode == 0, (target, proc.stderr)
        if device is not None:
            assert stat.S_ISCHR(os.lstat(device).st_mode)
        assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
        assert (out / "to-null").is_symlink() and (out / "link.md").is_symlink()
        assert stat.S_ISREG(os.lstat(out / "real.md").st_mode)
        assert (out / "real.md").read_text().startswith("# dlperf")
        assert stat.S_ISFIFO(os.lstat(out / "pipe").st_mode)
        piped, _ = reader.communicate(timeout=60)
    finally:
        reader.kill()
        reader.wait()
    assert piped.decode().startswith("# dlperf")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["link.md", "pipe", "real.md", "to-null"] + (["null"] if device == out / "null" else []))


def test_compare_json_to_a_missing_directory(stored, tmp_path):
    refused(["compare", str(stored), str(stored), "--json", "/missing/dir/x.json"],
            "--json: directory /missing/dir does not exist", tmp_path)
    refused(["compare", str(stored), str(stored), "--json", str(tmp_path)],
            "is a directory", tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parallel
def test_a_link_planted_at_the_temporary_name_is_never_followed(tmp_path):
    """The temporary beside the output is made exclusively: a link someone placed at the old
    fixed name (``out.json.tmp``) is neither written through nor replaced; the output keeps the
    permissions it had."""
    from dlperf import outputs

    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "out.json"
    out.write_text("{}")
    out.chmod(0o640)
    (tmp_path / "out.json.tmp").symlink_to(victim)
    outputs.write_text("--json", out, "[1]")
    assert out.read_text() == "[1]" and victim.read_text() == "keep"
    assert (tmp_path / "out.json.tmp").is_symlink()
    assert oct(out.stat().st_mode & 0o777) == oct(0o640)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.json.tmp", "victim"]
