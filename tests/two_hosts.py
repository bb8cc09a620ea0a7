"""Shared by tests/launchers/test_emulated_hosts.py and tests/launchers/test_emulated_frameworks.py: one real
`dlperf run --emulate-hosts 2` of a tiny ResNet-50 (a bottleneck a stage), and what every such
run must show."""

from __future__ import annotations

import ipaddress
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import CUT_RESNET50, CUT_RESNET50_FLAGS, TAG, assert_nothing_left, dlperf
from dlperf import models, spec
from dlperf.host import emulated
from dlperf.store import Store
from dlperf.worker.workload import PROBE_REPEATS
from known_failures import kept_logs

# ResNet-50 cut to a bottleneck a stage (conftest's CUT_RESNET50): what these runs check is each
# framework's path between hosts, which every gradient takes alike
TINY_RESNET50 = ["--model", "resnet50", "--image-size", "32", *CUT_RESNET50_FLAGS,
                 "--batch-size", "2", "--warmup-steps", "1", "--steps", "2", "--repeats", "1",
                 "--device", "cpu", "--rdzv-timeout", "120", "--timeout", "400"]
TRAINING_STEPS = 3  # the warm-up step and the 2 measured ones: each all-reduces every gradient
# the fp32 gradients of TINY_RESNET50's network (the head stays 1000 classes)
GRADIENT_BYTES = 4 * models.get("resnet50").params({"image_size": 32, **CUT_RESNET50})
# and of the whole ResNet-50 at image 32, which the sweep files' cases train
RESNET50_GRADIENT_BYTES = 4 * models.get("resnet50").params({"image_size": 32,
                                                              "num_classes": 1000})
BENCHMARKING = ipaddress.ip_network("198.18.0.0/15")


def skip_without_emulation() -> None:
    """This machine's one line when it cannot emulate hosts (not root, no iproute2...)."""
    why = emulated.missing(link=True)
    if why:
        pytest.skip(f"cannot emulate hosts here: {why}")


@dataclass
class Run:
    framework: str
    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None
    db: Path
    seconds: float

    def why(self) -> str:
        """What the run printed last, for an assertion's message, and a failed repeat's own
        stderr tail as the result stored it (the worker's or its launcher's last words), then the
        logs node 0 kept beside its results file (MindSpore's msrun has failed at the end of a
        repeat that trained, on either node, without saying why in its last words)."""
        error = (self.result or {}).get("error")
        tail = "\n".join((self.stdout + self.stderr).strip().splitlines()[-15:])
        kept = str((self.result or {}).get("stderr_tail") or "")[-3000:]
        return (f"{self.framework} exit {self.returncode}: {error}\n{tail}"
                + (f"\n--- the first failed repeat's stderr tail ---\n{kept}" if kept else "")
                + kept_logs(self.result))


def across_two_hosts(framework: str, folder: Path, *extra: str,
                     env: dict[str, str] | None = None) -> Run:
    """`dlperf run --framework FRAMEWORK <TINY_RESNET50> --emulate-hosts 2` (``env`` added to
    its environment); every process it started is gone when it returns (a marker in their
    environment)."""
    folder.mkdir(parents=True, exist_ok=True)
    db, out, tag = folder / "r.db", folder / "r.json", uuid.uuid4().hex
    started = time.monotonic()
    proc = dlperf("run", "--framework", framework, *TINY_RESNET50, *extra, "--emulate-hosts",
                  "2", "--db", str(db), "--json", str(out), env={**(env or {}), TAG: tag},
                  timeout=1200)
    seconds = time.monotonic() - started
    assert_nothing_left(tag)
    result = json.loads(out.read_text()) if out.exists() else None
    return Run(framework, proc.returncode, proc.stdout, proc.stderr, result, db, seconds)


def check_across_two_hosts(run: Run, link: str | None = None,
                           local_server: bool = False) -> dict[str, Any]:
    """The case ran ok with a rank on each host, each on its own host name and address from the
    benchmarking range; every host's interface carried at least its share of every training
    step's gradients, each way, and its loopback next to nothing (``local_server``: a parameter
    server on each host, which its own worker reaches over loopback); node 0 stored the result
    with the hosts' block; nothing of the hosts is left. The hosts' block."""
    assert run.returncode == 0 and run.result and run.result["status"] == "ok", run.why()
    result = run.result
    assert result["model"]["params"] == result["model"]["catalogue_params"]  # the cut network
    block = result["emulated_hosts"]
    assert block["emulated"] is True and block["count"] == 2 and block["link"] == link
    hosts = block["hosts"]
    names = [h["hostname"] for h in hosts]
    addresses = [h["address"] for h in hosts]
    assert names == ["dlperf-h0", "dlperf-h1"] and len(set(addresses)) == 2
    assert all(ipaddress.ip_address(a) in BENCHMARKING for a in addresses), addresses
    assert [(r["rank"], r["host"], r["address"]) for r in result["ranks"]] == [
        (0, names[0], addresses[0]), (1, names[1], addresses[1])]
    assert result["case"]["nnodes"] == 2 and result["case"]["link"] == (link or "")
    for host in hosts:
        for way in ("tx_bytes", "rx_bytes"):
            assert host[way] >= TRAINING_STEPS * GRADIENT_BYTES, (host, run.why())
    # and no more than its engine sends: each all-reduce of the gradients (the training steps',
    # and the probe's untimed one and its PROBE_REPEATS timed ones after the window) puts the
    # engine's wire share of a ring's bytes on each host's link (at 2 ranks the whole gradient
    # once), node 0's broadcasts of the initial weights aside, so the host that sends fewer
    # sends that: 7.06-7.10 gradients for every engine, 14.11 for MindSpore (2026-12-02). A
    # step that all-reduces its gradients twice (JAX's before 3fa7a15) sends 10.
    share = spec.wire_of(result["case"]["framework"], result["case"].get("launcher"),
                         "cpu").share
    expected = share * (TRAINING_STEPS + 1 + PROBE_REPEATS) * GRADIENT_BYTES
    assert min(h["tx_bytes"] for h in hosts) <= 1.15 * expected, (hosts, expected)
    for host in hosts:
        if not local_server:  # the ranks' traffic went between the hosts, not over loopback
            assert host["lo_tx_bytes"] < 0.05 * host["tx_bytes"], host
        assert host["exit_code"] == 0
        assert not Path("/run/netns", host["namespace"]).exists()
    with Store(run.db, readonly=True) as store:
        stored = store.results()
    assert len(stored) == 1 and stored[0]["emulated_hosts"] == block
    assert stored[0]["ranks"][1]["address"] == addresses[1]
    token = hosts[0]["namespace"][len(emulated.PREFIX):].split("-")[0]
    assert not [name for name in os.listdir("/sys/class/net") if token in name]
    return block
