"""Which environment each framework's worker runs in, read from ``frameworks.yaml``.

The registry is data so that a new framework's environment is a YAML entry plus a pinned
requirement file, with no code change. Each framework has a ``cpu`` variant (the entry itself)
and may have others under ``variants:`` (``cuda``: the GPU build), each with its own pinned set,
interpreter and environment directory, or a ``refused:`` reason where no such build exists.
An optional ``env:`` mapping names variables the worker needs (e.g. ``LD_LIBRARY_PATH`` to the
CUDA libraries a wheel loads from other wheels); its values may name ``{site_packages}``, the
environment's own site-packages directory, and are expanded at launch. An optional
``versions:`` says how another release of the framework is resolved into an environment of its
own (``dlperf envs install NAME --version X``, :mod:`dlperf.envs.versions`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from dlperf.errors import UsageError

HERE = Path(__file__).resolve().parent
REGISTRY_FILE = HERE / "frameworks.yaml"
REQUIREMENTS_DIR = HERE / "requirements"
VARIANTS = ("cpu", "cuda")
ENV_FIELDS = ("site_packages",)  # what an ``env:`` value may name


@dataclass(frozen=True)
class Versions:
    """An entry's ``versions:``: which packages carry the framework's version (installed at
    exactly the requested one), which companions pip chooses to fit it, and the oldest version
    the backend can drive with the reason; or ``refused`` with why no other version is offered."""

    packages: tuple[str, ...] = ()
    companions: tuple[str, ...] = ()
    oldest: str | None = None
    oldest_reason: str = ""
    refused: str | None = None


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
    env: tuple[tuple[str, str], ...] = ()  # (variable, value template) the worker needs
    sdists: tuple[str, ...] = ()  # packages of the lock that publish no wheel for its Python
    horovod: tuple[str, ...] = ()  # HOROVOD_WITH_* bindings Horovod builds for it (``horovod:``)
    horovod_refused: str | None = None  # why Horovod is not built for it
    horovod_cxx: str | None = None  # C++ standard its binding's headers need (``cxx: c++17``)
    versions: Versions | None = None  # ``versions:``; None = none declared
    version: str | None = None  # set for a version environment (``FW==X``), not the pinned one

    def environment(self, site_packages: str | Path, current: Mapping[str, str]
                    ) -> dict[str, str]:
        """The ``env:`` variables for one environment: ``{site_packages}`` filled in, each value
        in front of the variable's ``current`` one (as a search path is extended), so the
        libraries the registry names are found first and nothing already set is lost."""
        out = {}
        for name, template in self.env:
            value = template.format(site_packages=str(site_packages))
            out[name] = value + os.pathsep + current[name] if current.get(name) else value
        return out

    @property
    def env_name(self) -> str:
        """Directory name of this variant's environment (the cpu one keeps the bare name; a
        version environment is ``FW==X``)."""
        if self.version is not None:
            return f"{self.name}=={self.version}"
        return self.name if self.variant == "cpu" else f"{self.name}-{self.variant}"

    @property
    def source_file(self) -> Path | None:
        """The hand-edited top-level requirements (``.in``) a lock file is generated from."""
        path = self.requirements_file
        return path.with_suffix(".in") if path is not None else None

    @property
    def requirements_file(self) -> Path | None:
        """The lock under requirements/, or an absolute path as it is (a version environment's
        lock, kept beside the environment)."""
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

    def pinned(self) -> dict[str, str]:
        """Package name -> exact version, read from the lock's ``name==version --hash=...`` lines."""
        pins = {}
        for line in self.requirement_lines():
            requirement = line.split()[0]
            if "==" in requirement and not requirement.startswith("-"):
                name, version = requirement.split("==", 1)
                pins[name.lower()] = version
        return pins

    def requirements_hash(self, python_version: str) -> str:
        """Identity of an environment's contents: the pins and the interpreter's major.minor."""
        text = "\n".join([f"python {python_version}"] + self.requirement_lines())
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _env(name: str, mapping: object) -> tuple[tuple[str, str], ...]:
    """An entry's ``env:`` as (variable, template) pairs; UsageError on a malformed one."""
    if mapping is None:
        return ()
    if not isinstance(mapping, dict):
        raise UsageError(f"{REGISTRY_FILE}: {name}: env: must be a mapping of variable: value")
    out = []
    for key, value in mapping.items():
        if not isinstance(value, str):
            raise UsageError(f"{REGISTRY_FILE}: {name}: env: {key}: the value must be a string")
        fields = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
        unknown = sorted(fields - set(ENV_FIELDS))
        if unknown:
            raise UsageError(f"{REGISTRY_FILE}: {name}: env: {key}: unknown field "
                             f"{{{unknown[0]}}}; allowed: "
                             + ", ".join("{%s}" % f for f in ENV_FIELDS))
        out.append((str(key), value))
    return tuple(out)


def _names(name: str, value: object) -> tuple[str, ...]:
    """A list of package names (``sdists:``)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UsageError(f"{REGISTRY_FILE}: {name}: sdists: must be a list of package names")
    return tuple(value)


VERSIONS_FIELDS = {"packages", "companions", "oldest", "why"}


def _versions(name: str, value: object) -> Versions | None:
    """An entry's ``versions:``: ``{packages: [...], companions: [...], oldest: X, why: reason}``
    or ``{refused: reason}``; absent = None (no version environments declared)."""
    if value is None:
        return None
    where = f"{REGISTRY_FILE}: {name}: versions:"
    if not isinstance(value, dict):
        raise UsageError(f"{where} must be a mapping")
    if "refused" in value:
        if set(value) != {"refused"} or not isinstance(value["refused"], str):
            raise UsageError(f"{where} refused: takes the reason alone")
        return Versions(refused=" ".join(value["refused"].split()))
    unknown = sorted(set(value) - VERSIONS_FIELDS)
    if unknown or "packages" not in value:
        raise UsageError(f"{where} needs packages: (and may have companions:, oldest:, why:); "
                         f"not {unknown[0] if unknown else 'without packages:'}")
    packages, companions = value["packages"], value.get("companions") or []
    for field, names in (("packages", packages), ("companions", companions)):
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise UsageError(f"{where} {field}: must be a list of package names")
    if not packages:
        raise UsageError(f"{where} packages: names at least one package")
    oldest = value.get("oldest")
    if oldest is not None and not isinstance(oldest, str):
        raise UsageError(f"{where} oldest: must be a quoted version, like \"0.6.1\"")
    why = value.get("why") or ""
    if oldest is not None and not (isinstance(why, str) and why.strip()):
        raise UsageError(f"{where} oldest: needs why: (what the backend uses that is newer)")
    return Versions(tuple(packages), tuple(companions), oldest, " ".join(str(why).split()))


HOROVOD_BINDINGS = ("HOROVOD_WITH_TENSORFLOW", "HOROVOD_WITH_PYTORCH", "HOROVOD_WITH_MXNET")


def _horovod(name: str, value: object) -> tuple[tuple[str, ...], str | None, str | None]:
    """An entry's ``horovod:``: ``{with: [HOROVOD_WITH_...], cxx: c++17}`` (the bindings to
    build; optionally the C++ standard to compile them with) or ``{refused: reason}``; absent =
    refused, saying the registry declares no build. (bindings, refusal, cxx)"""
    if value is None:
        return (), f"frameworks.yaml declares no Horovod build for {name}", None
    if (not isinstance(value, dict)
            or set(value) not in ({"refused"}, {"with"}, {"with", "cxx"})):
        raise UsageError(f"{REGISTRY_FILE}: {name}: horovod: must be {{with: [...]}} (and "
                         f"cxx: c++NN) or {{refused: reason}}")
    if "refused" in value:
        if not isinstance(value["refused"], str) or not value["refused"].strip():
            raise UsageError(f"{REGISTRY_FILE}: {name}: horovod: refused: needs the reason")
        return (), " ".join(value["refused"].split()), None
    bindings = value["with"]
    if (not isinstance(bindings, list) or not bindings
            or not set(bindings) <= set(HOROVOD_BINDINGS)):
        raise UsageError(f"{REGISTRY_FILE}: {name}: horovod: with: must list some of "
                         f"{', '.join(HOROVOD_BINDINGS)}")
    cxx = value.get("cxx")
    if cxx is not None and not (isinstance(cxx, str) and re.fullmatch(r"c\+\+\d\d", cxx)):
        raise UsageError(f"{REGISTRY_FILE}: {name}: horovod: cxx: must be like c++17")
    return tuple(bindings), None, cxx


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
            horovod, horovod_refused, horovod_cxx = _horovod(name, entry.get("horovod"))
            out[(name, variant)] = Framework(
                name=name,
                import_name=entry.get("import", name),
                main=bool(entry.get("main", False)),
                python=str(python) if python is not None else None,
                requirements=over.get("requirements", entry.get("requirements")),
                variant=variant,
                refused=over.get("refused"),
                variants=declared,
                env=_env(name, over.get("env", entry.get("env"))),
                sdists=_names(name, over.get("sdists", entry.get("sdists"))),
                horovod=horovod,
                horovod_refused=horovod_refused,
                horovod_cxx=horovod_cxx,
                versions=_versions(name, entry.get("versions")),
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
