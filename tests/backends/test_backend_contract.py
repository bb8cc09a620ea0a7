"""Every backend's contract (``BACKEND``, :class:`dlperf.backends.contract.Backend`) holds up
without its framework: each ``"module:name"`` entry point exists and defines that name (read
with ``ast``, nothing imported), each ``SUPPORT.reasons`` key names things the support table
knows and can be reached, and every registry that hangs off the backends (launchers,
environments, the Makefile's lists, the fidelity loops, the tests' hand-written framework lists)
agrees with them. Each failure names the framework and the missing piece."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import make_list
from dlperf import spec
from dlperf.backends.contract import Backend
from dlperf.envs import registry as envs_registry
from dlperf.launchers import registry as launchers
from dlperf.worker.support import DEVICE_KINDS, Support

pytestmark = pytest.mark.parallel

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
BACKENDS = spec.frameworks()


def module_file(module: str) -> Path:
    """The source file of a dotted dlperf module (a package's ``__init__.py``)."""
    path = SRC.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def top_level_names(path: Path) -> set[str]:
    """What a module binds at its top level: functions, classes, assignments, imports."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def unresolved(target: str) -> str | None:
    """Why ``"module:name"`` does not resolve in the source tree, or None."""
    module, _, name = target.partition(":")
    path = module_file(module)
    if not path.is_file():
        return f"{target}: no module file {path.relative_to(ROOT)}"
    if name not in top_level_names(path):
        return f"{target}: {path.relative_to(ROOT)} defines no {name}"
    return None


def literal(path: Path, name: str):
    """The value of a top-level ``NAME = <literal>`` of a file, read without importing it."""
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name):
            return node.value
    raise AssertionError(f"{path.relative_to(ROOT)} has no top-level {name}")


def contract(framework: str) -> Backend:
    return spec.contract(framework)


# --------------------------------------------------------------------------------------------
# the contract object itself
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("framework", BACKENDS)
def test_each_package_exports_its_contract(framework):
    backend = contract(framework)
    assert isinstance(backend, Backend), f"dlperf.backends.{framework}.BACKEND is not a Backend"
    assert backend.framework == framework, f"{framework}'s SUPPORT names {backend.framework}"
    assert backend.support is spec.support(framework)


@pytest.mark.parametrize("framework", BACKENDS)
def test_every_entry_point_resolves_without_the_framework(framework):
    backend = contract(framework)
    missing = [f"{role}: {why}" for role, target in backend.targets.items()
               if target is not None and (why := unresolved(target)) is not None]
    if backend.launcher is not None and (why := unresolved(backend.launcher)) is not None:
        missing.append(f"launcher: {why}")
    assert not missing, f"{framework}'s BACKEND names what is not there: " + "; ".join(missing)


@pytest.mark.parametrize("framework", BACKENDS)
def test_the_declared_profiler_is_the_one_the_workload_imports(framework):
    """The contract says where ``--profile``'s profiler lives; the workload's ``profiler()``
    imports it from there (and a backend declaring none imports no profiler module)."""
    target = contract(framework).targets["profiler"]
    imported = set()
    for path in (SRC / "dlperf" / "backends" / framework).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(".profiling"):
                imported.update(f"{node.module}:{a.name}" for a in node.names)
    if target is None:
        assert not imported, f"{framework} declares no profiler but imports {sorted(imported)}"
    else:
        assert target in imported, (f"{framework}'s BACKEND names profiler {target}, which no "
                                    f"module of the backend imports (it imports "
                                    f"{sorted(imported) or 'none'})")


@pytest.mark.parametrize("framework", BACKENDS)
def test_process_place_is_a_light_function_of_the_package(framework):
    place = contract(framework).process_place
    if place is not None:
        assert place.__module__ == f"dlperf.backends.{framework}"
        assert place() == (0, 1, 0)  # one process outside any launcher


def test_data_parallelism_without_a_launcher_is_refused_on_import():
    def declaring(*distributed):
        return Support("fw", ("resnet50",), {"cpu": {"train": ("fp32",)}}, {False: "eager"},
                       distributed=distributed)

    entry = dict(resolve_device="dlperf.backends.fw.workload:resolve_device",
                 build="dlperf.backends.fw.backend:build")
    with pytest.raises(ValueError, match="declares distributed devices .cpu. but names no "
                                         "launcher"):
        Backend(declaring("cpu"), gather_results="dlperf.backends.fw.workload:gather", **entry)
    with pytest.raises(ValueError, match="names no gather_results"):
        Backend(declaring("cpu"), launcher="dlperf.launchers.fw:Launch", **entry)
    with pytest.raises(ValueError, match="names a launcher but declares no distributed"):
        Backend(declaring(), launcher="dlperf.launchers.fw:Launch", **entry)
    with pytest.raises(ValueError, match="fw's build: 'backend.build' is not"):
        Backend(declaring(), resolve_device=entry["resolve_device"], build="backend.build")
    assert Backend(declaring(), **entry).gather_results is None


# --------------------------------------------------------------------------------------------
# the declaration's reasons
# --------------------------------------------------------------------------------------------

FLAGS = {"compile=on": True, "compile=off": False}


def reason_key_problem(support: Support, key: str) -> str | None:
    """Why ``key`` of ``support.reasons`` is not one the support table can use: an unknown
    name, a shape :meth:`Support.refusal` never reads, or a combination the declaration
    allows (a reason that can never be shown). None when it is fine."""
    parts = key.split("/")
    devices, tasks, precisions = DEVICE_KINDS, spec.TASKS, spec.PRECISIONS

    def refused(device: str | None, task: str | None, precision: str) -> bool:
        return any(precision not in support.precisions.get(d, {}).get(t, ())
                   for d in ([device] if device else devices)
                   for t in ([task] if task else support.tasks))

    match parts:
        case [word] if word in tasks:
            return None if word not in support.tasks else f"task {word} is declared"
        case [word] if word in devices:
            return None if word not in support.precisions else f"device {word} is declared"
        case [word] if word in precisions:
            return None if refused(None, None, word) else f"{word} is allowed everywhere"
        case [word] if word in FLAGS:
            return None if any(FLAGS[word] not in support.modes_for(t) for t in support.tasks) \
                else f"{word} is a mode of every task"
        case [device, task, precision] if (device in devices and task in tasks
                                           and precision in precisions):
            return None if refused(device, task, precision) else f"{key} is allowed"
        case [first, precision] if first in devices and precision in precisions:
            return None if refused(first, None, precision) else f"{key} is allowed"
        case [first, precision] if first in tasks and precision in precisions:
            return None if refused(None, first, precision) else f"{key} is allowed"
        case [task, flag] if task in tasks and flag in FLAGS:
            return None if FLAGS[flag] not in support.modes_for(task) else f"{key} is allowed"
        case ["loader", name]:
            return None if name in spec.LOADERS else f"unknown loader {name!r}"
        case ["launcher", name]:
            return None if name in spec.LAUNCHERS else f"unknown launcher {name!r}"
        case ["distributed", device] if device in devices:
            return None if device not in support.distributed else f"{key} is declared"
        # a refusal the backend raises itself once the combination arrives (TF2's XLA on
        # several CPU processes): the same names, one more condition
        case ["distributed", device, flag] if device in devices and flag in FLAGS:
            return None if device in support.distributed and FLAGS[flag] in support.modes \
                else f"{key} names a combination the declaration refuses already"
    return "not a key Support.refusal reads (device, task, precision, compile=on|off, " \
           "loader/NAME, launcher/NAME or distributed/DEVICE, in its order)"


@pytest.mark.parametrize("framework", BACKENDS)
def test_every_reason_key_names_what_the_table_knows(framework):
    support = spec.support(framework)
    bad = {key: why for key in support.reasons
           if (why := reason_key_problem(support, key)) is not None}
    assert not bad, f"{framework}'s SUPPORT.reasons: " + "; ".join(
        f"{key!r}: {why}" for key, why in sorted(bad.items()))


def test_the_reason_check_finds_a_dead_and_an_unknown_key():
    support = Support("fw", ("resnet50",), {"cpu": {"train": ("fp32",), "infer": ("fp32",)}},
                      {False: "eager"})
    assert reason_key_problem(support, "cpu/fp32") == "cpu/fp32 is allowed"
    assert reason_key_problem(support, "gpu/fp32").startswith("not a key")
    assert reason_key_problem(support, "cuda") is None
    assert reason_key_problem(support, "compile=on") is None
    assert reason_key_problem(support, "train/compile=off") == "train/compile=off is allowed"


# --------------------------------------------------------------------------------------------
# the registries that hang off the backends
# --------------------------------------------------------------------------------------------


def test_a_launcher_for_exactly_the_backends_that_run_data_parallel():
    distributed = {fw for fw in BACKENDS if spec.support(fw).distributed}
    assert set(launchers.MULTI_PROCESS) == distributed
    for framework, launcher in launchers.MULTI_PROCESS.items():
        assert contract(framework).launcher == f"{launcher.__module__}:{launcher.__name__}"


def test_an_environment_for_every_backend_and_a_backend_for_every_environment():
    entries = set(envs_registry.names())
    wanted = {contract(fw).environment for fw in BACKENDS}
    assert not wanted - entries, f"no src/dlperf/envs/frameworks.yaml entry for " \
                                 f"{sorted(wanted - entries)}"
    assert not entries - wanted, f"frameworks.yaml entries without a backend package: " \
                                 f"{sorted(entries - wanted)}"


def test_the_makefile_installs_every_environment_of_its_own():
    own = {name for name, fw in envs_registry.load().items() if not fw.main}
    listed = make_list("TEST_ENVS")
    assert set(listed) == own, (f"Makefile TEST_ENVS: missing {sorted(own - set(listed))}, "
                                f"not an environment of its own {sorted(set(listed) - own)}")


def horovod_backends() -> set[str]:
    return {fw for fw in BACKENDS if "horovod" in spec.support(fw).launchers}


def test_horovod_lists_follow_the_declarations():
    wanted = horovod_backends()
    built = {name for name, fw in envs_registry.load().items() if fw.horovod}
    assert wanted == built, f"frameworks.yaml horovod: builds {sorted(built)}, SUPPORT " \
                            f"declares launcher horovod for {sorted(wanted)}"
    lanes = [lane.split(",") for lane in make_list("HOROVOD_ENVS")]
    assert sorted(env for lane in lanes for env in lane) == sorted(wanted), "Makefile HOROVOD_ENVS"
    tested = ast.literal_eval(literal(ROOT / "tests" / "backends" / "test_horovod.py", "FRAMEWORKS"))
    assert set(tested) == wanted, "tests/backends/test_horovod.py FRAMEWORKS"
    for framework in wanted:
        path = SRC / "dlperf" / "backends" / framework / "horovod.py"
        assert path.is_file(), f"{framework} declares launcher horovod without {path.name}"


def test_horovod_builds_compiling_alike_share_a_lane():
    """The builds of one C++ standard (the registry's ``cxx``; the ABI of the framework's own
    build decides the rest) run in one lane of `make horovod-envs`, one after another, so the
    later ones take the first's objects from ccache (MXNet's 68 of 72 from torch's): a lane
    each would build them side by side, and neither would find the other's."""
    lanes = [lane.split(",") for lane in make_list("HOROVOD_ENVS")]
    lane_of = {env: i for i, lane in enumerate(lanes) for env in lane}
    by_standard: dict[str | None, set[int]] = {}
    for env in lane_of:
        by_standard.setdefault(envs_registry.get(env).horovod_cxx, set()).add(lane_of[env])
    assert all(len(found) == 1 for found in by_standard.values()), (
        f"Makefile HOROVOD_ENVS: builds of one standard in several lanes: {by_standard}")
    assert envs_registry.get("mxnet").horovod_cxx == envs_registry.get("torch").horovod_cxx


def test_data_pipeline_lists_follow_the_declarations():
    wanted = {fw for fw in BACKENDS
              if spec.support(fw).data_pipeline and spec.support(fw).distributed}
    tested = ast.literal_eval(literal(ROOT / "tests" / "data" / "test_data_multiprocess.py",
                                      "FRAMEWORKS"))
    assert set(tested) == wanted, "tests/fixtures/test_data_multiprocess.py FRAMEWORKS"


def test_every_launcher_runs_across_two_emulated_hosts():
    tested = {key.value for key in literal(ROOT / "tests" / "launchers" / "test_emulated_frameworks.py",
                                           "FRAMEWORKS").keys}
    hosts = (ROOT / "tests" / "launchers" / "test_emulated_hosts.py").read_text()
    tested |= {fw for fw in BACKENDS if f'"--framework", "{fw}"' in hosts}
    missing = set(launchers.MULTI_PROCESS) - tested
    assert not missing, f"no two-host test (tests/launchers/test_emulated_frameworks.py FRAMEWORKS) " \
                        f"for {sorted(missing)}"
    assert tested <= set(launchers.MULTI_PROCESS)


def fidelity_tables() -> tuple[dict[str, str], dict[str, str], set[tuple[str, str]]]:
    """benchmarks/fidelity.py's same-recipe loops, independent loops (framework -> file under
    benchmarks/) and NO_LOOP keys, read without importing it."""
    path = ROOT / "benchmarks" / "fidelity.py"
    loops = ast.literal_eval(literal(path, "LOOPS"))
    table = literal(path, "INDEPENDENT")
    independent = {k.value: v.args[0].value for k, v in zip(table.keys, table.values)}
    no_loop = {ast.literal_eval(k) for k in literal(path, "NO_LOOP").keys}
    return ({fw: f"handwritten/{name}" for fw, name in loops.items()}, independent, no_loop)


def test_every_training_backend_has_its_fidelity_loops():
    same, independent, no_loop = fidelity_tables()
    trains = {fw for fw in BACKENDS if "train" in spec.support(fw).tasks
              and "resnet50" in spec.support(fw).models}
    problems = []
    for framework in sorted(trains):
        if framework not in same and (framework, "same-recipe") not in no_loop:
            problems.append(f"{framework}: no same-recipe loop (benchmarks/fidelity.py LOOPS) "
                            f"and no NO_LOOP reason")
        if framework not in independent:
            problems.append(f"{framework}: no independent loop (benchmarks/fidelity.py "
                            f"INDEPENDENT)")
    for framework, name in [*same.items(), *independent.items()]:
        if framework not in trains:
            problems.append(f"benchmarks/fidelity.py names {framework}, which no backend trains")
        if not (ROOT / "benchmarks" / name).is_file():
            problems.append(f"{framework}: benchmarks/{name} does not exist")
    assert not problems, "; ".join(problems)
    # tests/studies/test_independent_loops.py checks every script of the folder it finds there
    entered = {name for name in independent.values() if name.startswith("independent/")}
    scripts = {f"independent/{p.name}" for p in (ROOT / "benchmarks" / "independent").glob("*.py")}
    assert scripts == entered, (f"benchmarks/independent/ scripts not in fidelity.py's "
                                f"INDEPENDENT: {sorted(scripts - entered)}")
