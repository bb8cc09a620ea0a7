"""Number flags and fields: NaN and infinity are never a duration, a rate or a threshold.

``float("nan")`` parses, and every comparison with it is false, so a plain ``value < low`` check
lets it through; these helpers test finiteness first, so bad numbers stop at validation. And
one way to write a span of seconds (:func:`duration`), for the terminal and the reports alike.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from dlperf.errors import UsageError

MAX_SECONDS = 7 * 86400.0  # a timeout or minimum window longer than a week is a typo


def is_number(value: Any) -> bool:
    """A real, finite int or float (bool is not a number here; nor an int too large for a
    float, which JSON reads from a long run of digits)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def finite_float(text: str) -> float:
    """argparse type: a finite number; the range is the command's or the spec's to check."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def check_seconds(flag: str, value: float, low: float = 0.0, high: float = MAX_SECONDS,
                  inclusive_low: bool = False) -> float:
    """Seconds in (low, high] (or [low, high] when ``inclusive_low``), else one line."""
    above = value >= low if inclusive_low else value > low
    if not (is_number(value) and above and value <= high):
        bracket = "[" if inclusive_low else "("
        raise UsageError(f"{flag}: {value!r} must be seconds in {bracket}{low:g}, {high:g}]")
    return value


def json_safe(value: Any) -> Any:
    """``value`` with every NaN/infinity as None: JSON has no such numbers, and a file holding
    ``NaN`` breaks strict readers (jq, browsers, other languages). A NaN loss stays visible as
    null beside the failed status that explains it."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def dumps(value: Any, **options: Any) -> str:
    """Strict JSON text (``allow_nan=False``) of ``value`` made :func:`json_safe`."""
    import json

    return json.dumps(json_safe(value), allow_nan=False, **options)


def duration(seconds: float) -> str:
    """``1h05m``, ``12m30s``, ``45s``: how the terminal and the reports write a time span."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
