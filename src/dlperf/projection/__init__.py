"""Projecting a data-parallel case beyond the devices measured: `dlperf project`'s model, its
terms, its checks and their errors, in docs/projection.md.

- :mod:`dlperf.projection.links`: the links (given, or read from a measured collective model)
  and what each collective algorithm costs on them;
- :mod:`dlperf.projection.overlap`: the all-reduce the backward pass hides and the multi-process
  overhead, as multi-process results show them;
- :mod:`dlperf.projection.model`: the projection itself, from its inputs to its points, as
  stored and shown;
- :mod:`dlperf.projection.span`: a projected figure with its interval;
- :mod:`dlperf.projection.error`: the model's own error, as its validations measured it.

Nothing is imported here: each importer names the module it takes from.
"""
