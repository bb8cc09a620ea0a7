"""A case's results over time, versions or labels: the series (:mod:`.series`), its change
points (:mod:`.changepoints`), and the commands that reproduce a stored case (:mod:`.reproduce`).
``dlperf history`` and ``dlperf gate`` are built on these."""
