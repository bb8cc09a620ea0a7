"""Fidelity check for the JAX and Paddle backends: dlperf's throughput / a hand-written loop's.

Both sides train the project's ResNet-50 v1.5 (same network module) with the same settings, in the
framework's own environment (`dlperf envs install jax|paddle`), in fresh processes, interleaved
bare/dlperf pair by pair so machine drift hits both. The hand-written loops are in
benchmarks/handwritten/ and are what a JAX or Paddle user would write for speed.

    python benchmarks/fidelity_jax_paddle.py --framework jax --precision amp-bf16 --compile
    python benchmarks/fidelity_jax_paddle.py --framework paddle --layout NHWC   (bare loop only)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dlperf import envs, launch

HERE = Path(__file__).resolve().parent
LOOPS = {"jax": HERE / "handwritten" / "jax_resnet50.py",
         "paddle": HERE / "handwritten" / "paddle_resnet50.py"}


def bare(args: argparse.Namespace) -> float:
    proc = subprocess.run(
        [envs.interpreter(args.framework), str(LOOPS[args.framework]), str(args.batch_size),
         str(args.image_size), str(args.warmup_steps), str(args.steps), args.precision,
         "1" if args.compile else "0"] + ([args.layout] if args.layout else []),
        capture_output=True, text=True, env=launch.worker_env())
    if proc.returncode != 0:
        raise SystemExit(f"hand-written loop failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["throughput"]


def harness(args: argparse.Namespace, db: Path, out: Path) -> float:
    subprocess.run(
        [sys.executable, "-m", "dlperf.cli", "run", "--framework", args.framework, "--model",
         "resnet50", "--batch-size", str(args.batch_size), "--image-size", str(args.image_size),
         "--precision", args.precision, "--warmup-steps", str(args.warmup_steps), "--steps",
         str(args.steps), "--repeats", "1", "--db", str(db), "--json", str(out)]
        + (["--compile"] if args.compile else []), capture_output=True, text=True)
    result = json.loads(out.read_text())
    if result["status"] != "ok":
        raise SystemExit(f"dlperf: {result['status']}: {result['error']}")
    return result["throughput"]["median"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", default="jax", choices=sorted(LOOPS))
    parser.add_argument("--precision", default="fp32", choices=("fp32", "amp-bf16"))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--layout", choices=("NCHW", "NHWC"),
                        help="paddle: the bare loop's layout; runs the bare loop only")
    parser.add_argument("--db", type=Path, help="keep dlperf's results here (default: a temp file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db, out = args.db or Path(tmp) / "fidelity.db", Path(tmp) / "r.json"
        bare_runs, dlperf_runs = [], []
        for pair in range(args.pairs):
            bare_runs.append(bare(args))
            if not args.layout:
                dlperf_runs.append(harness(args, db, out))
            print(f"pair {pair + 1}: bare {bare_runs[-1]:.2f}  dlperf "
                  f"{dlperf_runs[-1] if dlperf_runs else float('nan'):.2f} samples/s", flush=True)
    summary = {"framework": args.framework, "precision": args.precision, "compile": args.compile,
               "layout": args.layout, "bare": bare_runs, "bare_median": statistics.median(bare_runs)}
    if dlperf_runs:
        summary.update(dlperf=dlperf_runs, dlperf_median=statistics.median(dlperf_runs),
                       ratio=statistics.median(dlperf_runs) / statistics.median(bare_runs))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
