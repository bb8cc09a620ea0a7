"""``python tests/horovod_step.py CASE.json OUT_PREFIX [--init WEIGHTS.npz]``: build the backend's
Workload from a case, as the worker does, run one training step and write the trainable weights
before and after it (``OUT_PREFIX.rank<R>.before.npz`` / ``.after.npz``) for tests/backends/test_horovod.py.

Run under horovodrun (a ``launcher: horovod`` case: the backend's Horovod path) or alone (the
single-process reference). ``--init`` loads weights, by name, over the freshly built ones before
the step, so a reference on another rank's batch (``seed`` + rank) starts from the same weights.
It calls only ``build`` and ``step``/``sync``, the contract the timing loop uses: nothing of it
is in the timed path. Runs in a framework environment (Python 3.7 for TensorFlow 1.15).
"""

import argparse
import importlib
import json
import os

import numpy as np


def tf1_variables(workload):
    import tensorflow as tf

    with workload.session.graph.as_default():
        return {v.op.name: v for v in tf.compat.v1.trainable_variables()}


def tf1_read(workload):
    variables = tf1_variables(workload)
    values = workload.session.run(list(variables.values()))
    return dict(zip(variables, values))


def tf1_write(workload, weights):
    for name, variable in tf1_variables(workload).items():
        variable.load(weights[name], workload.session)


def mx_params(workload):
    model = workload.objective.model
    return {name[len(model.prefix):]: p for name, p in model.collect_params().items()
            if p.grad_req != "null"}


def mx_read(workload):
    workload.sync()
    return {name: p.data().asnumpy() for name, p in mx_params(workload).items()}


def mx_write(workload, weights):
    for name, param in mx_params(workload).items():
        param.set_data(weights[name])


def torch_params(workload):
    model = getattr(workload.model, "_orig_mod", workload.model)  # under torch.compile
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def torch_read(workload):
    workload.sync()
    return {name: p.detach().cpu().numpy().copy() for name, p in torch_params(workload).items()}


def torch_write(workload, weights):
    import torch

    with torch.no_grad():
        for name, param in torch_params(workload).items():
            param.copy_(torch.from_numpy(weights[name]))


ACCESS = {"tensorflow1": (tf1_read, tf1_write), "mxnet": (mx_read, mx_write),
          "torch": (torch_read, torch_write)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("out")
    parser.add_argument("--init")
    args = parser.parse_args()
    with open(args.case) as handle:
        case = json.load(handle)
    rank = int(os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    backend = importlib.import_module("dlperf.backends." + case["framework"])
    workload = backend.BACKEND.build(case)
    read, write = ACCESS[case["framework"]]
    if args.init:
        with np.load(args.init) as saved:
            write(workload, dict(saved))
    np.savez("%s.rank%d.before.npz" % (args.out, rank), **read(workload))
    workload.loss_value(workload.step())
    workload.sync()
    np.savez("%s.rank%d.after.npz" % (args.out, rank), **read(workload))


if __name__ == "__main__":
    main()
