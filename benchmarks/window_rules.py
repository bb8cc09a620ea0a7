"""Which other rate's result the overlap window is best read from: every data folder of the
emulated-hosts check whose engine reads a window (a ring's; MXNet's parameter servers overlap
the whole step and read none) made again under each of projection_validation.py's
``--window-from`` rules, case by case, and each rule's median |error|.

A computation from git alone (each folder's results.json and collectives.json); nothing is
measured. docs/projection.md, "Which rate the window is read from", holds its output.

    python benchmarks/window_rules.py [--folders DIR ...] [--markdown rules.md]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from projection_validation import WINDOW_RULES

from dlperf import outputs
from dlperf.errors import UsageError
from dlperf.projection.error import median_abs

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"

#: the folders compared, each with the sweep its results were stored under (their READMEs)
FOLDERS = (
    ("link-rates-zen4-2026-12-01", "link-rates"),
    ("link-rates-zen4-pinned-2026-12-01", "link-rates"),
    ("link-rates-zen4-interleaved-2026-12-02", "link-rates"),
    ("link-rates-frameworks-zen4-2026-12-02", "link-rates-frameworks"),
    ("link-rates-jax-zen4-2026-12-02", "link-rates-jax"),
    ("link-rates-oneflow-zen4-2026-12-02", "link-rates-oneflow"),
    ("link-rates-oneflow-zen5-2026-12-04", "link-rates-oneflow"),
    ("link-rates-oneflow-xeon-2026-12-04", "link-rates-oneflow"),
    ("link-rates-mindspore-zen5-2026-12-04", "link-rates-mindspore"),
    ("link-rates-mindspore-zen4-2026-12-04", "link-rates-mindspore"),
    ("from-node-2x2-xeon-2026-12-04", "from-node-2x2"),
    ("from-node-2x2-paddle-jax-xeon-2026-12-04", "from-node-2x2"),
    ("link-rates-window-xeon-2026-12-04", "link-rates-window"),
    ("link-rates-window-tf-jax-xeon-2026-12-04", "link-rates-window-tf-jax"),
    ("link-rates-tf-sizes-xeon-2026-12-04", "link-rates-tf-sizes"),
)

def rows_under(folder: str, sweep: str, rule: str) -> list[dict]:
    """``folder``'s validation rows with the window read as ``rule`` chooses, less those whose
    exchange overlaps the whole step (a parameter server's: no window is read)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        proc = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "projection_validation.py"), "--results",
             str(DATA / folder / "results.json"), "--sweep", sweep, "--window-from", rule,
             "--json", str(out)], capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            raise SystemExit(f"{folder} ({rule}): {proc.stderr.strip()}")
        return [r for r in json.loads(out.read_text()) if not r["overlap"].get("whole_step")]


def window_cell(row: dict) -> str:
    """The error and where the window was read: ``+6.8 % (10gbit)``."""
    return f"{row['error'] * 100:+.1f} % ({row['window_from']})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folders", nargs="+", help="only these data folders")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    try:
        outputs.check_writable("--markdown", args.markdown)
    except UsageError as error:
        print(f"window_rules.py: error: {error}", file=sys.stderr)
        return 2
    folders = [(f, s) for f, s in FOLDERS if not args.folders or f in args.folders]
    if args.folders and len(folders) != len(args.folders):
        known = ", ".join(f for f, _ in FOLDERS)
        print(f"window_rules.py: error: --folders: one of {known}", file=sys.stderr)
        return 2
    cases: dict[tuple[str, str, str, str], dict[str, dict]] = {}
    for folder, sweep in folders:
        for rule in WINDOW_RULES:
            for row in rows_under(folder, sweep, rule):
                key = (folder, row["framework"], row["engine"], row["link"])
                cases.setdefault(key, {})[rule] = row
    lines = ["| folder | framework | engine | link | " + " | ".join(WINDOW_RULES) + " |",
             "|---|---|---|---|" + "---:|" * len(WINDOW_RULES)]
    for (folder, framework, engine, link), by_rule in cases.items():
        lines.append(f"| {folder} | {framework} | {engine} | {link} | "
                     + " | ".join(window_cell(by_rule[r]) for r in WINDOW_RULES) + " |")
    lines += ["", "| rule | cases | median abs error | outside 10 % | largest |",
              "|---|---:|---:|---:|---:|"]
    for rule in WINDOW_RULES:
        errors = [by_rule[rule]["error"] for by_rule in cases.values()]
        lines.append(f"| {rule} | {len(errors)} | {median_abs(errors):.1%} | "
                     f"{sum(abs(e) > 0.10 for e in errors)} | "
                     f"{max(abs(e) for e in errors):.1%} |")
    text = "\n".join(lines)
    outputs.show_markdown(text, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
