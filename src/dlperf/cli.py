"""The ``dlperf`` command. Each subcommand lives in ``dlperf.commands.<name>`` and is a thin layer
over a library function; this module only wires them up and turns bad input into exit code 2.
``dlperf COMMAND ...`` imports that command's module alone (a command's imports reach numpy,
rich, the store...), and ``dlperf --help`` none: it lists ``commands.HELP``.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence

from dlperf import __version__
from dlperf.commands import HELP
from dlperf.errors import UsageError

COMMANDS = tuple(HELP)
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: commands whose exit 1 is a verdict a CI job acts on ("slower"): a crash there must not read
#: as one, so anything unexpected is exit 2 too
VERDICTS = ("gate", "compare")


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (no usage dump) with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)}\n")


#: what str.splitlines (and a terminal) takes for a line break, written as its escape
LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(message: object) -> str:
    """An error stays one line even when the value it quotes holds a line break."""
    return str(message).translate(LINE_BREAKS)


def build_parser(only: str | None = None) -> Parser:
    """Every command's parser; with ``only``, that command's alone ("": none), the others
    stand-ins that ``--help`` lists (name and help from ``commands.HELP``) without importing
    their modules."""
    parser = Parser(prog="dlperf", description="Trustworthy deep-learning framework benchmarks.")
    parser.add_argument("--version", action="version", version=f"dlperf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in COMMANDS:
        if only is not None and name != only:
            sub.add_parser(name, help=HELP[name])
            continue
        module = importlib.import_module(f"dlperf.commands.{name}")
        command = module.add_parser(sub)
        command.set_defaults(handler=module.main)
    return parser


def chosen(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (``dlperf`` itself takes
    none with a value), when that is a command; None for ``--help``, ``--version`` or a typo."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in HELP else None


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (kill, scancel, a closed terminal): stopped like Ctrl-C, so what was
    measured is stored and marked interrupted."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_received: list[int] = []  # the terminating signal, even if a command re-raises plain Ctrl-C


def _terminate(signum: int, frame: object) -> None:
    _received.append(signum)
    raise Terminated(signum)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    # nothing chosen: every command a stand-in (``--help`` lists them; a typo is refused by name)
    args = build_parser(chosen(words) or "").parse_args(words)
    # bad input from the case or the store: imported once a command is chosen (they reach numpy),
    # so that `--help` and a typo cost neither
    from dlperf.spec import SpecError
    from dlperf.store import StoreError

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _terminate)
    try:
        return int(args.handler(args) or 0)
    except (UsageError, SpecError, StoreError) as error:
        print(f"dlperf {args.command}: error: {one_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:
        if args.command not in VERDICTS:
            raise
        print(f"dlperf {args.command}: internal error, not a verdict: {type(error).__name__}: "
              f"{one_line(error)[:300]} (a bug in dlperf: please report it with the command "
              f"line)", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if _received:  # SIGTERM -> 143, SIGHUP -> 129, as a shell reports them
            print(f"dlperf: stopped by {signal.Signals(_received[0]).name}", file=sys.stderr)
            return 128 + _received[0]
        print("dlperf: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
