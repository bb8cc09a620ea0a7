"""Which environment each framework's worker runs in, read from ``frameworks.yaml``.

The registry is data so that a new framework's environment is a YAML entry plus a pinned
requirement file, with no code change. Each framework has a ``cpu`` variant (the entry itself)
and may have others under ``variants:`` (``cuda``: the GPU build), each with its own pinned set,
interpreter and environment directory, or a ``refused:`` reason where no such build exists.
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
VARIANTS = ("cpu", "cuda")


@dataclass(frozen=True)
class Framework:
    """One framework's environment: where its worker's interpreter comes from."""

    name: str
    import_name: str
    main: bool = False  # lives in dlperf's own environment (torch)
    python: str | None = None  # wanted "major.minor"; None = the version dlperf runs on
    requirements: str | None = None  # file name under requirements/
    variant: str = "cpu"
    refused: str | None = None  # why this variant cannot exist (no such build is published)
    variants: tuple[str, ...] = ("cpu",)  # every variant the registry declares for it

    @property
    def env_name(self) -> str:
        """Directory name of this variant's environment (the cpu one keeps the bare name)."""
        return self.name if self.variant == "cpu" else f"{self.name}-{self.variant}"

    @property
    def source_file(self) -> Path | None:
        """The hand-edited top-level requirements (``.in``) a lock file is generated from."""
        path = self.requirements_file
        return path.with_suffix(".in") if path is not None else None

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
def load_all() -> dict[tuple[str, str], Framework]:
    """Every (framework, variant) the registry declares."""
    data = yaml.safe_load(REGISTRY_FILE.read_text()) or {}
    out = {}
    for name, entry in data.items():
        entry = entry or {}
        extra = entry.get("variants") or {}
        unknown = sorted(set(extra) - set(VARIANTS))
        if unknown:
            raise UsageError(f"{REGISTRY_FILE}: {name}: unknown variant {unknown[0]!r}; "
                             f"allowed: {', '.join(VARIANTS)}")
        declared = ("cpu",) + tuple(v for v in VARIANTS if v in extra)
        for variant in declared:
            over = {} if variant == "cpu" else (extra[variant] or {})
            python = over.get("python", entry.get("python"))
            out[(name, variant)] = Framework(
                name=name,
                import_name=entry.get("import", name),
                main=bool(entry.get("main", False)),
                python=str(python) if python is not None else None,
                requirements=over.get("requirements", entry.get("requirements")),
                variant=variant,
                refused=over.get("refused"),
                variants=declared,
            )
    return out


def load() -> dict[str, Framework]:
    """Every framework the registry knows, by name (its cpu variant)."""
    return {name: fw for (name, variant), fw in load_all().items() if variant == "cpu"}


def names() -> list[str]:
    return sorted(load())


def get(name: str, variant: str = "cpu") -> Framework:
    """One framework's variant; UsageError (one line) for an unknown name or variant."""
    if name not in load():
        raise UsageError(f"unknown framework {name!r}; allowed: {', '.join(names())}")
    if variant not in VARIANTS:
        raise UsageError(f"--variant: {variant!r} is not one of {', '.join(VARIANTS)}")
    fw = load_all().get((name, variant))
    if fw is None:
        raise UsageError(f"--variant: framework {name} has no {variant} variant; it has: "
                         f"{', '.join(load()[name].variants)}")
    return fw
