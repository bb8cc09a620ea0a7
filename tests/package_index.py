"""Can the package index be reached? Asked once per test process, with a short timeout.

A few tests read a package index at run time (its simple pages, or a real resolution by pip).
Where the index cannot be reached — an offline machine, a firewall — they cannot say anything
about the code, so they skip with one line naming the index and the error instead of failing
after pip's or urllib's long retries. Use the mark on such a test:

    from package_index import needs_pypi

    @needs_pypi
    def test_reads_the_index(): ...

``reachable_or_skip(url)`` does the same for another index (PyTorch's CPU wheels). Every skip is
raised in the test's body from the same line here (a skip raised by a fixture would be reported at
each test's own line), so pytest's ``-ra`` summary folds them into one line per index. A marked
test carries ``needs_index`` (the index's URL), for a conftest that wants to select them.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable
from typing import Any, TypeVar
import urllib.error
import urllib.request

import pytest

PYPI = "https://pypi.org/simple/"
# PyTorch's own CPU wheel index: what `make setup TORCH_INDEX_URL=...` names off this machine
TORCH_CPU = "https://download.pytorch.org/whl/cpu/"
PROBE_TIMEOUT_S = 5.0
Test = TypeVar("Test", bound=Callable[..., Any])


def probe(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when ``url`` answers (any HTTP status below 500: the index is there), else why not,
    in one line."""
    request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "dlperf-tests"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return None
    except urllib.error.HTTPError as error:
        if error.code < 500:
            return None
        reason: object = f"HTTP {error.code}"
    except urllib.error.URLError as error:
        reason = error.reason
    except (OSError, socket.timeout) as error:  # a read that timed out after connecting
        reason = error
    text = str(reason).replace("\n", " ") or type(reason).__name__
    return f"{url} cannot be reached within {timeout_s:g} s ({text})"


@functools.lru_cache(maxsize=None)
def unreachable(url: str) -> str | None:
    """``probe(url)``, once per process: every test that needs the index shares the answer."""
    return probe(url)


def reachable_or_skip(url: str) -> None:
    """Skip the calling test, with the reason, when ``url`` cannot be reached."""
    reason = unreachable(url)
    if reason is not None:
        pytest.skip(f"needs the package index: {reason}")


def needs(url: str) -> Callable[[Test], Test]:
    """The mark of a test that reads ``url`` at run time: it runs only when ``url`` answers.
    The wrapper keeps the test's signature and marks (pytest reads them through __wrapped__)."""
    def mark(test: Test) -> Test:
        @functools.wraps(test)
        def checked(*args: Any, **kwargs: Any) -> Any:
            reachable_or_skip(url)
            return test(*args, **kwargs)
        checked.needs_index = url  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]
    return mark


# a test that reads the public index (its simple pages, or pip resolving from it)
needs_pypi = needs(PYPI)
