"""`envs install` builds a new environment beside the old one and swaps it in only when it
works: a rebuild that fails leaves the working environment as it was. Real venvs, the real
installer."""

from __future__ import annotations

import subprocess

import pytest

from dlperf.envs import manage, registry
from package_index import needs_pypi


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


@needs_pypi  # the installer gets six from the package index, three times
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
