"""Measured peaks turn achieved FLOP/s into MFU; unprobed machines say so instead of guessing."""

from __future__ import annotations

import json

import pytest

from conftest import TINY_RESNET, dlperf, load


def test_probe_is_cached_and_used_for_mfu(tmp_path):
    env = {"DLPERF_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "before.json"
    dlperf("run", *TINY_RESNET, "--repeats", "1", "--db", str(tmp_path / "a.db"),
           "--json", str(out), env=env, check=True)
    before = load(out)["flops"]
    assert before["peak_per_s"] is None and before["mfu"] is None
    assert "dlperf sysinfo --probe" in before["peak_source"]

    info = json.loads(dlperf("sysinfo", "--probe", "--json", env=env, check=True).stdout)
    fp32_peak = info["peaks"]["flops_per_s"]["float32"]
    assert fp32_peak > 1e8 and info["peaks"]["host_copy_bytes_per_s"] > 1e8
    assert json.loads(dlperf("sysinfo", "--json", env=env, check=True).stdout)["peaks"] == \
        info["peaks"]

    out = tmp_path / "after.json"
    dlperf("run", *TINY_RESNET, "--repeats", "1", "--db", str(tmp_path / "a.db"),
           "--json", str(out), env=env, check=True)
    flops = load(out)["flops"]
    assert flops["peak_per_s"] == fp32_peak
    assert flops["mfu"] == pytest.approx(flops["achieved_per_s"] / fp32_peak)
