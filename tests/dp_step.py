"""``python tests/dp_step.py CASE.json OUT_PREFIX [CASE.json OUT_PREFIX ...] [--init WEIGHTS.npz]``:
build the backend's Workload from a case, as the worker does, run one training step and write the
trainable weights before and after it (``OUT_PREFIX.rank<R>.before.npz`` / ``.after.npz``) for
the tests that two data-parallel ranks step as one process on both batches (tests/dp_check.py).

Run under horovodrun (a ``launcher: horovod`` case: the backend's Horovod path), under a
framework's own launcher in place of the worker (a native case on 2 devices: torchrun, MXNet's
ps-lite, TF_CONFIG for TensorFlow 2 and 1.15, JAX's coordinator, OneFlow's and Paddle's launch,
msrun, Caffe2's spawned shards; tests/dp_check.py) or alone (the single-process reference).
``--init`` loads weights, by name, over the freshly built ones before the step, so a reference
on another rank's batch (``seed`` + rank) starts from the same weights. Several CASE/OUT_PREFIX
pairs run one after another in this process (one interpreter and framework import for both
references); with ``--init``, a TensorFlow 1.15 ResNet-50 case that differs from the one before
only in ``seed`` reuses that graph (building it is most of a run's cost): every global variable
back to its initial value, the new seed's batch in the data variables, then ``--init``'s
weights, as on a fresh build. It calls only ``build``, ``step``/``sync`` and (on several ranks)
the result gather the worker ends with: the contract the timing loop uses; nothing of it is in
the timed path. Runs in a framework environment (Python 3.7 for TensorFlow 1.15).
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
    # Variable.load's feed of each initializer's value, all in one session.run: every distinct
    # run prunes ResNet-50's whole graph again (161 loads took 25 CPU-s, more than the build)
    variables = tf1_variables(workload).values()
    workload.session.run([v.initializer for v in variables],
                         {v.initializer.inputs[1]: weights[v.op.name] for v in variables})


def tf1_reseed(workload, case):
    """The built graph as a fresh build of ``case`` (its ``seed``'s batch) would start it, but for
    the trainable weights, which ``--init`` then loads: the optimizer's slots and the batch-norm
    statistics back to their initial values, the seed's synthetic batch in the data variables
    (``backend._resnet_data``'s, named as its keys)."""
    import tensorflow as tf
    from dlperf.data import synthetic

    knobs = case["knobs"]
    batch = synthetic.resnet_batch(case["batch_size"], knobs["image_size"], knobs["num_classes"],
                                   case["seed"], channels_last=True)
    with workload.session.graph.as_default():
        workload.session.run([v.initializer for v in tf.compat.v1.global_variables()])
        data = {v.op.name: v for v in tf.compat.v1.local_variables()}
        for name, value in batch.items():
            data[name].load(value, workload.session)


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
    model = getattr(model, "module", model)  # under DistributedDataParallel: the same names
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def torch_read(workload):
    workload.sync()
    return {name: p.detach().cpu().numpy().copy() for name, p in torch_params(workload).items()}


def torch_write(workload, weights):
    import torch

    with torch.no_grad():
        for name, param in torch_params(workload).items():
            param.copy_(torch.from_numpy(weights[name]))


def paddle_params(workload):
    # by position in the optimizer's list: Paddle names a parameter by a process-wide counter,
    # so the second build in one process (the reference's seed 1) has other names
    return {"p%04d" % i: p for i, p in enumerate(workload.optimizer._parameter_list)
            if not p.stop_gradient}


def paddle_read(workload):
    workload.sync()
    return {name: p.numpy().copy() for name, p in paddle_params(workload).items()}


def paddle_write(workload, weights):
    for name, param in paddle_params(workload).items():
        param.set_value(weights[name])


def tf_variables(workload):
    # by position in the build's order: Keras numbers its layers' names process-wide, so the
    # second build in one process (the reference's seed 1) has other names
    return {"v%04d" % i: v for i, v in enumerate(workload.trainable)}


def tf_read(workload):
    workload.sync()
    # a mirrored variable (MultiWorkerMirroredStrategy) reads as this worker's replica
    return {name: np.array(v.numpy()) for name, v in tf_variables(workload).items()}


def tf_write(workload, weights):
    for name, variable in tf_variables(workload).items():
        variable.assign(weights[name])


def jax_leaves(workload):
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(workload.state["params"])[0]
    return [(".".join(str(getattr(key, "key", key)) for key in path), leaf)
            for path, leaf in leaves]


def jax_read(workload):
    workload.sync()
    # replicated over the job's processes, a parameter is not wholly addressable from one of
    # them: its local copy is the whole value
    return {name: np.array(leaf.addressable_data(0)) for name, leaf in jax_leaves(workload)}


def jax_write(workload, weights):
    import jax

    treedef = jax.tree_util.tree_structure(workload.state["params"])
    params = [jax.device_put(weights[name], leaf.sharding) for name, leaf in jax_leaves(workload)]
    workload.state = dict(workload.state, params=jax.tree_util.tree_unflatten(treedef, params))


def oneflow_params(workload):
    return {name: p for name, p in workload.model.named_parameters() if p.requires_grad}


def oneflow_read(workload):
    workload.sync()
    # a global parameter (nn.Graph's data parallelism) is broadcast: its local part is all of it
    return {name: (p.to_local() if p.is_global else p).numpy().copy()
            for name, p in oneflow_params(workload).items()}


def oneflow_write(workload, weights):
    import oneflow as flow

    with flow.no_grad():
        for name, param in oneflow_params(workload).items():
            param.copy_(flow.tensor(weights[name], device=param.device))


def mindspore_params(workload):
    # by position: the second build in one process (the reference's seed 1) may name its
    # parameters apart from the first's
    return {"p%04d" % i: p for i, p in enumerate(workload.network.trainable_params())}


def mindspore_read(workload):
    workload.sync()
    return {name: p.asnumpy().copy() for name, p in mindspore_params(workload).items()}


def mindspore_write(workload, weights):
    import mindspore as ms

    for name, param in mindspore_params(workload).items():
        param.set_data(ms.Tensor(weights[name]))


def caffe2_blobs(workload):
    from dlperf.backends.caffe2 import resnet

    scope = workload.output[:-len(resnet.LOSS)]  # "cpu_0/" under data_parallel_model, else ""
    return {name[len(scope):]: name for name in workload.param_names}


def caffe2_read(workload):
    from caffe2.python import workspace

    return {name: workspace.FetchBlob(blob) for name, blob in caffe2_blobs(workload).items()}


def caffe2_write(workload, weights):
    from caffe2.python import workspace

    for name, blob in caffe2_blobs(workload).items():
        workspace.FeedBlob(blob, weights[name], device_option=workload.device)


ACCESS = {"tensorflow1": (tf1_read, tf1_write), "mxnet": (mx_read, mx_write),
          "torch": (torch_read, torch_write), "paddle": (paddle_read, paddle_write),
          "tensorflow": (tf_read, tf_write), "jax": (jax_read, jax_write),
          "oneflow": (oneflow_read, oneflow_write),
          "mindspore": (mindspore_read, mindspore_write),
          "caffe2": (caffe2_read, caffe2_write)}


def same_but_seed(a, b):
    return dict(a, seed=0) == dict(b, seed=0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("pairs", nargs="+", metavar="CASE.json OUT_PREFIX")
    parser.add_argument("--init")
    parser.add_argument("--as-ranks", action="store_true",
                        help="the Nth pair builds as rank N would (RANK=N), for an engine that "
                             "derives a rank's batch from its rank, not from seed + rank")
    args = parser.parse_args()
    if len(args.pairs) % 2:
        parser.error("CASE.json and OUT_PREFIX come in pairs")
    # the launcher's rank: horovodrun's, Open MPI's, torchrun's and spawn's, Paddle's launch's,
    # msrun's
    rank = int(next((os.environ[name] for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK",
                                                   "RANK", "PADDLE_TRAINER_ID", "RANK_ID")
                     if name in os.environ), "0"))
    workload, built = None, None
    for index, (case_path, out) in enumerate(zip(args.pairs[::2], args.pairs[1::2])):
        with open(case_path) as handle:
            case = json.load(handle)
        if args.as_ranks:
            os.environ["RANK"] = str(index)
        if args.init and case["framework"] == "tensorflow1" and case["model"] == "resnet50" \
                and built is not None and same_but_seed(built, case):
            tf1_reseed(workload, case)
        else:
            backend = importlib.import_module("dlperf.backends." + case["framework"])
            workload = backend.BACKEND.build(case)
        built = case
        read, write = ACCESS[case["framework"]]
        if args.init:
            with np.load(args.init) as saved:
                write(workload, dict(saved))
        np.savez("%s.rank%d.before.npz" % (out, rank), **read(workload))
        workload.loss_value(workload.step())
        workload.sync()
        np.savez("%s.rank%d.after.npz" % (out, rank), **read(workload))
    if int(os.environ.get("DLPERF_WORLD_SIZE", "1")) > 1 and backend.BACKEND.gather_results:
        # end as the worker ends, every rank's result gathered: a JAX rank leaves its job
        # through that gather, and one that never reached it exits 1 (backends/jax/distributed.py)
        backend.BACKEND.gather_results({"rank": rank})


if __name__ == "__main__":
    main()
