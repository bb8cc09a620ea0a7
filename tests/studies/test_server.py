"""The server scenario: Poisson arrivals, latency from the scheduled arrival, the p99 search."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import dlperf, dlperf_main, load
from dlperf.worker.loop import poisson_arrivals, serve
from dlperf.worker.workload import Workload

# latency targets of tens of milliseconds: `make test` runs this file last, alone on the machine
pytestmark = pytest.mark.whole_machine

TINY_SERVER = ["infer", "--framework", "onnxruntime", "--model", "resnet50", "--image-size", "32",
               "--scenario", "server", "--warmup-steps", "3", "--steps", "10"]


class SleepWorkload(Workload):
    """A stand-in framework whose every query takes a fixed service time (the loop under test
    is real; only the model is replaced, so the queueing arithmetic can be checked exactly)."""

    samples_per_step = 1

    def __init__(self, service_s: float) -> None:
        self.service_s = service_s

    def step(self) -> float:
        time.sleep(self.service_s)
        return 0.0

    def sync(self) -> None:
        return None


def server_case(rate: float, target_ms: float, queries: int, duration: float = 0.0) -> dict:
    return {"seed": 3, "min_duration_s": duration,
            "server": {"rate_qps": rate, "target_latency_ms": target_ms, "min_queries": queries}}


@pytest.mark.parallel
def test_arrivals_are_seeded_poisson_and_cover_both_minimums() -> None:
    a = poisson_arrivals(50.0, 2.0, 10, seed=1)
    assert a == poisson_arrivals(50.0, 2.0, 10, seed=1)
    assert a != poisson_arrivals(50.0, 2.0, 10, seed=2)
    assert a == sorted(a) and a[-1] >= 2.0 and len(a) >= 10
    many = poisson_arrivals(200.0, 0.0, 20000, seed=0)
    gaps = [b - a for a, b in zip([0.0] + many[:-1], many)]
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 200.0, rel=0.05)


def test_light_load_latency_is_the_service_time() -> None:
    # a target no scheduling stall reaches: what is checked is the latency, not the verdict
    out = serve(SleepWorkload(0.002), server_case(20.0, 10_000.0, 15), time.perf_counter)
    server = out["server"]
    assert server["completed"] == server["scheduled"] == 15
    assert server["valid"] and not server["early_stop"]
    assert min(out["latencies_s"]) >= 0.002
    assert all(lat >= svc for lat, svc in zip(out["latencies_s"], out["step_times_s"]))


def test_overload_queues_are_charged_and_stop_the_probe_early() -> None:
    """Queries every ~1 ms to a 10 ms server: each waits behind the last, latency grows with the
    queue, and the probe stops once p99 can no longer meet the bound."""
    out = serve(SleepWorkload(0.01), server_case(1000.0, 30.0, 200), time.perf_counter)
    server = out["server"]
    assert server["early_stop"] and not server["valid"]
    assert server["completed"] < server["scheduled"] == 200
    assert server["over_target"] == server["allowed_over_target"] + 1
    lat = out["latencies_s"]
    assert lat[-1] > 0.03 and lat[-1] > lat[0] + 0.02  # the queue, measured from the schedule


def test_fixed_rate_probe(tmp_path: Path, db: Path) -> None:
    out = tmp_path / "s.json"
    proc = dlperf(*TINY_SERVER, "--rate", "5", "--target-latency-ms", "2000",
                  "--min-duration", "2", "--min-queries", "8", "--db", str(db),
                  "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (probe,) = load(out)
    server, latency = probe["server"], probe["latency_ms"]
    assert probe["case"]["scenario"] == "server" and probe["case"]["server"]["rate_qps"] == 5
    assert server["completed"] >= 8 and server["span_s"] >= 2.0 and server["valid"]
    assert server["meets_target"] and server["peak"]
    assert latency["n"] == server["completed"]
    assert latency["p50"] <= latency["p90"] <= latency["p95"] <= latency["p99"]
    assert "peak rate with p99 <= 2000 ms: 5 queries/s" in proc.stdout


def test_search_finds_a_rate_under_the_bound(tmp_path: Path, db: Path) -> None:
    out = tmp_path / "search.json"
    proc = dlperf(*TINY_SERVER, "--target-latency-ms", "1000", "--probes", "2",
                  "--min-duration", "1", "--min-queries", "10", "--db", str(db),
                  "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probes = load(out)
    assert len(probes) == 2  # --probes 2, each stored
    assert "capacity about" in proc.stdout
    rates = [p["server"]["rate_qps"] for p in probes]
    peaks = [p for p in probes if p["server"]["peak"]]
    assert len(peaks) == 1  # a tiny model serves far under a 1 s bound
    for probe in probes:
        meets = (probe["server"]["valid"] and probe["latency_ms"]["p99"] <= 1000)
        assert probe["server"]["meets_target"] == meets
    assert peaks[0]["server"]["rate_qps"] == max(
        r for r, p in zip(rates, probes) if p["server"]["meets_target"])
    assert f"{peaks[0]['server']['rate_qps']:g} queries/s" in proc.stdout


BAD_INPUT = [
    (["--target-latency-ms", "50", "--batch-sizes", "1,2"], "--batch-sizes"),
    (["--target-latency-ms", "50", "--precision", "fp32,int8"], "--precision"),
    (["--target-latency-ms", "0"], "--target-latency-ms"),
    (["--target-latency-ms", "50", "--rate", "-3"], "--rate"),
]


# the first as a real process, the rest through dlperf's main in this process
@pytest.mark.parallel
@pytest.mark.parametrize("args, field, run", [
    (*case, dlperf if index == 0 else dlperf_main) for index, case in enumerate(BAD_INPUT)])
def test_bad_server_input(args: list[str], field: str, run, db: Path) -> None:
    proc = run(*TINY_SERVER, *args, "--db", str(db), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], proc.stderr
