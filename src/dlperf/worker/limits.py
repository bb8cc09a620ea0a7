"""A memory limit on this worker (``dlperf capacity --memory-limit``), set before the framework
is imported: ``RLIMIT_DATA`` bounds the heap and private anonymous mappings, where host tensors
live, so an allocation beyond it fails inside the framework as out-of-memory.

Standard library only, valid Python 3.7.
"""

import os
import resource
from typing import Optional

VARIABLE = "DLPERF_MEMORY_LIMIT_BYTES"


def apply():
    # type: () -> Optional[int]
    """Set the limit the harness asked for; the limit in bytes, or None."""
    value = os.environ.get(VARIABLE, "").strip()
    if not value.isdigit():
        return None
    limit = int(value)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    return limit
