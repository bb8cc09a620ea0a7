"""Which environment each framework's worker runs in, read from ``frameworks.yaml``.

The registry is data so that a new framework's environment is a YAML entry plus a pinned
requirement file, with no code change.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from dlperf.errors import UsageError

HERE = Path(__file__).resolve().parent
REGISTRY_FILE = HERE / "frameworks.yaml"
REQUIREMENTS_DIR = HERE / "requirements"


@dataclass(frozen=True)
class Framework:
    """One framework's environment: where its worker's interpreter comes from."""

    name: str
    import_name: str
    main: bool = False  # lives in dlperf's own environment (torch)
    python: str | None = None  # wanted "major.minor"; None = the version dlperf runs on
    requirements: str | None = None  # file name under requirements/

    @property
    def requirements_file(self) -> Path | None:
        return REQUIREMENTS_DIR / self.requirements if self.requirements else None

    def requirements_text(self) -> str:
        path = self.requirements_file
        if path is None:
            return ""
        try:
            return path.read_text()
        except OSError as error:
            raise UsageError(f"framework {self.name}: requirement file {path} is unreadable: "
                             f"{error.strerror}") from None

    def requirement_lines(self) -> list[str]:
        """The pins without comments and blank lines (what pip gets and what the hash covers)."""
        lines = []
        for raw in self.requirements_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if line:
                lines.append(line)
        return lines

    def requirements_hash(self, python_version: str) -> str:
        """Identity of an environment's contents: the pins and the interpreter's major.minor."""
        text = "\n".join([f"python {python_version}"] + self.requirement_lines())
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def load() -> dict[str, Framework]:
    """Every framework the registry knows, by name."""
    data = yaml.safe_load(REGISTRY_FILE.read_text()) or {}
    out = {}
    for name, entry in data.items():
        entry = entry or {}
        python = entry.get("python")
        out[name] = Framework(
            name=name,
            import_name=entry.get("import", name),
            main=bool(entry.get("main", False)),
            python=str(python) if python is not None else None,
            requirements=entry.get("requirements"),
        )
    return out


def names() -> list[str]:
    return sorted(load())


def get(name: str) -> Framework:
    try:
        return load()[name]
    except KeyError:
        raise UsageError(f"unknown framework {name!r}; allowed: {', '.join(names())}") from None
