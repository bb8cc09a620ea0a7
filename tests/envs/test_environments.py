"""Which environment measures a case (`--env`, `--python`) and the identity every result carries.

A bring-your-own environment is a real venv the test makes (a copy of the pinned mxnet set),
measured through `--python` and then compared byte for byte with what it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import CUT_RESNET50_FLAGS, dlperf, dlperf_main, load, pinned_env, tiny_nets
from dlperf.spec import Case, SpecError, environment_name
from dlperf.worker import identity

# ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): what is checked is which
# environment measures the case and what its result says of it, whatever the network's depth
TINY = [*tiny_nets(1)["resnet50"], *CUT_RESNET50_FLAGS, "--warmup-steps", "1", "--steps", "2",
        "--repeats", "1"]


def tree_digest(root: Path) -> dict[str, str]:
    """Every file and link under ``root``: its content hash (a link: its target) and mode, so
    any write, new file or removal shows."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() + oct(path.stat().st_mode)
        else:
            out[rel] = "dir" + oct(path.stat().st_mode)
    return out


def runs_in(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


@pytest.mark.parallel
def test_env_field_is_checked_and_named():
    base = dict(framework="jax", model="resnet50", batch_size=2)
    assert Case(**base).key() == Case(**base, run_label="v1").key()  # a tag, not the experiment
    assert Case(**base).key() != Case(**base, env="jax==0.9.2").key()
    assert "jax==0.9.2" in Case(**base, env="jax==0.9.2").label()
    assert environment_name("jax", "") == "jax"
    assert environment_name("torch", "/opt/py/bin/python") == "python:/opt/py/bin/python"
    for env, words in (("tensorflow==2.20.0", "an environment of tensorflow, not of jax"),
                       ("venv/bin/python", "absolute path"),
                       ("jax=0.9", "FRAMEWORK==VERSION")):
        with pytest.raises(SpecError, match="^env: ") as caught:
            Case(**base, env=env)
        assert words in str(caught.value)
    with pytest.raises(SpecError, match="^label: "):
        Case(**base, run_label="two\nlines")
    with pytest.raises(SpecError, match="horovod"):
        Case(framework="mxnet", model="resnet50", batch_size=2, launcher="horovod",
             env="mxnet==1.9.0")


@pytest.mark.parallel
def test_package_set_is_read_from_metadata_directories(tmp_path):
    site = tmp_path / "site"
    for entry in ("numpy-1.26.4.dist-info", "Jax_Lib-0.10.2.dist-info",
                  "six-1.16.0-py3.7.egg-info", "notes.txt", "jax"):
        (site / entry).mkdir(parents=True)
    found = identity.installed_packages([str(site), str(tmp_path / "missing")])
    assert found == ["jax-lib==0.10.2", "numpy==1.26.4", "six==1.16.0"]
    assert identity.package_set_hash(found) != identity.package_set_hash(found[:2])


@pytest.mark.parallel
@pytest.mark.parametrize("flags, words", [
    (["--python", "/nonexistent/bin/python"], "--python: /nonexistent/bin/python is not an "
                                              "executable file"),
    (["--env", "jax==0.0.1"], "environment jax==0.0.1 is not installed: run `dlperf envs "
                              "install jax --version 0.0.1`"),
    (["--env", "torch==1.0", "--python", "/usr/bin/python3"], "not allowed with argument"),
])
def test_an_environment_that_cannot_run_is_refused_before_anything_is_stored(tmp_path, flags,
                                                                              words):
    framework = "torch" if "torch==1.0" in flags else "jax"
    db = tmp_path / "r.db"
    proc = dlperf_main("run", "--framework", framework, *TINY, *flags, "--db", str(db))
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr
    assert "Traceback" not in proc.stderr
    assert runs_in(db) == 0


def refused_run(tmp_path: Path, *flags: str, timeout: int = 60) -> str:
    """`dlperf run` of a tiny torch case with ``flags``: its one line of refusal (exit 2,
    nothing stored)."""
    db = tmp_path / "r.db"
    proc = dlperf_main("run", "--framework", "torch", *TINY, *flags, "--db", str(db),
                       timeout=timeout)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and lines[0].startswith("dlperf run: error: "), proc.stderr
    assert runs_in(db) == 0
    return lines[0][len("dlperf run: error: "):]


@pytest.mark.parallel
@pytest.mark.parametrize("flags, words", [
    (["--label", "v1\n"], "label: 'v1\\n' must be 1-100 printable characters"),
    (["--env", "torch==2.0\n"], "--env: 'torch==2.0\\n' is not an environment name"),
])
def test_a_label_or_environment_ending_in_a_newline_is_refused(tmp_path, flags, words):
    """`$` matches before a final newline; neither field takes one."""
    assert refused_run(tmp_path, *flags).startswith(words)


@pytest.mark.parallel
def test_an_env_that_is_a_path_is_refused_pointing_at_python(tmp_path):
    """--env names an environment; an interpreter (here one that runs torch) is --python's."""
    line = refused_run(tmp_path, "--env", os.sys.executable)
    assert line == (f"--env: {os.sys.executable!r} is not an environment name; --env takes a "
                    f"version environment FRAMEWORK==VERSION (`dlperf envs list`); an "
                    f"interpreter of your own is --python PATH")


def fake_python(tmp_path: Path, body: str) -> Path:
    """An executable named python that runs the shell ``body`` whatever it is asked."""
    path = tmp_path / "bin" / "python"
    path.parent.mkdir()
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parallel
def test_a_python_that_floods_its_output_is_stopped_at_1_mib(tmp_path):
    """The --python check reads at most 1 MiB of what the interpreter prints (this one prints
    64 MiB and ends, so that a check without the bound also ends)."""
    python = fake_python(tmp_path, "head -c 67108864 /dev/zero")
    assert refused_run(tmp_path, "--python", str(python)) == \
        f"--python: {python} cannot run the torch worker: importing torch printed more than 1 MiB"


@pytest.mark.parallel
def test_a_python_that_hangs_is_refused_after_the_check_deadline(tmp_path, monkeypatch):
    """The --python check gives up on an import that hangs, with the deadline in its line: 60 s
    (`selection.BYO_CHECK_TIMEOUT_S`, not the 300 s it once was), waited out here as 2 s (the
    same code path: the deadline is read when the check runs), so that the test does not hold
    a core of the suite idle for a minute."""
    from dlperf.envs import selection

    assert selection.BYO_CHECK_TIMEOUT_S == 60.0
    monkeypatch.setattr(selection, "BYO_CHECK_TIMEOUT_S", 2.0)
    python = fake_python(tmp_path, "exec sleep 600")
    assert refused_run(tmp_path, "--python", str(python), timeout=60) == \
        f"--python: {python} cannot run the torch worker: importing torch took over 2 s"


def test_an_interpreter_without_the_framework_is_refused(tmp_path):
    """dlperf's own interpreter has torch, not mxnet: one line, exit 2, nothing stored."""
    db = tmp_path / "r.db"
    proc = dlperf("run", "--framework", "mxnet", *TINY, "--python", str(Path(
        os.sys.executable)), "--db", str(db), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "cannot run the mxnet worker" in proc.stderr and "mxnet" in proc.stderr.splitlines()[-1]
    assert runs_in(db) == 0


def test_bring_your_own_environment_is_measured_recorded_and_left_untouched(tmp_path):
    """A copy of the pinned mxnet venv, run through --python: the result names it, its
    framework version and package set equal the pinned environment's, and not one byte of the
    copy changed."""
    pinned = Path(pinned_env("mxnet")).parent.parent
    own = tmp_path / "my-mxnet"
    shutil.copytree(pinned, own, symlinks=True,
                    ignore=shutil.ignore_patterns("dlperf-env.json", "install.log"))
    before = tree_digest(own)
    python = own / "bin" / "python"
    db = tmp_path / "r.db"
    mine = tmp_path / "mine.json"
    dlperf("run", "--framework", "mxnet", *TINY, "--python", str(python), "--label", "build-7",
           "--db", str(db), "--json", str(mine), check=True, timeout=300)
    theirs = tmp_path / "pinned.json"
    dlperf("run", "--framework", "mxnet", *TINY, "--db", str(db), "--json", str(theirs),
           check=True, timeout=300)
    assert tree_digest(own) == before
    result, reference = load(mine), load(theirs)
    environment = result["environment"]
    assert environment["name"] == f"python:{python}"
    assert environment["byo"] is True and environment["label"] == "build-7"
    assert environment["python"] == str(python)
    assert environment["framework_version"] == reference["environment"]["framework_version"]
    assert environment["packages_hash"] == reference["environment"]["packages_hash"]
    assert reference["environment"]["byo"] is False
    assert reference["environment"]["name"] == "mxnet"
    assert "MKLDNN" in result["env"]["worker"]["identity"]["build"]
    assert result["case_key"] != reference["case_key"]  # another environment, another case
    # read back through dlperf's main in this process (test_fuzz_cli: a real process alike)
    shown = dlperf_main("results", "--db", str(db), check=True).stdout
    assert "build-7" in shown


@pytest.mark.parallel
def test_env_is_a_sweep_matrix_axis():
    from dlperf.studies.sweep import load as load_sweep

    sweep = load_sweep(Path(__file__).resolve().parents[2] / "sweeps" / "versions.yaml")
    pairs = sorted((case.framework, case.env) for case in sweep.cases)
    assert pairs == [("jax", ""), ("jax", "jax==0.9.2"), ("tensorflow", ""),
                     ("tensorflow", "tensorflow==2.20.0")]
    assert len({case.key() for case in sweep.cases}) == 4
