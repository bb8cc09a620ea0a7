"""Run by every Python interpreter the tests start (tests/conftest.py puts this folder first on
PYTHONPATH): in an interpreter whose XLA is JAX's or TensorFlow 2's, the flags in
``DLPERF_TEST_NEWER_XLA_FLAGS`` join the ``XLA_FLAGS`` the test session set. They cannot go into
``XLA_FLAGS`` for every process: TensorFlow 1.15's XLA aborts its process on a flag it does not
know. Where a test removed ``XLA_FLAGS`` (to see the code XLA emits by default), nothing joins.

Valid Python 3.7 (it runs in every environment); stdlib only, a directory listing per
site-packages folder.
"""

import os
import sys

NEWER = ("jaxlib-", "tensorflow-2.", "tensorflow_cpu-2.", "tensorflow_gpu-2.")


def _newer_xla():
    # type: () -> bool
    for path in sys.path:
        if not path.endswith("site-packages"):
            continue
        try:
            names = os.listdir(path)
        except OSError:
            continue
        if any(name.startswith(NEWER) and name.endswith(".dist-info") for name in names):
            return True
    return False


def _join():
    # type: () -> None
    extra = os.environ.get("DLPERF_TEST_NEWER_XLA_FLAGS", "").strip()
    flags = os.environ.get("XLA_FLAGS", "")
    if extra and flags and extra not in flags and _newer_xla():
        os.environ["XLA_FLAGS"] = flags + " " + extra


_join()
