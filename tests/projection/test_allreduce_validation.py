"""The all-reduce across 2 emulated hosts of 2 processes (benchmarks/data/allreduce-2x2-*): its
table made again from the folder's `dlperf collectives --json` files alone, each host's link
bytes against what the model puts there (one ring through every process, MXNet's servers), and
the folder README's figures traced to the recomputation."""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

import pytest

from dlperf.projection.links import PARAMETER_SERVER, RING, link_bytes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import allreduce_validation as av  # noqa: E402

pytestmark = pytest.mark.parallel

FOLDER = ROOT / "benchmarks" / "data" / "allreduce-2x2-zen4-2026-12-04"
ENGINES = {"jax gloo", "mindspore mccl", "mxnet kvstore", "oneflow cpu", "paddle gloo",
           "tensorflow ring", "tensorflow1 ring", "torch gloo", "torch horovod"}


@pytest.fixture(scope="module")
def rows() -> list[av.Row]:
    return av.check(av.load(FOLDER))


def test_the_table_is_made_again_from_the_folder(rows):
    assert {row.engine for row in rows} == ENGINES
    assert (FOLDER / "validation.md").read_text() == av.markdown(rows)


def test_every_link_carries_what_the_model_puts_on_it_not_what_a_hierarchical_one_did(rows):
    for row in rows:
        assert row.share_2 == pytest.approx(row.model_share, rel=0.05), row.engine
        exchange = PARAMETER_SERVER if "kvstore" in row.engine else RING
        at_2x1 = link_bytes(exchange, 1, 2) / link_bytes(exchange, 2, 2)
        assert row.share_1 == pytest.approx(row.model_share * at_2x1, rel=0.07), row.engine
        if "kvstore" not in row.engine:  # a ring: 1.5 x its share, hierarchical 1.0 x
            assert abs(row.share_2 / row.hierarchical_share - 1) > 0.4, row.engine
    assert link_bytes(RING, 2, 2) == pytest.approx(1.5)
    assert link_bytes(PARAMETER_SERVER, 2, 2) == pytest.approx(2.0)


def test_the_readme_figures_are_the_recomputed_ones(rows):
    text = (FOLDER / "README.md").read_text()
    by_engine = {row.engine: row for row in rows}
    found = 0
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        engine = next((e for e in ENGINES if cells[0].startswith(e + " ") or cells[0] == e),
                      None)
        if engine is None or len(cells) != 6:
            continue
        row = by_engine[engine]
        _, measured, flat, before = row.sizes[-1]
        numbers = [float(n.replace("−", "-")) for n in re.findall(r"[−+-]?\d+\.\d+", line)]
        assert numbers[:4] == [round(row.share_1, 2), round(row.share_2, 2),
                               round(row.model_share, 2), round(row.hierarchical_share, 2)]
        assert numbers[4:6] == [round((flat / measured - 1) * 100, 1),
                                round((before / measured - 1) * 100, 1)], engine
        medians = [statistics.median(abs(e) for e in row.errors(column))
                   for column in (2, 3)]
        assert numbers[6:8] == [round(m * 100, 1) for m in medians], engine
        found += 1
    assert found == len(ENGINES)
