"""Two checkouts of dlperf measuring the same case, through `dlperf ab`: did a change to the
harness move a number?

Each side is `dlperf external` around one `dlperf run --repeats 1` of the case by one checkout's
source tree (its `src/` first on PYTHONPATH, so its harness, worker and backend run); the run's
median is printed as ``rate: X`` for the external side to read. `dlperf ab` (of this checkout)
alternates the two sides in fresh processes and reports new/old with a bootstrap 95% interval
over pairs. Both sides run with the same OMP_NUM_THREADS (this process's usable cores unless set).

    python benchmarks/checkouts.py --old /tmp/old --pairs 4 -- \\
        --framework torch --model resnet50 --image-size 64 --batch-size 8 --warmup-steps 5 \\
        --steps 15
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from dlperf.launchers.launch import usable_cores

HERE = Path(__file__).resolve().parent
NEW = HERE.parent
# prints the one repeat's median as the line the external side reads
REPORT = ("import json, sys; print('rate: %r' % "
          "json.load(open(sys.argv[1]))['throughput']['median'])")


def side(checkout: Path, name: str, case: list[str], scratch: Path) -> list[str]:
    """`external` arguments that run ``case`` once with ``checkout``'s source tree."""
    out = scratch / f"{name}.json"
    run = [sys.executable, "-m", "dlperf.cli", "run", *case, "--repeats", "1",
           "--db", str(scratch / f"{name}.db"), "--json", str(out)]
    # the inner run takes its measurement lock apart from the ab that holds the host's
    script = (f"DLPERF_LOCK_DIR={shlex.quote(str(scratch))} "
              f"PYTHONPATH={shlex.quote(str(checkout / 'src'))} {shlex.join(run)} >/dev/null "
              f"&& {shlex.quote(sys.executable)} -c {shlex.quote(REPORT)} {shlex.quote(str(out))}")
    described = [case[i:i + 2] for i in range(len(case) - 1)
                 if case[i] in ("--framework", "--model", "--batch-size", "--precision")]
    return ["external", "--name", name, "--metric", r"rate: ([0-9.eE+-]+)", "--warmup", "0",
            *[x for pair in described for x in pair], "--", "sh", "-c", script]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, type=Path, help="the other checkout's root")
    parser.add_argument("--new", type=Path, default=NEW, help="this checkout by default")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--json", help="write the ab comparison here")
    parser.add_argument("case", nargs=argparse.REMAINDER, help="-- then `dlperf run` flags")
    args = parser.parse_args()
    case = args.case[1:] if args.case[:1] == ["--"] else args.case
    if not case:
        parser.error("case: give the `dlperf run` flags after --")
    for root in (args.old, args.new):
        if not (root / "src" / "dlperf").is_dir():
            parser.error(f"{root}: not a dlperf checkout (no src/dlperf)")
    with tempfile.TemporaryDirectory(prefix="dlperf-checkouts-") as tmp:
        scratch = Path(tmp)
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", str(usable_cores()))
        command = [sys.executable, "-m", "dlperf.cli", "ab", "--pairs", str(args.pairs)]
        if args.json:
            command += ["--json", args.json]
        command += ["--", *side(args.old, "old", case, scratch),
                    "--", *side(args.new, "new", case, scratch)]
        return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main())
