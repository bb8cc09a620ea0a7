"""One package per framework, each exporting its contract, ``BACKEND``
(:class:`dlperf.backends.contract.Backend`: what it runs and where its ``build(case) ->
Workload`` and other entry points live).

Backends run inside their framework's own environment, so they import only the standard
library, numpy, their framework and the stdlib-only parts of dlperf (``dlperf.models``,
``dlperf.worker``). Valid Python 3.7.
"""
