"""The tests' XLA flags (tests/conftest.py): the flags every XLA knows go into ``XLA_FLAGS`` for
every process; those only a newer XLA knows join it (tests/site/sitecustomize.py) in the
interpreters of JAX and TensorFlow 2, never in TensorFlow 1.15's, whose XLA aborts on a flag it
does not know, and nowhere a test removed ``XLA_FLAGS``. Each environment's interpreter prints
the flags it starts with (no framework imported)."""

from __future__ import annotations

import ast
import os
import subprocess

import pytest

from conftest import NEWER_XLA, pinned_env

PRINT = "import os; print(repr(os.environ.get('XLA_FLAGS')))"


def flags_in(framework: str, env: dict[str, str]) -> str | None:
    done = subprocess.run([pinned_env(framework), "-c", PRINT], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip())  # the repr of a str or None, printed above


@pytest.mark.parametrize("framework, joins", [("jax", True), ("tensorflow", True),
                                              ("tensorflow1", False)])
def test_newer_flags_join_only_where_the_xla_knows_them(framework, joins):
    if NEWER_XLA not in os.environ:
        pytest.skip("XLA_FLAGS was set before the tests: it is used as it is, nothing joins")
    session, newer = os.environ["XLA_FLAGS"], os.environ[NEWER_XLA]
    assert newer not in session
    assert flags_in(framework, dict(os.environ)) == (f"{session} {newer}" if joins else session)
    without = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    assert flags_in(framework, without) is None
