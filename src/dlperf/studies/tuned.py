"""A case in the configuration a finished ``dlperf tune`` found: ``dlperf run --config best``
and a sweep's ``config: best``.

The case itself stays what it is (its settings are ordinary case fields, so the tuned case has
its own identity and is compared, resumed and reported like any other); where its settings came
from is a marker on its result, ``result["config"]``: the study, which of its bests, the
database it was read from and the settings applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlperf.errors import UsageError
from dlperf.spec import Case
from dlperf.store import Store
from dlperf.tune import settings as config
from dlperf.tune import stored

WHICH = stored.WHICH  # best, best-fixed


@dataclass(frozen=True)
class Tuned:
    """The tuned case, the marker its result carries and the line that says what was applied."""

    case: Case
    marker: dict[str, Any]
    line: str


def _fixed_check(case: Case, settings: dict[str, Any], flag: str, which: str) -> None:
    """``best-fixed`` keeps the case's own batch size and precision: a tune whose default ran at
    another one only knows the best at *its* batch and precision, so that is refused."""
    own = config.of_case(case, list(settings))
    moved = config.changes_math(settings, own)
    if moved:
        theirs = config.describe({name: settings[name] for name in moved})
        ours = config.describe({name: own[name] for name in moved})
        raise UsageError(f"{flag} {which}: the tune's default ran at {theirs}, this case at "
                         f"{ours}; its best at fixed batch size and precision is known only at "
                         f"{theirs}: ask for that, or for {flag} best")


def from_store(store: Store, case: Case, which: str, flag: str = "--config") -> Tuned:
    """``case`` in the configuration the newest finished tune of it in ``store`` found; one line
    (UsageError) naming what is missing otherwise."""
    study, chosen = stored.chosen_best(store, case, which, flag)
    settings = dict(chosen["settings"])
    # refuses settings the backend no longer takes
    tuned_case = config.apply_or_refuse(case, settings, f"{flag} {which}")
    if which == "best-fixed":
        _fixed_check(case, settings, flag, which)
    here = config.of_case(case, list(settings))
    changed = config.changed(settings, here)
    found = chosen.get("ab") or {}
    marker = {"from": "tune", "study": study.get("study"), "which": which,
              "db": str(store.path), "settings": dict(settings),
              "changed": changed,
              "changes_math": list(chosen.get("changes_math") or []),
              "trial": chosen.get("trial"),
              "search_throughput": chosen.get("throughput"),
              "speedup": found.get("ratio"), "speedup_ci95": found.get("ci95")}
    line = (f"{flag} {which}: {config.describe(settings)} (study {study.get('study')} in "
            f"{store.path}, finished {study.get('finished_at') or '?'}; "
            + (f"in place of the case's own {config.describe({k: here[k] for k in changed})})"
               if changed else "the case as given already has these settings)"))
    return Tuned(tuned_case, marker, line)


def from_db(path: str | Path, case: Case, which: str, flag: str = "--config") -> Tuned:
    """:func:`from_store` reading the results file ``path`` (never created nor written)."""
    path = Path(path)
    if which not in WHICH:
        raise UsageError(f"{flag}: {which!r} is not one of {', '.join(WHICH)}")
    if not path.is_file():
        raise UsageError(f"{flag} {which}: {path} does not exist; run "
                         f"`{stored.tune_command(case, path)}` first")
    with Store(path, readonly=True) as store:
        return from_store(store, case, which, flag)


def mark(result: dict[str, Any], marker: dict[str, Any], store: Store | None) -> None:
    """Put ``marker`` on ``result`` as ``config`` and store it again with it."""
    result["config"] = marker
    if store is not None and result.get("run_id") is not None:
        store.finish_run(int(result["run_id"]), result)


def label(marker: dict[str, Any] | None) -> str:
    """``config best`` (``best-fixed``) for a report's variant, or ""."""
    if not marker:
        return ""
    return f"config {marker.get('which') or '?'}"
