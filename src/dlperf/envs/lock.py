"""``dlperf envs lock NAME``: regenerate a variant's complete, hashed lock file.

A lock (``requirements/<set>.txt``) is generated from the hand-edited top-level requirements
beside it (``<set>.in``): pip resolves them for the interpreter version the registry names
(``pip install --dry-run --report``: metadata only where the index serves it, nothing installed),
and every package of the resolution is written as ``name==version --hash=sha256:...``, so an
install with ``--require-hashes`` gets exactly the files that were locked. Index options in the
``.in`` (``--extra-index-url`` of a framework's own wheel index, ``--find-links``) are carried into
the lock.

``dlperf envs lock dlperf`` locks dlperf's own environment (``.venv``, built by ``make setup``,
where the torch and onnxruntime backends run) the same way, from ``requirements/dlperf.in``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from dlperf.envs import interpreters, registry
from dlperf.envs.registry import Framework
from dlperf.errors import UsageError

RESOLVE_TIMEOUT_S = 1800.0
# pip >= 22.2 writes --report; the 3.7 that TF 1.15 needs ships an older one, so resolve from a
# throwaway venv with pip upgraded (24.0 is the last pip for 3.7).
PIP_FOR_REPORT = "pip>=22.2"


# dlperf's own environment: no framework of the registry (nothing to install with `dlperf envs`),
# locked for the Python the Makefile builds .venv with (PYTHON ?= python3.11).
OWN = Framework(name="dlperf", import_name="dlperf", main=True, python="3.11",
                requirements="dlperf.txt")


class LockError(Exception):
    """pip could not resolve the set; the message carries pip's last lines, ``output`` all it
    said (what :mod:`dlperf.envs.versions` reads the available versions from)."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


def index_options(source: Path) -> list[str]:
    """``--index-url`` / ``--extra-index-url`` / ``--find-links`` lines of a ``.in`` file."""
    return [line.strip() for line in source.read_text().splitlines()
            if line.strip().startswith(("--index-url", "--extra-index-url", "--find-links"))]


def lock_lines(report: dict) -> list[str]:
    """One ``name==version --hash=sha256:...`` line per package of a pip install report."""
    lines = []
    for item in report.get("install", []):
        meta = item["metadata"]
        info = item.get("download_info") or {}
        digest = ((info.get("archive_info") or {}).get("hashes") or {}).get("sha256")
        if not digest:
            raise LockError(f"{meta['name']} {meta['version']} resolved to {info.get('url')}, "
                            f"which has no sha256 to pin")
        name = re.sub(r"[-_.]+", "-", meta["name"]).lower()  # PEP 503's normal form
        lines.append(f"{name}=={meta['version']} --hash=sha256:{digest}")
    return sorted(lines)


def resolve(fw: Framework, say: Callable[[str], None] = print) -> list[str]:
    """Resolve ``fw``'s ``.in`` with the Python version its environment uses."""
    source = fw.source_file
    if source is None or not source.is_file():
        raise UsageError(f"framework {fw.name} ({fw.variant}): no {source.name if source else '.in'}"
                         f" file to lock from in {registry.REQUIREMENTS_DIR}")
    return resolve_source(source, fw.python, f"{fw.name} ({fw.variant})", say)


def resolve_source(source: Path, python: str | None, label: str,
                   say: Callable[[str], None] = print, options: Sequence[str] = (),
                   interpreter: tuple[str, str] | None = None) -> list[str]:
    """Resolve the requirements file ``source`` for Python ``python`` (major.minor; None: the
    one dlperf runs on) into hashed lock lines; ``options`` go to pip's resolving command.
    ``interpreter`` (path, full version) resolves with that one instead of one found."""
    base, full = interpreter or interpreters.find(python or "%d.%d" % sys.version_info[:2])
    with tempfile.TemporaryDirectory(prefix="dlperf-lock-") as tmp:
        venv, report = Path(tmp) / "venv", Path(tmp) / "report.json"
        pip = str(venv / "bin" / "python")
        steps = [[base, "-m", "venv", str(venv)],
                 [pip, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                  PIP_FOR_REPORT],
                 # --isolated: the public index only, never this machine's local mirrors, so
                 # the lock names files anyone can fetch and their published hashes
                 [pip, "-m", "pip", "install", "--isolated", "--dry-run",
                  "--ignore-installed", "--quiet", "--disable-pip-version-check",
                  "--report", str(report), *options, "-r", str(source)]]
        say(f"{label}: resolving {source.name} for Python {full}")
        for argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                said = done.stderr or done.stdout
                tail = "\n".join(said.strip().splitlines()[-5:])
                raise LockError(f"{label}: {' '.join(argv[2:5])} failed:\n{tail}", said)
        return lock_lines(json.loads(report.read_text()))


def write_lock(fw: Framework, say: Callable[[str], None] = print) -> Path:
    """Resolve and write ``fw``'s lock file; return its path."""
    lines = resolve(fw, say)
    target = fw.requirements_file
    assert target is not None and fw.source_file is not None
    flag = "" if fw.variant == "cpu" else f" --variant {fw.variant}"
    header = [f"# {fw.name} ({fw.variant}) for Python {fw.python or 'of dlperf'}: generated by "
              f"`dlperf envs lock {fw.name}{flag}` from {fw.source_file.name}; do not edit.",
              "# Installed with pip --require-hashes: exactly these files, nothing else."]
    text = "\n".join(header + index_options(fw.source_file) + lines) + "\n"
    tmp = target.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(target)
    say(f"{fw.name} ({fw.variant}): {len(lines)} packages locked in {target}")
    return target


def lock(name: str, variant: str = "cpu", say: Callable[[str], None] = print) -> Path:
    if name == OWN.name:
        if variant != "cpu":
            raise UsageError(f"--variant: dlperf's own environment is locked for the cpu build "
                             f"only (the GPU builds go in with `dlperf envs install torch "
                             f"--variant cuda`), not {variant}")
        return write_lock(OWN, say)
    fw = registry.get(name, variant)
    if fw.refused:
        raise UsageError(f"--variant: {name} has no {variant} build: {fw.refused}")
    return write_lock(fw, say)
