"""The links of `dlperf project` (``--intra``, ``--inter``): a stored collective model measured
by `dlperf collectives` (``measured[:LINK]``), or a rate and latency given (``RATE@LATENCY``)."""

from __future__ import annotations

import argparse

from dlperf import collective_model
from dlperf.errors import UsageError
from dlperf.projection.links import Link, carrying, given_link, link_of_model
from dlperf.worker.support import RING_WIRE, Wire

MEASURED = "measured"


def measured_link(db: str, framework: str, inter: bool, link: str | None,
                  message_bytes: float | None = None,
                  transfer_bytes: float | None = None) -> Link:
    """The newest stored all-reduce model of ``framework``'s default collective path (a
    parameter server's push and pull where that path has no all-reduce: MXNet's kvstore), on one
    host (``inter`` False) or across nodes over ``link``; one line naming the command when
    none. ``message_bytes``: the size of each of the step's messages, where the engine's
    packing makes them one size: the model is then fitted over the measured sizes near it
    (:meth:`dlperf.collective_model.Model.near`). ``transfer_bytes``: what a step moves as
    one transfer (that message, else the whole gradient), where its calls' spread is read."""
    from dlperf.studies import collectives as study

    found_path = study.path_named(framework, None)
    path = found_path.name
    op = "allreduce" if "allreduce" in found_path.ops else "pushpull"
    key = collective_model.Key(framework, path, op, 2 if not inter else 1,
                               2 if inter else 1, link if inter else None)

    def wanted(found: collective_model.Key) -> bool:
        return ((found.framework, found.path, found.op) == (framework, path, op)
                and (found.nnodes > 1) == inter and found.ranks >= 2
                and (not inter or found.link == link))

    try:
        model = collective_model.newest_matching(db, wanted, key)
    except collective_model.NoModel:
        flag = "--inter" if inter else "--intra"
        raise UsageError(f"{flag}: no collective model of {framework} {path} {op} "
                         f"{'across nodes' + (f' over {link}' if link else '') if inter else 'on one host'} "
                         f"in {db}: measure it with `{key.command(db)}`, or give RATE@LATENCY") from None
    if message_bytes is not None and op == "allreduce":
        model = model.near(message_bytes)
    return link_of_model(model, transfer_bytes or message_bytes)


def is_measured(spec: str | None) -> bool:
    """Whether a link is ``measured`` or ``measured:LINK`` (a stored model, not a rate)."""
    return spec is not None and spec.partition(":")[0].strip() == MEASURED


def check_links(args: argparse.Namespace) -> None:
    """``--intra`` and ``--inter`` that do not parse are refused before any stored model is
    looked up, so that the refusal names them whatever else is missing (``--intra`` defaults
    to a measured model)."""
    from dlperf.host import emulated

    for given, flag in ((args.intra, "--intra"), (args.inter, "--inter")):
        if given is None:
            continue
        rate = given.partition(":")[2]
        if not is_measured(given):
            given_link(given, flag)
        elif rate:
            emulated.normalize_rate(rate, flag)


def link_spec(spec: str | None, flag: str, db: str, framework: str,
              wire: Wire = RING_WIRE, message_bytes: float | None = None,
              transfer_bytes: float | None = None) -> Link | None:
    """``--intra``/``--inter``: a measured model of ``framework``'s path, or a given rate, which
    carries the engine's bytes on the wire (``wire``: its declaration)."""
    if spec is None:
        return None
    link = spec.partition(":")[2]
    if is_measured(spec):
        from dlperf.host import emulated

        return measured_link(db, framework, flag == "--inter",
                             emulated.normalize_rate(link, flag) or None if link else None,
                             message_bytes, transfer_bytes)
    return carrying(given_link(spec, flag), wire.share,
                    wire.describe())
