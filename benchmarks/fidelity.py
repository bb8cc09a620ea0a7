"""Fidelity of every backend: dlperf's throughput / a hand-written loop's, through `dlperf ab`.

Side A is the framework's idiomatic hand-written ResNet-50 v1.5 loop (benchmarks/handwritten/,
same network module, same recipe), wrapped by `dlperf external`; side B is `dlperf run` of the
same case. `dlperf ab` runs them alternately in fresh processes and reports B/A with a bootstrap
95% interval over pairs. A ratio within 0.97-1.03 means the harness neither costs nor inflates.
Both sides run with OMP_NUM_THREADS set to this process's usable cores unless it is set.

    python benchmarks/fidelity.py --framework jax --precision amp-bf16 --pairs 6
    python benchmarks/fidelity.py --framework torch --image-size 112 --batch-size 16 \\
        --warmup-steps 8 --steps 20 --json fidelity-torch.json

For caffe2, side A is Caffe2's own ``imagenet_trainer.py`` on its null input
(``handwritten/caffe2_resnet50.py`` runs it unchanged and reads its per-iteration rates), and both
sides run Caffe2's CPU operators (dlperf's ``--option engine=cpu``), the engine the trainer can run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from dlperf import envs
from dlperf.launchers import launch

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
LOOPS = {"torch": "torch_resnet50.py", "tensorflow": "tf2_resnet50.py",
         "tensorflow1": "tf1_resnet50.py", "jax": "jax_resnet50.py",
         "paddle": "paddle_resnet50.py", "mxnet": "mxnet_resnet50.py",
         "mindspore": "mindspore_resnet50.py", "oneflow": "oneflow_resnet50.py",
         # not hand-written: Caffe2's own imagenet_trainer.py on its null input, run unchanged
         "caffe2": "caffe2_resnet50.py"}
RATE = r'"throughput": ([0-9.eE+-]+)'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", required=True, choices=sorted(LOOPS))
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--warmup-steps", type=int, default=8,
                        help="both sides' warm-up, the first step included")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--json", help="write the ab comparison here")
    args = parser.parse_args()

    compile_flag = args.compile or args.framework == "jax"  # jax always compiles its step
    loop = [envs.interpreter(args.framework), str(HERE / "handwritten" / LOOPS[args.framework]),
            str(args.batch_size), str(args.image_size), str(args.warmup_steps), str(args.steps),
            args.precision, "1" if compile_flag else "0"]
    described = ["--framework", args.framework, "--model", "resnet50", "--batch-size",
                 str(args.batch_size), "--precision", args.precision]
    hand = ["external", "--name", f"hand-{args.framework}", "--metric", RATE, "--warmup", "0",
            *described, "--", *loop]
    harness = ["run", *described, "--image-size", str(args.image_size), "--warmup-steps",
               str(args.warmup_steps), "--steps", str(args.steps),
               "--compile" if compile_flag else "--no-compile"]
    if args.framework == "caffe2":
        # Caffe2's trainer runs its CPU operators (its --use_ideep cannot build its net with
        # torch 1.8.1's wheel), so dlperf's side runs the same engine
        harness += ["--option", "engine=cpu"]
    command = [sys.executable, "-m", "dlperf.cli", "ab", "--pairs", str(args.pairs)]
    if args.json:
        command += ["--json", args.json]
    env = dict(os.environ)
    # Both sides get the same threads. dlperf gives its worker every usable core; a hand loop
    # left to its framework's default may take fewer (MXNet 1.9 did here: 25.1 vs 38.2
    # samples/s at image 64, batch 8; with OMP_NUM_THREADS=2 the hand loop ran 38.2-38.4)
    env.setdefault("OMP_NUM_THREADS", str(launch.usable_cores()))
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                    else "")
    return subprocess.call(command + ["--", *hand, "--", *harness], env=env)


if __name__ == "__main__":
    sys.exit(main())
