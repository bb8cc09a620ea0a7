"""``dlperf tune``: each framework at its best.

A cross-framework table at default settings compares frameworks *and* how well their defaults
suit the machine. ``tune`` searches each framework's own declared settings (its backend's
``SUPPORT``: precision, compile mode, options such as the memory layout, and the host's threads,
allocator and batch size), screening with short runs, keeping the promising ones by successive
halving, and confirming the winner against the default with an interleaved ``ab``; every trial
is measured by dlperf's own timing loop and stored.

* :mod:`.knobs` — the search space a backend declares, each knob with why it may help.
* :mod:`.settings` — one configuration: applied to a case, described, compared with another.
* :mod:`.stored` — trials and outcomes in the results database; what ``--config best`` reads.
* :mod:`.budget` — the time bound: parsing, what is left, what a trial will cost.
* :mod:`.search` — the search itself (Optuna's sampler and successive-halving pruner).
"""
