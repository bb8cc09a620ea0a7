"""One real tiny torch ResNet-50 run per test session, read by the tests of `dlperf run`'s
contract (test_run.py) and of the device every output names (test_device_shown.py): both ran
this same command (two repeats, so a spread and two stored repeat rows) into a database of their
own, and neither writes to it. Its terminal table is whole (COLUMNS=250), not folded into
ellipses."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import TINY_RESNET, dlperf, load

WIDE = {"COLUMNS": "250"}


@pytest.fixture(scope="session")
def tiny_resnet_run(tmp_path_factory) -> dict[str, Any]:
    """``proc``, ``result`` (the JSON file read), ``db``, ``json``, ``stdout`` and ``root``."""
    root = tmp_path_factory.mktemp("tiny-resnet")
    db, out = root / "dlperf.db", root / "cpu.json"
    proc = dlperf("run", *TINY_RESNET, "--repeats", "2", "--db", str(db), "--json", str(out),
                  check=True, env=WIDE)
    return {"proc": proc, "root": root, "db": db, "json": out, "result": load(out),
            "stdout": proc.stdout}
