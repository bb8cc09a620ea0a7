"""`dlperf COMMAND` imports that command's module alone, and `dlperf --help` none of them (its list
comes from ``dlperf.commands.HELP``, the one place each command's one-line help is declared)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import pytest

from dlperf import cli
from dlperf.commands import HELP

# starts no framework and measures nothing: `make test` runs it beside another
pytestmark = pytest.mark.parallel

PROBE = """
import json, sys
from dlperf import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as done:
    code = done.code
print(json.dumps([code, sorted(m for m in sys.modules if m.startswith("dlperf."))]))
"""


def imported(*argv: str) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                          check=True)
    code, modules = json.loads(done.stdout.splitlines()[-1])
    return code, modules


def commands_in(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith("dlperf.commands.")]


def test_help_imports_no_command_and_lists_every_one(capsys):
    code, modules = imported("--help")
    assert code == 0 and commands_in(modules) == [], modules
    assert "dlperf.spec" not in modules and "dlperf.store" not in modules
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = capsys.readouterr().out
    for name in HELP:  # a name over 9 characters has its help on the next line (argparse)
        assert re.search(rf"^    {name}\s", listed, re.M), name


def test_a_command_imports_its_own_module_alone(tmp_path):
    code, modules = imported("results", "--db", str(tmp_path / "none.db"))
    assert code == cli.EXIT_USAGE  # no such database: one line, exit 2, as before
    assert [m for m in commands_in(modules) if not m.startswith("dlperf.commands._")] == [
        "dlperf.commands.results"], modules


def test_a_typo_imports_no_command_and_is_refused_by_name():
    code, modules = imported("nope")
    assert code == cli.EXIT_USAGE and commands_in(modules) == []


def test_the_whole_parser_has_every_command_with_its_help_from_the_table():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert [(a.dest, a.help) for a in sub._choices_actions] == list(HELP.items())
