"""What environment a worker ran in, so that two results from "the same" environment can be
told apart: the framework's version, git revision and build as the framework states them (its
backend's ``build_info``), and a hash of every installed package and version the interpreter can
import.

The package set is read from the ``*.dist-info`` / ``*.egg-info`` entries on ``sys.path`` (the
standard library only, as on Python 3.7): no pip, nothing written. Which malloc replacement is
mapped into the process (``/proc/self/maps``) is read alike: what a case's ``allocator``
preloaded, seen from inside the worker.
"""

import hashlib
import os
import re
import sys

MAX_BUILD_CHARS = 4000  # a build description is kept whole up to here (torch's is ~1.5 kB)
# the shared libraries of the malloc replacements a case may preload (dlperf.host.allocators)
_ALLOCATOR_LIBRARY = re.compile(r"/lib(jemalloc|tcmalloc|tcmalloc_minimal)\.so(\.[0-9.]+)?$")
_META = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[0-9][^-]*?)(-py[0-9.]+)?"
                   r"\.(dist|egg)-info$")

try:
    from typing import Any, Callable, Dict, List, Optional, Set
except ImportError:  # pragma: no cover
    pass


def _normal(name):
    # type: (str) -> str
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def installed_packages(paths=None):
    # type: (Any) -> List[str]
    """``name==version`` of every distribution on ``paths`` (default ``sys.path``), sorted; the
    first one found of a name wins, as for an import."""
    seen = {}  # type: Dict[str, str]
    for entry in paths if paths is not None else sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            continue
        for item in names:
            match = _META.match(item)
            if match:
                seen.setdefault(_normal(match.group("name")), match.group("version"))
    return sorted("{}=={}".format(name, version) for name, version in seen.items())


def package_set_hash(packages):
    # type: (List[str]) -> str
    return hashlib.sha256("\n".join(packages).encode()).hexdigest()[:16]


def mapped_allocators(maps="/proc/self/maps"):
    # type: (str) -> List[str]
    """The paths of jemalloc's and tcmalloc's libraries mapped into this process, sorted; empty
    where none is (the system's malloc) or the maps cannot be read."""
    found = set()  # type: Set[str]
    try:
        with open(maps) as handle:
            for line in handle:
                path = line.rstrip("\n").split(None, 5)[5:]
                if path and _ALLOCATOR_LIBRARY.search(path[0].strip()):
                    found.add(path[0].strip())
    except (IOError, OSError):
        return []
    return sorted(found)


def describe(build_info):
    # type: (Optional[Callable[[], Any]]) -> Dict[str, Any]
    """The environment identity this worker reports: the backend's ``build_info()`` (version,
    git revision, build text; None where it has none), failures kept as text, and the package
    set's hash."""
    packages = installed_packages()
    out = {"packages_hash": package_set_hash(packages), "packages": len(packages),
           "python": sys.executable, "python_version": "%d.%d.%d" % sys.version_info[:3],
           "framework_version": None, "git": None, "build": None,
           "allocators": mapped_allocators()}  # type: Dict[str, Any]
    if build_info is None:
        return out
    try:
        found = build_info() or {}
    except Exception as error:  # a framework that cannot say: the result stands without it
        out["build"] = "build_info failed: {}: {}".format(type(error).__name__, error)[:300]
        return out
    out["framework_version"] = found.get("version")
    out["git"] = found.get("git")
    build = found.get("build")
    if build is not None:
        out["build"] = str(build)[:MAX_BUILD_CHARS]
    return out
