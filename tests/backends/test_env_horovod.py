"""Horovod 0.28.1 built from its hashed source archive into `<fw>+horovod` environments.

`make test` builds them beside its first phases (`make horovod-envs`: torch then mxnet, and
tensorflow1, after the plain environments and Debian's cmake, g++, Open MPI and ccache); the
fixture's install is then a no-op, or does the build itself when this file runs alone. The tests run the real `horovodrun` in each
environment: its build report, and a two-process `hvd.allreduce` over Gloo and over MPI.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf import envs
from dlperf.envs import horovod, manage, registry
from dlperf.errors import UsageError
from ceiling import slow_setup
from conftest import dlperf, dlperf_main

BUILT = [name for name in registry.names() if registry.get(name).horovod]
REFUSED = [name for name in registry.names() if registry.get(name).horovod_refused]
TIMEOUT = 600
# Open MPI refuses to start as root unless told it may
AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# one rank's allreduce, per binding: rank r contributes [r + 1] * 3, the average is 1.5; one
# write per line (horovodrun prefixes every write with the rank)
ALLREDUCE = {
    "tensorflow1": """
import sys, tensorflow as tf, horovod.tensorflow as hvd
hvd.init()
value = hvd.allreduce(tf.constant([hvd.rank() + 1.0] * 3), average=True)
with tf.Session() as session:
    line = "RANK %d SIZE %d VALUE %s" % (hvd.rank(), hvd.size(), session.run(value).tolist())
sys.stdout.write(line + "\\n")
sys.stdout.flush()
""",
    "mxnet": """
import sys, mxnet as mx, horovod.mxnet as hvd
hvd.init()
value = hvd.allreduce(mx.nd.array([hvd.rank() + 1.0] * 3), average=True, name="x")
line = "RANK %d SIZE %d VALUE %s" % (hvd.rank(), hvd.size(), value.asnumpy().tolist())
sys.stdout.write(line + "\\n")
sys.stdout.flush()
""",
    "torch": """
import sys, torch, horovod.torch as hvd
hvd.init()
value = hvd.allreduce(torch.tensor([hvd.rank() + 1.0] * 3), op=hvd.Average)
line = "RANK %d SIZE %d VALUE %s" % (hvd.rank(), hvd.size(), value.tolist())
sys.stdout.write(line + "\\n")
sys.stdout.flush()
""",
}


@pytest.mark.parallel
def test_the_registry_says_where_horovod_builds():
    assert BUILT == ["mxnet", "tensorflow1", "torch"]
    assert set(BUILT) | set(REFUSED) == set(registry.names())
    assert "4290" in registry.get("tensorflow").horovod_refused
    for name in BUILT:
        lines = horovod.lock_lines(registry.get(name))
        assert any(line.startswith(f"horovod=={horovod.VERSION} --hash=sha256:")
                   for line in lines), name
        assert all("--hash=sha256:" in line for line in lines), name
        own = {line.split("==")[0]
               for line in horovod.pinned(registry.get(name)).requirement_lines()}
        assert not own & {line.split("==")[0] for line in lines}, f"{name}: pinned twice"


@pytest.fixture(scope="module", params=BUILT)
@slow_setup("compiles Horovod (minutes) where `make horovod-envs` has not built it; a no-op after")
def built(request) -> tuple[str, str]:
    """(framework, interpreter) of a Horovod environment, built from the pinned sets
    (a no-op when `make horovod-envs` built it)."""
    name = request.param
    done = horovod.install(name, say=lambda line: None)
    assert done.action in ("installed", "up to date"), done
    return name, envs.horovod_interpreter(name)


def horovodrun(python: str, *args: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, str(Path(python).parent / "horovodrun"), *args],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          env=envs.worker_env({**AS_ROOT, **(env or {})}),
                          stdin=subprocess.DEVNULL)


def test_the_build_lands(built):
    name, python = built
    assert Path(python).parent.parent.name == name + "+horovod"
    assert envs.interpreter(name) != python  # the plain environment is a different one
    done = horovodrun(python, "--check-build")
    assert done.returncode == 0, done.stderr[-2000:]
    found = horovod.parse_check_build(done.stdout)
    module, binding = horovod.BINDINGS[registry.get(name).horovod[0]]
    assert binding in found["frameworks"]
    # the binding's compiled library (--check-build also marks a package that only imports)
    site = manage.site_packages(python)
    assert list(site.glob(module.replace(".", "/") + "/mpi_lib*.so")), module
    wanted = {"gloo", "mpi"} if horovod.mpi_present() else {"gloo"}
    assert {c.lower() for c in found["controllers"]} == wanted
    assert envs.horovod_controllers(name) == wanted
    st = horovod.status(name)
    assert st.state == "installed" and st.framework == name + "+horovod"
    assert st.version.endswith(f"horovod {horovod.VERSION}") and "gloo" in st.note
    again = horovod.install(name, say=lambda line: None)
    assert again.action == "up to date" and again.seconds < 10


def test_a_cache_built_by_another_checkout_reads_this_one():
    """The environment cache outlives the checkout that built torch+horovod (CI clones main
    afresh beside a kept cache): its .pth must name the site-packages of the dlperf running now,
    or horovodrun cannot import PyYAML and the workers cannot import torch."""
    assert horovod.install("torch", say=lambda line: None).action in ("installed", "up to date")
    python = envs.horovod_interpreter("torch")
    overlay = manage.site_packages(python) / horovod.OVERLAY_NAME
    overlay.write_text("/gone/with/the/checkout/that/built/it/site-packages\n")
    broken = subprocess.run([python, "-c", "import yaml"], capture_output=True, text=True)
    assert broken.returncode != 0 and "yaml" in broken.stderr  # the failure being guarded
    assert envs.horovod_interpreter("torch") == python
    assert overlay.read_text().strip() == str(manage.site_packages(sys.executable))
    # horovodrun imports PyYAML before it reads its arguments, so --version meets the guarded
    # failure as --check-build does (whose exit status says nothing of the bindings either), at
    # 0.25 CPU-s where --check-build takes 6-7 (it imports torch's binding in six forks)
    version = horovodrun(python, "--version")
    assert version.returncode == 0, version.stderr[-2000:]
    assert version.stdout.strip() == horovod.VERSION
    # and a worker's import of torch's binding, torch itself from dlperf's own environment
    binding = subprocess.run([python, "-c", "import horovod.torch"], capture_output=True,
                             text=True)
    assert binding.returncode == 0, binding.stderr[-2000:]
    overlay.write_text("/gone/again/site-packages\n")
    assert horovod.install("torch", say=lambda line: None).action == "up to date"
    assert overlay.read_text().strip() == str(manage.site_packages(sys.executable))


def allreduce(name: str, python: str, tmp_path: Path, controller: str) -> list[str]:
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE[name])
    done = horovodrun(python, "-np", "2", "-H", "localhost:2", f"--{controller}",
                      python, str(script),
                      env={**manage_quiet(), **envs.worker_variables(name, python)})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return sorted(" ".join(found) for found in
                  re.findall(r"RANK (\d+) SIZE (\d+) VALUE (\[[^\]]*\])", done.stdout))


def manage_quiet() -> dict[str, str]:
    return {"TF_CPP_MIN_LOG_LEVEL": "3"}


def test_two_processes_average_over_gloo(built, tmp_path):
    name, python = built
    assert allreduce(name, python, tmp_path, "gloo") == [
        "0 2 [1.5, 1.5, 1.5]", "1 2 [1.5, 1.5, 1.5]"]


@pytest.mark.skipif(not horovod.mpi_present(),
                    reason="Open MPI is not installed (`make horovod` installs it)")
def test_two_processes_average_over_mpi(built, tmp_path):
    name, python = built
    assert allreduce(name, python, tmp_path, "mpi") == [
        "0 2 [1.5, 1.5, 1.5]", "1 2 [1.5, 1.5, 1.5]"]


# refused before anything is installed: the first as a real process, the rest through dlperf's
# main in this process (test_fuzz_cli checks both answer alike)
@pytest.mark.parallel
@pytest.mark.parametrize("name, run", [("tensorflow", dlperf), ("jax", dlperf_main)],
                         ids=["tensorflow", "jax"])
def test_a_refused_framework_is_one_line_and_exit_2(name, run):
    done = run("envs", "install", name, "--horovod", timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlperf envs: error: Horovod is not "
                                                   f"available for {name}: "), done.stderr
    assert registry.get(name).horovod_refused in lines[0]
    with pytest.raises(UsageError, match=f"not available for {name}"):
        envs.horovod_interpreter(name)


@pytest.mark.parallel
def test_the_other_spelling_names_the_flag():
    done = dlperf_main("envs", "install", "tensorflow1+horovod", timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == ("dlperf envs: error: tensorflow1+horovod: ask for Horovod's "
                                   "environment as `dlperf envs install tensorflow1 --horovod`")


@pytest.mark.parallel
def test_a_missing_build_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_ENVS", str(tmp_path))
    with pytest.raises(UsageError, match=r"^Horovod is not installed for mxnet: run "
                                         r"`dlperf envs install mxnet --horovod`$"):
        envs.horovod_interpreter("mxnet")
    assert horovod.status("mxnet").state == "not installed"


@pytest.mark.parallel
@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ here (`make horovod` adds it)")
@pytest.mark.parametrize("standard", [None, "c++17"])
def test_the_compiler_wrapper_has_the_last_word(standard, tmp_path):
    """Horovod's build asks for -std=c++14 and -g (RelWithDebInfo); the wrapper's own options
    come after them: no debug information, and C++17 where the registry says so."""
    source = tmp_path / "probe.cc"
    source.write_text("#include <optional>\nint probe() { std::optional<int> x = 3; "
                      "if constexpr (sizeof(int) == 4) { return *x; } else { return 0; } }\n"
                      if standard else "int probe() { return 3; }\n")
    cxx = horovod._compiler(tmp_path, standard)
    done = subprocess.run([str(cxx), "-std=c++14", "-g", "-O1", "-c", str(source), "-o",
                           str(tmp_path / "probe.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert b".debug_info" not in (tmp_path / "probe.o").read_bytes()
    # the same command without the wrapper does carry it: the check can see debug information
    subprocess.run(["g++", "-g", "-O1", "-c", str(source), "-o", str(tmp_path / "plain.o")],
                   check=True, capture_output=True)
    assert b".debug_info" in (tmp_path / "plain.o").read_bytes()


@pytest.mark.parallel
@pytest.mark.skipif(shutil.which("ccache") is None or shutil.which("g++") is None,
                    reason="no ccache or g++ here (`make horovod` adds them)")
def test_two_builds_compiling_alike_share_their_objects(tmp_path, monkeypatch):
    """As Horovod's CMake compiles (``ccache <CXX> ...``): one source compiled by two builds,
    each unpacked in its own temporary folder with its own new wrapper, compiles once; a
    wrapper with other options (torch's C++17) compiles its own."""
    monkeypatch.setenv("DLPERF_ENVS", str(tmp_path / "envs"))

    def build(name: str, standard: str | None) -> dict[str, int]:
        folder = tmp_path / name  # under the temporary folder, as pip's pip-wheel-* are
        (folder / "src").mkdir(parents=True)
        (folder / "build").mkdir()
        (folder / "src" / "ring.cc").write_text("int ring(int n) { return 2 * (n - 1); }\n")
        env = {**os.environ, **horovod.object_cache(standard)}
        subprocess.run(["ccache", str(horovod._compiler(folder, standard)), "-O2", "-c",
                        str(folder / "src" / "ring.cc"), "-o", "ring.o"], cwd=folder / "build",
                       env=env, check=True, capture_output=True)
        assert (folder / "build" / "ring.o").stat().st_size > 0
        printed = subprocess.run(["ccache", "--print-stats"], env=env, check=True,
                                 capture_output=True, text=True).stdout
        counts = dict(line.split("\t") for line in printed.splitlines() if "\t" in line)
        return {"hits": int(counts["direct_cache_hit"]) + int(counts["preprocessed_cache_hit"]),
                "misses": int(counts["cache_miss"])}

    assert build("pip-wheel-a", None) == {"hits": 0, "misses": 1}
    assert build("pip-wheel-b", None) == {"hits": 1, "misses": 1}
    assert build("pip-wheel-c", "c++17") == {"hits": 1, "misses": 2}
    assert (tmp_path / "envs" / horovod.OBJECT_CACHE).is_dir()


@pytest.mark.parallel
def test_a_missing_compiler_names_the_apt_command(tmp_path, monkeypatch):
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("cmake", "make"):  # g++ is the one missing; stand-ins for the others, which
        (bare / tool).write_text("#!/bin/sh\nexit 1\n")  # `make test-quick` need not have
        (bare / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(bare))
    with pytest.raises(UsageError, match=r"^building Horovod needs g\+\+: run `make horovod` "
                                         r"\(Debian: `apt-get install cmake g\+\+ "):
        horovod.check_toolchain()


@pytest.mark.parallel
def test_a_compiled_wheel_is_keyed_by_everything_its_build_depends_on(tmp_path, monkeypatch):
    """The same inputs give the same key (the wheel is reused); any input changed gives
    another (it is compiled again): the interpreter, the MPI controller, g++ or Open MPI, the
    framework, the compiler wrapper's standard, the framework's pins, the Horovod lock."""
    fw = registry.get("mxnet")
    tools = "g++: 12.2.0\nmpirun: mpirun (Open MPI) 4.1.4"
    key = horovod.wheel_key(fw, "3.11", True, tools)
    assert re.fullmatch(r"[0-9a-f]{16}", key)
    assert horovod.wheel_key(fw, "3.11", True, tools) == key
    changed = [horovod.wheel_key(fw, "3.10", True, tools),
               horovod.wheel_key(fw, "3.11", False, tools),
               horovod.wheel_key(fw, "3.11", True, tools.replace("12.2.0", "13.1.0")),
               horovod.wheel_key(fw, "3.11", True, tools.replace("4.1.4", "5.0.1")),
               horovod.wheel_key(registry.get("tensorflow1"), "3.11", True, tools),
               horovod.wheel_key(dataclasses.replace(fw, horovod_cxx="c++20"), "3.11", True,
                                 tools)]
    copy = tmp_path / "requirements"
    shutil.copytree(registry.REQUIREMENTS_DIR, copy)
    monkeypatch.setattr(registry, "REQUIREMENTS_DIR", copy)
    assert horovod.wheel_key(fw, "3.11", True, tools) == key  # the same files, elsewhere
    for path, pin in ((fw.requirements_file, "mxnet=="), (horovod.lock_file(fw), "cffi==")):
        text = path.read_text()
        line = next(x for x in text.splitlines() if x.startswith(pin))
        path.write_text(text.replace(line, line.replace("==", "==0.0.0.post")))
        changed.append(horovod.wheel_key(fw, "3.11", True, tools))
        path.write_text(text)
    assert len({key, *changed}) == len(changed) + 1, changed
    assert horovod.wheel_key(fw, "3.11", True, tools) == key


@pytest.mark.parallel
def test_a_kept_wheel_is_found_by_its_key_and_replaces_the_earlier_one(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_ENVS", str(tmp_path / "envs"))
    fw = registry.get("torch")
    name = f"horovod-{horovod.VERSION}-cp311-cp311-linux_x86_64.whl"
    assert horovod.cached_wheel(fw, "a" * 16) is None
    built = tmp_path / "build" / name
    built.parent.mkdir()
    built.write_bytes(b"first build")
    first = horovod.keep_wheel(built, fw, "a" * 16)
    assert first == horovod.cached_wheel(fw, "a" * 16) and not built.exists()
    assert first.path.read_bytes() == b"first build"
    assert first.sha256 == hashlib.sha256(b"first build").hexdigest()
    assert first.path.parent.parent == envs.root() / horovod.WHEELS  # beside the environments
    built.write_bytes(b"second build")
    second = horovod.keep_wheel(built, fw, "b" * 16)
    assert horovod.cached_wheel(fw, "b" * 16) == second
    assert horovod.cached_wheel(fw, "a" * 16) is None and not first.path.exists()
    assert [p.name for p in (envs.root() / horovod.WHEELS).iterdir()] == [
        f"torch+horovod-{'b' * 16}"]
    # a record that names a file outside its folder, or a file that is gone, is no wheel
    record = second.path.parent / horovod.WHEEL_RECORD
    record.write_text(record.read_text().replace(name, f"../{name}"))
    assert horovod.cached_wheel(fw, "b" * 16) is None
    record.write_text(record.read_text().replace(f"../{name}", name))
    assert horovod.cached_wheel(fw, "b" * 16) == second
    second.path.unlink()
    assert horovod.cached_wheel(fw, "b" * 16) is None


def test_a_changed_lock_makes_the_build_outdated(built, tmp_path, monkeypatch):
    name, _ = built
    copy = tmp_path / "requirements"
    shutil.copytree(registry.REQUIREMENTS_DIR, copy)
    lock = copy / horovod.lock_file(registry.get(name)).name
    lock.write_text(lock.read_text().replace("horovod==0.28.1", "horovod==0.28.0"))
    monkeypatch.setattr(registry, "REQUIREMENTS_DIR", copy)
    st = horovod.status(name)
    assert st.state == "outdated" and lock.name in st.note


@pytest.mark.parallel
def test_the_check_build_report_is_read():
    text = ("Horovod v0.28.1:\n\nAvailable Frameworks:\n    [X] TensorFlow\n    [ ] PyTorch\n"
            "    [ ] MXNet\n\nAvailable Controllers:\n    [ ] MPI\n    [X] Gloo\n\n"
            "Available Tensor Operations:\n    [ ] NCCL\n    [ ] DDL\n    [ ] CCL\n"
            "    [ ] MPI\n    [X] Gloo\n")
    assert horovod.parse_check_build(text) == {
        "frameworks": ["TensorFlow"], "controllers": ["Gloo"], "tensor_operations": ["Gloo"]}


@pytest.mark.parallel
@pytest.mark.parametrize("entry", [{"with": ["HOROVOD_WITH_JAX"]}, {"with": []},
                                   {"refused": ""}, {"with": ["HOROVOD_WITH_MXNET"], "cxx": "17"},
                                   {"with": ["HOROVOD_WITH_MXNET"], "refused": "why"}])
def test_a_malformed_registry_entry_is_refused(entry):
    with pytest.raises(UsageError, match="toy: horovod:"):
        registry._horovod("toy", entry)
