"""`envs install` builds a new environment beside the old one and swaps it in only when it
works: a rebuild that fails leaves the working environment as it was. Real venvs, real pip."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dlperf.envs import manage, registry


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A registry with one framework, 'toy' (import six), whose pins live in tmp_path."""
    requirements = tmp_path / "requirements"
    requirements.mkdir()
    monkeypatch.setenv("DLPERF_ENVS", str(tmp_path / "envs"))
    monkeypatch.setattr(registry, "REQUIREMENTS_DIR", requirements)
    entry = registry.Framework(name="toy", import_name="six", requirements="toy.txt")
    monkeypatch.setattr(registry, "load_all", lambda: {("toy", "cpu"): entry})
    return requirements / "toy.txt"


def six_version(python: str) -> str:
    return subprocess.run([python, "-c", "import six; print(six.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_failed_rebuild_keeps_the_working_environment(toy):
    toy.write_text("six==1.16.0\n")
    done = manage.install("toy", say=lambda line: None)
    assert done.action == "installed" and done.version == "1.16.0"
    python = manage.interpreter("toy")
    stamp = (manage.env_dir("toy") / manage.STAMP_NAME).read_text()

    toy.write_text("six==0.0.999\n")  # a pin that cannot install
    with pytest.raises(manage.InstallError, match="pip install failed"):
        manage.install("toy", say=lambda line: None)
    assert six_version(python) == "1.16.0"
    assert (manage.env_dir("toy") / manage.STAMP_NAME).read_text() == stamp
    assert not (manage.root() / ".toy.new").exists()
    assert manage.status("toy").state == "outdated"  # the pins changed; the env still works

    toy.write_text("six==1.17.0\n")  # a good rebuild swaps in
    assert manage.install("toy", say=lambda line: None).version == "1.17.0"
    assert six_version(manage.interpreter("toy")) == "1.17.0"
    assert sorted(p.name for p in manage.root().iterdir()) == [".toy.lock", "toy"]


# google-pasta 0.2.0 and six as TF 1.15's lock pins them (pure wheels for any Python 3):
# `import pasta` loads pasta.base, never pasta.augment
PASTA = ("google-pasta==0.2.0 "
         "--hash=sha256:b32482794a366b5366a32c92a9a9201b107821889935a02b3e51f6b432ea84ed\n"
         "six==1.17.0 "
         "--hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n")


@pytest.mark.parametrize("python", ["3.7", "3.10"])  # TF 1.15's and OneFlow's interpreters
def test_locked_install_leaves_bytecode_to_the_first_import(tmp_path, monkeypatch, python):
    """pip runs with --no-compile: after a hashed install only what the import check imported
    has bytecode (cached even under PYTHONDONTWRITEBYTECODE=1, which would otherwise make every
    worker compile the framework again); a module first imported later gets its .pyc then."""
    requirements = tmp_path / "requirements"
    requirements.mkdir()
    (requirements / "toy.txt").write_text(PASTA)
    monkeypatch.setenv("DLPERF_ENVS", str(tmp_path / "envs"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(registry, "REQUIREMENTS_DIR", requirements)
    entry = registry.Framework(name="toy", import_name="pasta", python=python,
                               requirements="toy.txt")
    monkeypatch.setattr(registry, "load_all", lambda: {("toy", "cpu"): entry})

    done = manage.install("toy", say=lambda line: None)
    assert done.action == "installed" and done.python.startswith(python + ".")
    log = (manage.env_dir("toy") / manage.LOG_NAME).read_text()
    pip_line = next(line for line in log.splitlines() if " -m pip install " in line)
    assert "--no-compile" in pip_line.split() and "--require-hashes" in pip_line.split()
    assert manage.status("toy").state == "installed"  # the stamp reads as before
    assert manage.import_version(manage.interpreter("toy"), entry)[0]  # what envs check runs

    package = manage.site_packages(manage.interpreter("toy")) / "pasta"
    sources = {p.relative_to(package) for p in package.rglob("*.py")}

    def compiled() -> set:
        return {(p.parent.parent / (p.name.split(".")[0] + ".py")).relative_to(package)
                for p in package.rglob("__pycache__/*.pyc")}

    assert len(sources) > 20 and compiled() <= sources
    # the import check's modules, and nothing else: pip compiled none of the 20-odd files
    assert {Path("__init__.py"), Path("base/annotate.py")} <= compiled()
    assert Path("augment/rename.py") not in compiled()
    assert len(compiled()) < len(sources) // 2
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([manage.interpreter("toy"), "-c", "import pasta.augment.rename"], check=True,
                   env=env)
    assert Path("augment/rename.py") in compiled()  # compiled on first import, in the env
