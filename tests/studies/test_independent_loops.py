"""benchmarks/independent/: ResNet-50 v1.5 loops written in each framework's own style.

They share nothing with dlperf, so a static check holds them to it: no script imports dlperf or
benchmarks.*, each takes the four shape and window flags (and --min-seconds) and asserts the
torchvision parameter count. Real runs (torch eager, the cheapest, in this .venv; OneFlow's
nn.Graph, the one compiled mode written as a class of its own) check that the one JSON line
each prints carries what the fidelity runner reads.
"""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "benchmarks" / "independent"
SUFFIX = "_resnet50.py"
# one script per framework, named for it: tests/backends/test_backend_contract.py checks each is a
# backend's and benchmarks/fidelity.py's INDEPENDENT runs it
FRAMEWORKS = tuple(sorted(p.name[:-len(SUFFIX)] for p in FOLDER.glob("*" + SUFFIX)))
FLAGS = {"--image-size", "--batch-size", "--warmup", "--steps", "--min-seconds", "--compile",
         "--no-compile"}
PARAMS = 25557032
KEYS = {"framework", "samples_per_s", "window_s", "steps", "params", "image_size", "batch_size",
        "compile"}


def script(framework: str) -> Path:
    return FOLDER / f"{framework}{SUFFIX}"


def imported_modules(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
              and getattr(node.func, "id", getattr(node.func, "attr", "")) in
              ("__import__", "import_module") and node.args
              and isinstance(node.args[0], ast.Constant)):
            names.add(str(node.args[0].value))
    return names


@pytest.mark.parallel
def test_one_script_per_framework_and_nothing_else():
    assert sorted(p.name for p in FOLDER.glob("*.py")) == sorted(
        script(fw).name for fw in FRAMEWORKS)
    readme = (FOLDER / "README.md").read_text()
    for fw in FRAMEWORKS:
        assert f"{fw}{SUFFIX}" in readme, fw


@pytest.mark.parallel
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_script_shares_nothing_with_dlperf(framework):
    tree = ast.parse(script(framework).read_text())
    assert ast.get_docstring(tree), "a module docstring naming the sources it follows"
    for name in imported_modules(tree):
        top = name.split(".")[0]
        assert top not in ("dlperf", "benchmarks") and not name.startswith("."), name
    flags = {node.args[0].value for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == "add_argument" and node.args
             and isinstance(node.args[0], ast.Constant)}
    assert FLAGS <= flags, FLAGS - flags
    asserts = [node for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    assert any(isinstance(c, ast.Constant) and c.value == PARAMS
               for node in asserts for c in ast.walk(node.test)), "asserts 25557032 parameters"


@pytest.mark.parametrize("framework, compiled", [("torch", False), ("oneflow", True)])
def test_one_real_run_prints_one_json_line(framework, compiled):
    # Image 16, batch 2 is the smallest ResNet-50 trains at (layer4 is 1x1; BN needs 2 values per
    # channel); one timed step, no warm-up: a few seconds on 2 cores.
    from conftest import pinned_env
    from dlperf.envs import manage

    python = sys.executable if framework == "torch" else pinned_env(framework)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
           **manage.worker_variables(framework, python)}
    done = subprocess.run(
        [python, str(script(framework)), "--image-size", "16", "--batch-size", "2",
         "--warmup", "1" if compiled else "0", "--steps", "1",
         "--compile" if compiled else "--no-compile"],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    result = json.loads(lines[0])
    assert set(result) == KEYS
    assert result["framework"] == framework and result["compile"] is compiled
    assert result["params"] == PARAMS
    assert (result["image_size"], result["batch_size"], result["steps"]) == (16, 2, 1)
    assert result["window_s"] > 0
    assert result["samples_per_s"] == pytest.approx(2 / result["window_s"])
