"""One module per ``dlperf`` subcommand: ``add_parser(subparsers)`` and ``main(args) -> int``."""
