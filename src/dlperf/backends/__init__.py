"""One package per framework, each exposing ``build(case) -> Workload``.

Backends run inside their framework's own environment, so they import only the standard
library, numpy, their framework and the stdlib-only parts of dlperf (``dlperf.models``,
``dlperf.worker.workload``). Valid Python 3.7.
"""
