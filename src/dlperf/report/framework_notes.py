"""Footnotes on deliberate choices of a framework's workload, in one place.

Where dlperf's workload for a framework differs on purpose from what many users of that
framework run (and the difference costs or saves time), the report says so under every table
that lists that framework's results of the task concerned, so a reader never mistakes the
choice for the framework's speed. Each note names the page that measured it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: (framework, task) -> the note shown wherever the report lists such results
NOTES: dict[tuple[str, str], str] = {
    ("tensorflow", "train"):
        "tensorflow's weight decay is an L2 term summed in the step (tf.nn.l2_loss over all "
        "variables), not Keras per-layer regularizers; Model Garden-style loops pay ~4 % for "
        "the regularizers' bookkeeping (docs/fidelity.md)",
}


def texts(framework: str, results: Iterable[dict[str, Any]]) -> list[str]:
    """The notes that apply to ``framework``'s rows made of ``results``."""
    tasks = {(result.get("case") or {}).get("task") or "train" for result in results}
    return [NOTES[(framework, task)] for task in sorted(tasks) if (framework, task) in NOTES]
