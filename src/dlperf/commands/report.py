"""``dlperf report``: the stored results as Markdown, HTML (with plots), CSV or JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dlperf import outputs
from dlperf.commands import HELP
from dlperf.commands._flags import add_db_argument
from dlperf.errors import UsageError
from dlperf.report import results
from dlperf.spec import PRECISIONS
from dlperf.store import Store
from dlperf.studies import capacity
from dlperf.studies.infer import BASELINE
from dlperf.tune import stored


FORMATS = ("md", "html", "csv", "json")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser("report", help=HELP["report"])
    add_db_argument(parser)
    parser.add_argument("--sweep", help="only this sweep's results (default: everything stored)")
    parser.add_argument("--format", choices=FORMATS, help="default: from the -o suffix, else md")
    parser.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    parser.add_argument("--title", help="report title")
    parser.add_argument("--baseline-precision", default=BASELINE, choices=PRECISIONS,
                        metavar="PRECISION",
                        help="the precision the detail tables' speedups divide by: AMP over "
                             "it in training, each latency statistic's speedup in inference "
                             "(default fp32; NVIDIA's A100 tables use tf32)")
    return parser


def output_format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    suffix = args.output.suffix.lower().lstrip(".") if args.output else ""
    return {"markdown": "md", "htm": "html"}.get(suffix, suffix) if suffix in (
        *FORMATS, "markdown", "htm") else "md"


def render(found: list[dict[str, Any]], fmt: str, title: str,
           accuracy_rows: list[dict[str, Any]] | None = None,
           searches: list[Any] | None = None,
           history: list[dict[str, Any]] | None = None,
           tunes: list[dict[str, Any]] | None = None,
           projections: list[dict[str, Any]] | None = None,
           baseline: str = BASELINE) -> str:
    """``accuracy_rows``: stored `dlperf accuracy` rows, a table of their own (md, html);
    ``searches``: stored capacity searches (:func:`dlperf.report.capacity.load`; md, html);
    ``history``: every stored successful result, for the history figure (html);
    ``tunes``: finished `dlperf tune` studies (:func:`dlperf.tune.stored.outcomes`; md, html);
    ``projections``: stored `dlperf project` projections, each under its start's section;
    ``baseline``: the precision the detail tables' precision speedups divide by."""
    # matplotlib and the renderers load here, not when every dlperf command starts
    from dlperf.report import accuracy, export, html, markdown, projected, tables, tune

    scaled = results.with_scaling(found)
    if fmt == "csv":
        return export.to_csv(scaled)
    if fmt == "json":
        return export.to_json(scaled)
    content = tables.build(scaled, baseline)
    projected.attach(content, projections or [])
    if accuracy_rows:
        content.accuracy.append(accuracy.table(content, accuracy_rows, scaled))
        accuracy.add_environments(content, accuracy_rows)
    tuned = tune.build(content, tunes or [])
    if fmt == "md":
        return markdown.render(content, title, searches or (), tuned)
    return html.render(content, title, searches or (), history, tuned)


def main(args: argparse.Namespace) -> int:
    outputs.check_writable("-o", args.output)
    with Store(args.db, readonly=True) as store:
        # a tune's trials are runs of sweep `tune`: the tune section shows them (`--sweep tune`
        # lists them as results), so they do not crowd every framework's rows
        found = results.load(store, args.sweep, leave_out=(stored.SWEEP,))
        # accuracy rows belong to no sweep: a report of one sweep leaves them out
        scored = [] if args.sweep else store.accuracy()
        fmt = output_format(args)
        tunes: list[dict[str, Any]] = []
        if fmt in ("md", "html"):
            from dlperf.report import tune as tune_report

            tunes = tune_report.for_results(stored.outcomes(store), found, args.sweep)
        history = results.load_history(store, args.sweep) if fmt == "html" else None
        projections = store.projections() if fmt in ("md", "html") else []
        searches: list[Any] = []
        if fmt in ("md", "html") and args.sweep in (None, capacity.SWEEP_NAME):
            from dlperf.report import capacity as capacity_report

            searches = capacity_report.load(store)
    if not found and not ((scored or tunes) and fmt in ("md", "html")):
        raise UsageError(f"--db: {args.db} holds no finished result"
                         + (f" for sweep {args.sweep!r}" if args.sweep else "")
                         + (" (its accuracy rows appear in md and html reports)" if scored
                            else ""))
    title = args.title or (f"dlperf report: {args.sweep}" if args.sweep else "dlperf report")
    text = render(found, fmt, title, scored, searches, history, tunes, projections,
                  args.baseline_precision)
    if args.output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    outputs.write_text("-o", args.output, text)
    print(f"wrote {args.output} ({fmt}, {len(found)} result(s)"
          + (f", {len(scored)} accuracy row(s)" if scored and fmt in ("md", "html") else "")
          + ")", file=sys.stderr)
    return 0
