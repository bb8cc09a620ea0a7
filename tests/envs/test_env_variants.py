"""GPU variants of the framework environments, on a machine without a GPU, and installs off
this machine.

Every package of every cuda lock, and of dlperf's own lock, must exist in the package index with
the very file hash the lock pins (checked against the index's simple pages: metadata only,
nothing is downloaded; torch's +cpu build against PyTorch's CPU index, which `make setup
TORCH_INDEX_URL=...` names): those tests read the index at run time and skip with one line when it
cannot be reached (tests/package_index.py). Asking for a cuda build where no NVIDIA driver is
loaded is one line and exit 2; results and `envs list` say which build ran.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import conftest
import package_index
import pytest
from package_index import needs_pypi

from dlperf.envs import lock, manage, registry

SIMPLE_INDEX = package_index.PYPI + "{name}/"
ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r'href="[^"]*/([^/"#]+)#sha256=([0-9a-f]{64})"')
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s]+) --hash=sha256:([0-9a-f]{64})$")
NO_DRIVER = not manage.driver_present()

# nothing here starts a worker or measures: index look-ups, refusals and listings, on the
# parallel phase's workers
pytestmark = pytest.mark.parallel


def dlperf(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # wide enough that rich does not fold the table cells the tests read
    return conftest.dlperf(*args, timeout=timeout, env={"COLUMNS": "250"})


def cuda_sets() -> list[registry.Framework]:
    return [fw for (name, variant), fw in sorted(registry.load_all().items())
            if variant == "cuda" and fw.refused is None]


def locked_sets() -> list[registry.Framework]:
    """Every set installed into an environment of its own: the cpu builds (the main frameworks
    live in dlperf's own environment, installed from pyproject) and every cuda build."""
    return [fw for (name, variant), fw in sorted(registry.load_all().items())
            if fw.refused is None and (variant == "cuda" or not fw.main)]


def test_every_framework_declares_a_cuda_variant():
    """A user with GPUs can compare every framework, or is told why one has no GPU build."""
    for name in registry.names():
        fw = registry.get(name, "cuda")
        assert fw.refused or (fw.requirements_file and fw.requirements_file.is_file()), name


@functools.lru_cache(maxsize=None)
def index_page(url: str) -> str | None:
    """A simple index page (None where the index has no such project), fetched once per test
    session: the locked sets share many packages (numpy, protobuf, the nvidia wheels)."""
    for attempt in range(3):
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                return response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            if attempt == 2:
                raise
        except urllib.error.URLError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def published_sha256(name: str, version: str, index: str = SIMPLE_INDEX) -> set[str]:
    """The sha256 of every file the index publishes for ``name`` ``version``, read from its
    simple index page (PEP 503: each link ends in #sha256=...)."""
    page = index_page(index.format(name=re.sub(r"[-_.]+", "-", name).lower()))
    if page is None:
        return set()
    stem = re.sub(r"[-_.]+", "_", name).lower()
    out = set()
    for filename, digest in LINK.findall(page):
        # PyTorch's index quotes the local version's "+" in its links (torch-2.13.0%2Bcpu-...)
        normal = re.sub(r"[-_.]+", "_", urllib.parse.unquote(filename)).lower()
        if normal.startswith(f"{stem}_{re.sub(r'[-_.]+', '_', version).lower()}_") or \
                normal.startswith(f"{stem}_{re.sub(r'[-_.]+', '_', version).lower()}_tar"):
            out.add(digest)
    return out


@needs_pypi
@pytest.mark.parametrize("fw", locked_sets(), ids=lambda fw: fw.env_name)
def test_lock_pins_exist_in_the_index_with_their_hashes(fw):
    lines = fw.requirement_lines()
    pins = [PIN.match(line) for line in lines if not line.startswith("--")]
    assert pins and all(pins), [line for line, m in zip(lines, pins) if not m]
    names = {m.group(1) for m in pins}
    assert fw.source_file is not None and fw.source_file.is_file()
    with ThreadPoolExecutor(max_workers=16) as pool:
        found = list(pool.map(lambda m: published_sha256(m.group(1), m.group(2)), pins))
    missing = [f"{m.group(1)}=={m.group(2)}" for m, digests in zip(pins, found)
               if m.group(3) not in digests]
    assert not missing, f"{fw.requirements}: not in the index with the pinned hash: {missing}"
    # the top-level requirement is among the locked packages
    top = [line.split("==")[0].split("[")[0].strip().lower() for line in
           fw.source_file.read_text().splitlines() if "==" in line and not line.startswith("#")]
    normal = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731 - PEP 503
    assert top and {normal(n) for n in top} <= {normal(n) for n in names}


@pytest.mark.skipif(not NO_DRIVER, reason="this machine has an NVIDIA driver")
@pytest.mark.parametrize("name", ["tensorflow", "jax", "paddle", "torch"])
def test_cuda_variant_without_a_driver_is_one_line_exit_2(name):
    # refused before anything is installed: the first as a real process, the rest through
    # dlperf's main in this process (test_fuzz_cli checks both answer alike)
    run = dlperf if name == "tensorflow" else conftest.dlperf_main
    proc = run("envs", "install", name, "--variant", "cuda")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("dlperf envs: error: --variant: cuda needs an NVIDIA driver"), lines[0]


@pytest.mark.skipif(not NO_DRIVER, reason="this machine has an NVIDIA driver")
def test_default_variant_here_is_cpu_and_listed():
    assert manage.default_variant() == "cpu"
    assert all(manage.select(name).variant == "cpu" for name in registry.names())
    proc = dlperf("envs", "list")
    assert proc.returncode == 0, proc.stderr
    assert "variant" in proc.stdout
    torch_row = next(line for line in proc.stdout.splitlines() if line.split("│")[1:2]
                     and line.split("│")[1].strip() == "torch")
    assert torch_row.split("│")[2].strip() == "cpu"  # the +cpu wheel: no CUDA libraries


def test_support_matrix_is_printed_from_the_declarations():
    proc = dlperf("envs", "list", "--support")
    assert proc.returncode == 0, proc.stderr
    rows: list[list[str]] = []
    for line in proc.stdout.splitlines():
        if line.count("│") < 9:
            continue
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells[0]:
            rows.append(cells)
        elif rows:  # a folded cell continues on the next line
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
    by_key = {(r[0], r[2]): r for r in rows}
    assert by_key[("jax", "cpu")][5] == "no eager mode / jax.jit (XLA), whole step, state donated on a GPU"
    assert by_key[("tensorflow", "cpu")][5].startswith("tf.function graph / XLA")
    assert by_key[("torch", "cuda")][6] == "yes"
    assert "tf32" not in by_key[("paddle", "cpu")][3]
    # a framework's models and dataset loader, on its first row (compared without spaces: a
    # narrow terminal folds a cell anywhere)
    def bare(text: str) -> str:
        return text.replace(" ", "")
    assert bare(by_key[("jax", "cpu")][1]) == "resnet50,bert-base,gpt,wide-deep"
    assert bare(by_key[("torch", "cpu")][7]) == "torch.utils.data.DataLoader"
    assert bare(by_key[("mxnet", "cpu")][7]) == "syntheticonly"
    assert by_key[("torch", "cuda")][1] == by_key[("torch", "cuda")][7] == ""


@needs_pypi
def test_lock_lines_from_a_real_resolution(tmp_path: Path):
    """What `dlperf envs lock` writes, from pip's real report of a tiny pure-Python set."""
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "--dry-run",
                           "--ignore-installed", "--quiet", "--report", str(report),
                           "six==1.16.0"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (line,) = lock.lock_lines(json.loads(report.read_text()))
    name, version, digest = PIN.match(line).groups()
    assert (name, version) == ("six", "1.16.0")
    assert digest in published_sha256("six", "1.16.0")


def test_unknown_variant_is_one_line():
    proc = conftest.dlperf_main("envs", "install", "jax", "--variant", "rocm")
    assert proc.returncode == 2
    assert "--variant" in proc.stderr and "Traceback" not in proc.stderr


def test_locked_sets_install_only_wheels_except_the_declared_sdists():
    """--require-hashes --only-binary=:all: for every lock; TF 1.15's gast 0.2.2 (no wheel at
    all) is the one package built from its hashed source archive."""
    for fw in locked_sets():
        options = manage.locked_install_options(fw)
        assert options[:2] == ["--require-hashes", "--only-binary=:all:"], fw.env_name
        assert options[2:] == (["--no-binary=gast"] if fw.name == "tensorflow1" else [])
        pinned = {line.split("==")[0] for line in fw.requirement_lines() if "==" in line}
        assert set(fw.sdists) <= pinned, fw.env_name


def own_pins() -> list[re.Match[str]]:
    lines = [line for line in lock.OWN.requirement_lines() if not line.startswith("--")]
    pins = [PIN.match(line) for line in lines]
    assert pins and all(pins), [line for line, m in zip(lines, pins) if not m]
    return [m for m in pins if m is not None]


@needs_pypi
def test_own_lock_installs_from_the_public_index_and_pytorchs():
    """`make setup` off this machine: every pin of dlperf's own lock but PyTorch's local +cpu
    builds is on the public index with its pinned hash (those are checked below)."""
    public = [m for m in own_pins() if "+" not in m.group(2)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        found = list(pool.map(lambda m: published_sha256(m.group(1), m.group(2)), public))
    missing = [f"{m.group(1)}=={m.group(2)}" for m, digests in zip(public, found)
               if m.group(3) not in digests]
    assert not missing, f"dlperf.txt: not in the index with the pinned hash: {missing}"


def test_own_lock_cpu_builds_are_on_pytorchs_cpu_index():
    """The lock's torch==X+cpu is the very file PyTorch's CPU index serves (the index
    TORCH_INDEX_URL names), so `make setup` with only that index and the public one installs it."""
    local = [m for m in own_pins() if "+" in m.group(2)]
    assert [m.group(1) for m in local] == ["torch"], [m.group(0) for m in local]
    package_index.reachable_or_skip(package_index.TORCH_CPU)
    for m in local:
        digests = published_sha256(m.group(1), m.group(2), package_index.TORCH_CPU + "{name}/")
        assert m.group(3) in digests, f"{m.group(0)}: not on {package_index.TORCH_CPU}"


def make_n_setup(*variables: str) -> list[str]:
    """The lock's pip line `make setup` would run (the lock made newer than the stamp)."""
    lock_path = registry.REQUIREMENTS_DIR.joinpath("dlperf.txt").relative_to(ROOT).as_posix()
    done = subprocess.run(["make", "--no-print-directory", "-n", "-C", str(ROOT), "-W", lock_path,
                           *variables, "setup"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = done.stdout.replace("\\\n", " ")
    return [line for line in text.splitlines() if f"-r {lock_path}" in line]


def test_make_setup_names_pytorchs_index_only_when_asked():
    """Unset, pip's own configuration decides (no index option: a machine with a mirror never
    waits on an index it cannot reach); TORCH_INDEX_URL adds exactly one --extra-index-url."""
    (plain,) = make_n_setup()
    assert "index-url" not in plain, plain
    url = "https://download.pytorch.org/whl/cpu"
    (named,) = make_n_setup(f"TORCH_INDEX_URL={url}")
    assert named.split().count("--extra-index-url") == 1, named
    assert f"--extra-index-url {url} " in named and "--require-hashes" in named, named


def test_an_unreachable_index_is_one_line_quickly():
    """The probe the registry tests skip on: a closed port answers at once, in one line."""
    reason = package_index.probe("http://127.0.0.1:9/simple/", timeout_s=2)
    assert reason is not None and "\n" not in reason, reason
    assert reason.startswith("http://127.0.0.1:9/simple/ cannot be reached within 2 s ("), reason
