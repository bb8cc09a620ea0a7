"""Version environments: another release of a framework beside its pinned one.

``dlperf envs install jax --version 0.9.2`` makes the environment ``jax==0.9.2`` under the cache
root. The registry's ``versions:`` names the packages that carry the version (installed at
exactly 0.9.2: ``jax``, ``jaxlib``) and the companions pip chooses to fit them (the newest Flax,
Optax, numpy... that accept that jax). pip resolves them as ``dlperf envs lock`` does for the
pinned sets (``--dry-run --report``, the public index, wheels only), and the resolution is written
as a hashed lock beside the environment (``<root>/jax==0.9.2.requirements.txt``): the install is
``--require-hashes --only-binary=:all:`` from that file, a rebuild (``--force``, or after the
environment was deleted) installs the same files again, and ``dlperf envs remove jax==0.9.2``
drops both, so that the next install resolves afresh.

Refused with one line, before anything is installed: a framework that declares no versions (or
refuses them: torch lives in dlperf's own environment), a version older than the backend can
drive (``oldest:``, with the reason), a version the index does not have, one without a wheel for
this Python and platform, a set pip cannot resolve; each names the nearest versions that exist
or install here.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlperf.envs import interpreters, lock, manage, registry
from dlperf.envs.registry import Framework, Versions
from dlperf.errors import UsageError

SEPARATOR = "=="
# a version environment's name, the one pattern (dlperf.spec and .selection import it): it
# becomes a folder name, so fullmatch only (`$` lets a final newline through) and no "/"
ENV_NAME = re.compile(r"([a-z0-9_]+)==([0-9][0-9A-Za-z.+!-]*)")
LOCK_SUFFIX = ".requirements.txt"
# PEP 440 releases as published: 0.9.2, 0.9.0.1, 2.15.0.post1, 2.16.0rc0
RELEASE = re.compile(r"(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?")
# pip's public index (lock.py resolves with --isolated: the same one), its PEP 691 JSON pages
INDEX = "https://pypi.org/simple/"
INDEX_TIMEOUT_S = 30.0
LOCK_HEADER = re.compile(r"^# \S+ \S+ for Python (\d+\.\d+):")
PRE_ORDER = {"a": 0, "b": 1, "rc": 2}


def release_key(version: str) -> tuple[Any, ...] | None:
    """A sort key for a published version (releases after their pre-releases, post-releases
    after both), or None for text that is not one."""
    match = RELEASE.fullmatch(version)
    if not match:
        return None
    release, pre, pre_n, post, dev = match.groups()
    numbers = [int(n) for n in release.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:  # 2.16 == 2.16.0
        numbers.pop()
    return (tuple(numbers), (PRE_ORDER[pre], int(pre_n)) if pre else (3, 0),
            int(post) if post else -1, -int(dev) if dev else 0)


def is_prerelease(version: str) -> bool:
    match = RELEASE.fullmatch(version)
    return bool(match and (match.group(2) or match.group(5)))


def nearest(version: str, candidates: list[str], oldest: str | None = None) -> list[str]:
    """The closest candidates below and above ``version`` (at least ``oldest``; pre-releases
    only when one is asked for)."""
    wanted = release_key(version)
    assert wanted is not None
    floor = release_key(oldest) if oldest else None
    keyed = sorted((key, v) for v in set(candidates)
                   if (key := release_key(v)) is not None and key != wanted
                   and (floor is None or key >= floor)
                   and (is_prerelease(version) or not is_prerelease(v)))
    below = [v for key, v in keyed if key < wanted][-1:]
    above = [v for key, v in keyed if key > wanted][:1]
    return below + above


def _nearest_text(found: list[str]) -> str:
    return "nearest: " + ", ".join(found) if found else "none that the backend can drive"


def env_name(framework: str, version: str) -> str:
    return f"{framework}{SEPARATOR}{version}"


def lock_file(env: str) -> Path:
    """A version environment's hashed lock: beside it under the cache root, not in the source
    tree (it is this machine's resolution, made when the environment was first installed)."""
    return manage.root() / f"{manage.checked_name(env)}{LOCK_SUFFIX}"


def policy(name: str, variant: str | None = None) -> Versions:
    """``name``'s ``versions:``; one line (UsageError) where version environments are not
    offered."""
    fw = registry.get(name)
    declared = fw.versions
    if declared is not None and declared.refused:
        raise UsageError(f"--version: {name}: {declared.refused}")
    if declared is None:
        why = ("it lives in dlperf's own environment" if fw.main else
               "frameworks.yaml declares no versions: for it (its backend is tested at the "
               "pinned version)")
        raise UsageError(f"--version: {name} runs only at its pinned version: {why}; "
                         f"another build of it runs with `dlperf run --framework {name} "
                         f"--python PATH`")
    if variant not in (None, "cpu"):
        raise UsageError(f"--version: version environments are CPU builds; {name}'s {variant} "
                         f"build is its pinned one (`dlperf envs install {name} --variant "
                         f"{variant}`)")
    return declared


def framework(name: str, version: str, variant: str | None = None) -> Framework:
    """The registry entry of environment ``name==version``, its requirements the lock beside
    it; every refusal that needs no network made here."""
    if release_key(version) is None:
        raise UsageError(f"--version: {version!r} is not a release number like 0.9.2")
    declared = policy(name, variant)
    if declared.oldest and release_key(version) < release_key(declared.oldest):  # type: ignore
        raise UsageError(f"--version: {name} {version} is older than the backend can drive "
                         f"(oldest {declared.oldest}): {declared.oldest_reason}")
    base = registry.get(name)
    return dataclasses.replace(base, version=version,
                               requirements=str(lock_file(env_name(name, version))))


def published(package: str) -> list[str] | None:
    """Every version of ``package`` the public index lists (any platform), or None when the
    index cannot be reached (pip then says what it can)."""
    request = urllib.request.Request(INDEX + package + "/", headers={
        "Accept": "application/vnd.pypi.simple.v1+json", "User-Agent": "dlperf"})
    try:
        with urllib.request.urlopen(request, timeout=INDEX_TIMEOUT_S) as answer:
            return [str(v) for v in json.load(answer).get("versions", [])]
    except urllib.error.HTTPError as error:
        return [] if error.code == 404 else None
    except (OSError, ValueError):
        return None


def check_published(name: str, version: str, declared: Versions) -> None:
    """Refuse a version the index does not have, naming the nearest it has."""
    for package in declared.packages:
        versions = published(package)
        if versions is None:
            return
        key = release_key(version)
        if not any(release_key(v) == key for v in versions):
            raise UsageError(f"--version: {package} {version} does not exist on {INDEX}; "
                             f"{_nearest_text(nearest(version, versions, declared.oldest))}")


# pip: "Ignored the following versions that require a different python version: 0.11.0
# Requires-Python >=3.12; ..." then "Could not find a version that satisfies the requirement
# jax==0.12.0 (from versions: 0.4.16, ...)": the list is what installs for this interpreter
NO_MATCH = re.compile(r"Could not find a version that satisfies the requirement (\S+) "
                      r"\(from versions: ([^)]*)\)")


def refusal(name: str, version: str, python: str, declared: Versions, output: str) -> str | None:
    """One line for a resolution pip refused (no wheel for this Python, conflicting companions),
    or None when it failed for another reason (the network: not the user's input)."""
    where = f"Python {python} on {sysconfig.get_platform()}"
    missing = NO_MATCH.search(output)
    if missing:
        requirement, listed = missing.groups()
        package = re.split(r"[=<>!~\[;]", requirement, 1)[0]
        available = [v.strip() for v in listed.split(",") if v.strip() and v.strip() != "none"]
        if package in declared.packages:
            near = nearest(version, available, declared.oldest)
            needs = re.search(r"(?:^|; |: )%s Requires-Python ([^;\s]+)" % re.escape(version),
                              output)
            why = (f"requires Python {needs.group(1)} (this is {python})" if needs else
                   f"has no wheel for {where}")
            return (f"--version: {package} {version} {why}; nearest that install here: "
                    f"{', '.join(near) or 'none'}")
        return (f"--version: {name} {version}: its companion {requirement} has no wheel for "
                f"{where}")
    if "ResolutionImpossible" in output or "conflicting dependencies" in output:
        lines = output.splitlines()
        cause = [x.strip() for x in lines[next((i + 1 for i, x in enumerate(lines)
                                                if "conflict is caused by" in x), 0):]
                 if x.strip()][:3]
        return (f"--version: {name} {version} and its companions cannot be resolved for {where}"
                + (": " + "; ".join(cause) if cause else ""))
    return None


def resolve(fw: Framework, declared: Versions, interpreter: tuple[str, str],
            say: Callable[[str], None]) -> list[str]:
    """Hashed lock lines of the framework's packages at ``fw.version`` and their companions,
    resolved by pip for ``interpreter`` from the public index, wheels only."""
    assert fw.version is not None
    wanted = [f"{p}=={fw.version}" for p in declared.packages] + list(declared.companions)
    with tempfile.TemporaryDirectory(prefix="dlperf-version-") as tmp:
        source = Path(tmp) / f"{fw.env_name}.in"
        source.write_text("\n".join(wanted) + "\n")
        try:
            return lock.resolve_source(source, None, fw.env_name, say,
                                       options=["--only-binary=:all:"], interpreter=interpreter)
        except lock.LockError as error:
            line = refusal(fw.name, fw.version, interpreters.short(interpreter[1]), declared,
                           error.output)
            if line is not None:
                raise UsageError(line) from None
            raise manage.InstallError(str(error)) from None


def read_lock(env: str, python: str) -> list[str] | None:
    """The kept lock's lines when it was resolved for Python ``python`` (major.minor), else
    None (no lock yet, or one for another interpreter: resolved again)."""
    try:
        text = lock_file(env).read_text()
    except OSError:
        return None
    header = LOCK_HEADER.match(text)
    if not header or header.group(1) != python:
        return None
    return [x for x in text.splitlines() if x.strip() and not x.startswith("#")]


def write_lock(fw: Framework, declared: Versions, python: str, lines: list[str]) -> Path:
    target = lock_file(fw.env_name)
    header = [f"# {fw.name} {fw.version} for Python {python}: resolved by `dlperf envs install "
              f"{fw.name} --version {fw.version}` on {time.strftime('%Y-%m-%d')} from "
              f"{', '.join(p + '==' + str(fw.version) for p in declared.packages)}"
              + (f" with {', '.join(declared.companions)}" if declared.companions else "") + ".",
              "# Installed with pip --require-hashes: exactly these files. `dlperf envs remove "
              f"{fw.env_name}` drops it with the environment."]
    tmp = target.with_name(target.name + ".tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text("\n".join(header + lines) + "\n")
    tmp.replace(target)
    return target


def install(name: str, version: str, python: str | None = None, force: bool = False,
            verbose: bool = False, say: Callable[[str], None] = print,
            variant: str | None = None) -> manage.InstallResult:
    """Create environment ``name==version`` from its kept lock (resolved first when there is
    none); a no-op when it is installed from that lock."""
    fw = framework(name, version, variant)
    declared = policy(name, variant)
    start = time.monotonic()
    env = fw.env_name
    with manage._locked(env):
        base, full = manage.base_interpreter(fw, python)
        if read_lock(env, interpreters.short(full)) is None:
            check_published(name, version, declared)
            lines = resolve(fw, declared, (base, full), say)
            kept = write_lock(fw, declared, interpreters.short(full), lines)
            say(f"{env}: {len(lines)} packages locked in {kept}")
        digest = fw.requirements_hash(interpreters.short(full))
        current = manage.up_to_date(fw, env, digest, base if python else None, force, start)
        if current is not None:
            return current

        def facts(new_python: str, log: Path) -> dict[str, Any]:
            return {"env": env, "requested_version": version, "lock": str(lock_file(env))}

        done = manage.build(manage.Build(fw, env, base, full, digest, [manage.framework_step(fw)],
                                         check=facts), verbose, say, start)
    return done


@dataclass
class VersionEnv:
    """One version environment as ``dlperf envs list`` shows it."""

    name: str  # jax==0.9.2
    framework: str
    state: str  # "installed" | "lock changed" | "incomplete"
    path: str
    python: str | None
    version: str | None  # what the framework reports
    lock_hash: str | None  # the stamp's hash of the lock (and the Python's major.minor)
    note: str = ""


def installed(framework_name: str | None = None) -> list[VersionEnv]:
    """Every version environment under the cache root (of one framework when named)."""
    root = manage.root()
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.iterdir()):
        match = ENV_NAME.fullmatch(path.name)
        if not path.is_dir() or not match or match.group(1) not in registry.load():
            continue
        if framework_name is not None and match.group(1) != framework_name:
            continue
        stamp = manage.read_stamp(path.name)
        if stamp is None or not manage.env_python(path.name).exists():
            out.append(VersionEnv(path.name, match.group(1), "incomplete", str(path), None, None,
                                  None, "no stamp: an interrupted install; install it again"))
            continue
        fw = dataclasses.replace(registry.get(match.group(1)), version=match.group(2),
                                 requirements=str(lock_file(path.name)))
        python = interpreters.short(stamp.get("python", "0.0"))
        state, note = "installed", ""
        if not lock_file(path.name).exists():
            state, note = "lock changed", f"{lock_file(path.name).name} is missing"
        elif stamp.get("hash") != fw.requirements_hash(python):
            state, note = "lock changed", f"{lock_file(path.name).name} changed since the install"
        out.append(VersionEnv(path.name, match.group(1), state, str(path), stamp.get("python"),
                              stamp.get("framework_version"), stamp.get("hash"), note))
    return out


def remove(env: str, say: Callable[[str], None] = print) -> None:
    """Delete version environment ``env``, its lock and its install log."""
    match = ENV_NAME.fullmatch(env)
    if not match:
        raise UsageError(f"envs remove: {env!r} is not a version environment (FRAMEWORK==VERSION, "
                         f"as `dlperf envs list` names them); pinned environments stay")
    target, kept = manage.env_dir(env), lock_file(env)
    if not target.exists() and not kept.exists():
        names = [v.name for v in installed()]
        raise UsageError(f"envs remove: no environment {env}; there are: "
                         f"{', '.join(names) or 'none'}")
    with manage._locked(env):
        shutil.rmtree(target, ignore_errors=True)
        for leftover in (kept, manage.root() / f"{env}.{manage.LOG_NAME}"):
            leftover.unlink(missing_ok=True)
    say(f"{env}: removed {target} and {kept.name}")
