"""``python tests/caffe2_step.py CASE.json OUT_PREFIX [--data-rank R]``: build the caffe2 backend's
Workload from a case, as the worker does, run one training step and write every parameter after
it to ``OUT_PREFIX.rank<R>.npz`` (and before it to ``.before.npz``) (names without the data-parallel device scope) for
tests/backends/test_caffe2_parallel.py.

Run under ``dlperf.launchers.spawn`` (several ranks: ``data_parallel_model`` over Gloo) or alone
(one process). ``--data-rank R`` feeds one process the batch rank R of a job gets (the case's
seed + R) while the weights start from the case's seed, as every rank's do: a one-process step
on each rank's batch, whose mean is what an averaged data-parallel step must give. It calls only
``build`` and ``step``, the contract the timing loop uses. Runs in the caffe2 environment
(Python 3.7).
"""

import argparse
import json
import os

import numpy as np


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("out")
    parser.add_argument("--data-rank", type=int, default=None)
    args = parser.parse_args()
    with open(args.case) as handle:
        case = json.load(handle)
    from caffe2.python import workspace

    from dlperf.backends import caffe2
    from dlperf.backends.caffe2 import resnet
    from dlperf.data import synthetic

    workload = caffe2.BACKEND.build(case)
    scope = workload.output[:-len(resnet.LOSS)]  # "cpu_0/" under data_parallel_model, else ""
    if args.data_rank is not None:
        knobs = workload.info["knobs"]
        batch = synthetic.resnet_batch(int(case["batch_size"]), knobs["image_size"],
                                       knobs["num_classes"], int(case.get("seed", 0))
                                       + args.data_rank, channels_last=False)
        workspace.FeedBlob(scope + resnet.DATA, batch["images"],
                           device_option=workload.device)
        workspace.FeedBlob(scope + resnet.LABEL, batch["labels"],
                           device_option=workload.device)
    rank = int(os.environ.get("DLPERF_RANK", "0"))
    names = workload.param_names
    np.savez("%s.rank%d.before.npz" % (args.out, rank),
             **{name[len(scope):]: workspace.FetchBlob(name) for name in names})
    workload.loss_value(workload.step())
    np.savez("%s.rank%d.npz" % (args.out, rank),
             **{name[len(scope):]: workspace.FetchBlob(name) for name in names})


if __name__ == "__main__":
    main()
