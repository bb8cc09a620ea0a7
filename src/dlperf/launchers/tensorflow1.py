"""Multi-process and multi-node TensorFlow 1.15 cases (harness side): the same launch as
TensorFlow 2's (:mod:`dlperf.launchers.tensorflow`): dlperf.launchers.spawn starts the workers, the
backend writes TF_CONFIG from their variables and runs the collective all-reduce strategy in
graph mode (:mod:`.distribute`); one process per node on GPUs.
"""

from __future__ import annotations

from dlperf.launchers.tensorflow import TFConfigLauncher


class TF1ConfigLauncher(TFConfigLauncher):
    """The launcher for tensorflow1 cases with devices x nnodes > 1."""

    name = "dlperf.launchers.spawn (TF_CONFIG, TF 1.15)"
    strategies = ("tf.distribute.experimental.MultiWorkerMirroredStrategy "
                  "(CollectiveAllReduceStrategy, graph mode)",
                  "tf.distribute.MirroredStrategy (graph mode)")
