"""Why one result beats another: profiles by category (:mod:`dlperf.worker.profile` measures
them), their differences (:mod:`.diff`), the roofline (:mod:`.roofline`) and findings in words
(:mod:`.findings`)."""
