"""Declared = tested: every (framework, model, task, precision) a backend's ``SUPPORT`` declares
on a CPU is run by some test, and every one declared on cuda by a test in tests/gpu/.

Tests say what they run with ``@covers(...)`` (tests/declared.py), read here from the source
with ``ast``: nothing is imported or run, so this costs well under a second and runs on every
machine, GPU or not. It fails on a declared combination no test claims, on a claim that names
something not declared (the declaration changed, the test's claim did not), on a claim by a test
that does not exist as a collected test function, and on a claim it cannot read.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import declared
from declared import Combo, Unreadable, all_claims, claims_in, combos

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel

ROOT = Path(__file__).resolve().parents[2]


def backends() -> dict[str, object]:
    """Every backend package's SUPPORT, by framework."""
    import dlperf.backends

    found = {}
    for info in pkgutil.iter_modules(dlperf.backends.__path__):
        if info.ispkg:
            module = importlib.import_module(f"dlperf.backends.{info.name}")
            if hasattr(module, "SUPPORT"):
                found[module.SUPPORT.framework] = module.SUPPORT
    return found


def declared_combos(supports: dict[str, object], device: str) -> set[Combo]:
    out = set()
    for framework, support in supports.items():
        per_task = support.precisions.get(device, {})
        for task in support.tasks:
            for precision in per_task.get(task, ()):
                out.update(combos(framework, support.models, task, precision, device))
    return out


def claimed(device: str) -> dict[Combo, list[str]]:
    found: dict[Combo, list[str]] = {}
    for claim in all_claims(ROOT):
        for combo in claim.combos:
            if combo.device == device:
                found.setdefault(combo, []).append(claim.test)
    return found


def missing_and_stale(device: str) -> tuple[list[Combo], list[tuple[Combo, list[str]]]]:
    supports = backends()
    wanted = declared_combos(supports, device)
    have = claimed(device)
    missing = sorted(wanted - set(have))
    stale = sorted((combo, tests) for combo, tests in have.items() if combo not in wanted)
    return missing, stale


def describe(missing: list[Combo]) -> str:
    return "\n".join(f"  {c.framework} {c.model} {c.task} {c.precision} ({c.device})"
                     for c in missing)


def test_every_backend_is_read() -> None:
    assert {"torch", "tensorflow", "tensorflow1", "jax", "paddle", "mxnet", "mindspore",
            "oneflow", "caffe2", "onnxruntime"} <= set(backends())


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_declared_combination_has_a_test(device: str) -> None:
    missing, stale = missing_and_stale(device)
    where = "tests/" if device == "cpu" else "tests/gpu/"
    assert not missing, (f"{len(missing)} combinations declared on {device} that no test in "
                         f"{where} runs (@covers in tests/declared.py), or drop the "
                         f"declaration with a reason:\n{describe(missing)}")
    assert not stale, (f"tests claim combinations no SUPPORT declares on {device}:\n"
                       + "\n".join(f"  {c} <- {', '.join(t)}" for c, t in stale))


def test_cuda_claims_live_in_the_gpu_folder_and_cpu_claims_outside() -> None:
    for claim in all_claims(ROOT):
        for combo in claim.combos:
            in_gpu = claim.test.startswith("tests/gpu/")
            assert in_gpu == (combo.device == "cuda"), (claim.test, combo)


def test_every_claim_is_a_collected_test_function() -> None:
    """A claim is attached to a function pytest collects (module level or in a Test class)."""
    import ast

    for claim in all_claims(ROOT):
        path, _, name = claim.test.partition("::")
        tree = ast.parse((ROOT / path).read_text())
        names = {node.name for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert name.split("::")[-1] in names and name.split("::")[-1].startswith("test")
        assert Path(path).name.startswith("test_"), claim.test


def test_the_reader_sees_what_the_decorator_records(tmp_path: Path) -> None:
    """The static reader and the decorator agree, constants and tuple sums resolve, a claim on a
    function pytest would not collect and a non-literal argument are errors, not silence; and a
    declaration no test claims is reported missing."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_a.py").write_text(
        "from declared import covers\n"
        "MODELS = ('resnet50',) + ('bert-base',)\n"
        "@covers('torch', MODELS, 'infer', ('fp32', 'int8'))\n"
        "def test_one():\n    pass\n")
    (claim,) = all_claims(tmp_path)
    assert claim.test == "tests/test_a.py::test_one"

    @declared.covers("torch", ("resnet50", "bert-base"), "infer", ("fp32", "int8"))
    def test_one() -> None:
        pass
    assert sorted(claim.combos) == sorted(test_one.covers)  # type: ignore[attr-defined]
    assert len(claim.combos) == 4

    (tests / "test_b.py").write_text(
        "from declared import covers\n@covers('torch', 'resnet50', 'train', 'fp32')\n"
        "def helper():\n    pass\n")
    with pytest.raises(Unreadable, match="does not collect"):
        list(claims_in(tests / "test_b.py", tmp_path))
    (tests / "test_b.py").write_text(
        "from declared import covers\nimport os\n@covers('torch', os.name, 'train', 'fp32')\n"
        "def test_x():\n    pass\n")
    with pytest.raises(Unreadable, match="literals"):
        list(claims_in(tests / "test_b.py", tmp_path))

    class Fake:
        framework, models, tasks = "fake", ("m",), ("train", "infer")
        precisions = {"cpu": {"train": ("fp32",), "infer": ("fp32", "int8")}}
    wanted = declared_combos({"fake": Fake()}, "cpu")
    have = {Combo("fake", "m", "train", "fp32", "cpu"), Combo("fake", "m", "infer", "fp32", "cpu")}
    assert wanted - have == {Combo("fake", "m", "infer", "int8", "cpu")}
