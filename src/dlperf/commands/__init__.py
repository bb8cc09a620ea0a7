"""One module per ``dlperf`` subcommand: ``add_parser(subparsers)`` and ``main(args) -> int``.

:data:`HELP` is the one place a command's name and one-line help are declared: ``dlperf --help``
lists them from here without importing any command's module (``dlperf.cli`` imports only the
module of the command given), and each module's ``add_parser`` reads its own line from here.
"""

#: command -> its one-line help, in the order ``dlperf --help`` lists them
HELP = {
    "run": "measure one case (fresh worker per repeat)",
    "models": "the model catalogue",
    "sysinfo": "hardware, OS, libraries, threads",
    "system": "what on this host disturbs benchmarks (show), and whether it is fit to measure "
              "now (check: exit 1 if not)",
    "results": "list stored results",
    "envs": "per-framework environments: list, install, check",
    "sweep": "run a sweep file (matrix of cases), resumable",
    "report": "tables and plots of stored results (md/html/csv/json)",
    "compare": "compare two result sets with significance tests",
    "explain": "where a profiled result's time goes; with two, why one is faster",
    "ab": "two cases alternately in fresh processes: ratio B/A with a bootstrap CI",
    "external": "wrap an external training command and parse its throughput",
    "infer": "inference: batch sweep with latency percentiles, or the server scenario",
    "accuracy": "top-1/top-5 of fp32 vs lower precisions (int8...) on real data",
    "capacity": "the largest batch size or knob value that fits (grow x2 until out of memory, "
                "then bisect), or --table: latency and memory over a range",
    "data": "make datasets for real input pipelines (run --data)",
    "history": "one case's results over time, versions or labels, with change points",
    "gate": "fail (exit 1) when the candidate is significantly slower than the baseline",
    "collectives": "all-reduce, all-gather, broadcast... over message sizes through a "
                   "framework's own collective path: time, algbw and busbw per size, stored, "
                   "and the latency-bandwidth model fitted (--show lists the models)",
    "reference": "the seed studies' published tables, with their provenance: list them, or "
                 "show one as published",
    "reproduce": "one of the studies dlperf was built from, in one command: its matrix as a "
                 "crash-safe sweep (on this machine's CPU, or at the study's own GPUs and "
                 "nodes), its tables laid out as published with the measured figures beside",
    "project": "a 1-device result projected to N devices and nodes (all-reduce model, measured "
               "overlap), with its interval; or a published table's scaling projected and "
               "compared",
    "tune": "search a framework's own settings for the fastest configuration within a budget; "
            "confirm it against the default; stored for --config best",
}
