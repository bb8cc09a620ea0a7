"""A declared refusal checked in this process, for the combinations whose ``dlperf run`` path
another test already runs for real (a worker that refuses, ``unsupported``, exit 1, no retry):
the case `dlperf run FLAGS` builds with its own parser, given to the backend's ``SUPPORT`` as
the worker's check gives it (``dlperf.worker.__main__.run``: ``SUPPORT.check(case, device)``,
before anything is built). No framework is imported: the declaration is plain data."""

from __future__ import annotations

import argparse

from dlperf.commands import _flags, run
from dlperf.spec import support


def declared_refusal(*flags: str, device: str = "cpu") -> str | None:
    """Why the backend refuses the case of ``dlperf run FLAGS`` on ``device``, or None."""
    parser = argparse.ArgumentParser()
    run.add_parser(parser.add_subparsers(dest="command"))
    (case,) = _flags.cases_from_args(parser.parse_args(["run", *flags]))
    return support(case.framework).refusal(case.to_dict(), device)
