"""``python -m dlperf.worker.accuracy --request REQ.json --out OUT.json``: how right a model is.

One worker process per model: it gets (or trains, once, into the cache) the model's fp32 weights
on the training split the harness prepared, then evaluates top-1 and top-5 on the held-out split
for every (framework, precision) asked, each engine calibrating its INT8 on *training* images
only. The harness prepared the data as uint8 arrays (``{train,test}_{images,labels}.npy`` and
``meta.json`` with the per-channel mean and std), so this side needs only numpy and the
framework — no scikit-learn, no PIL.

The result goes to ``OUT.json`` (atomically), never to stdout; a cell a framework cannot do is
``unsupported`` with its reason, a cell that fails is ``crash`` with its message, and neither
stops the other cells.

Valid Python 3.7; standard library + numpy here, the framework inside its backend's module.
"""

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

from dlperf.worker.workload import UnsupportedError

TOP_K = 5
#: Evaluation engines, by framework name: the module that holds ``predict(trained, precision,
#: data, request)``.
ENGINES = {
    "torch": "dlperf.backends.torch.accuracy",
    "onnxruntime": "dlperf.backends.onnxruntime.accuracy",
}


class Split(object):
    """One split of the prepared data set: uint8 NCHW images (memory-mapped) and int labels."""

    def __init__(self, directory, name, mean, std):
        # type: (str, str, List[float], List[float]) -> None
        self.name = name
        self.images = np.load(os.path.join(directory, name + "_images.npy"), mmap_mode="r")
        self.labels = np.asarray(np.load(os.path.join(directory, name + "_labels.npy")),
                                 dtype=np.int64)
        self._scale = (1.0 / (255.0 * np.asarray(std, dtype=np.float32))).reshape(1, -1, 1, 1)
        self._shift = (np.asarray(mean, dtype=np.float32)
                       / np.asarray(std, dtype=np.float32)).reshape(1, -1, 1, 1)

    def __len__(self):
        # type: () -> int
        return int(self.labels.shape[0])

    def normalised(self, index):
        # type: (Any) -> np.ndarray
        """float32 images ``(x / 255 - mean) / std`` for ``index`` (a slice or index array)."""
        raw = np.asarray(self.images[index], dtype=np.float32)
        return raw * self._scale - self._shift

    def batches(self, batch_size, order=None, drop_last=False):
        # type: (int, Optional[np.ndarray], bool) -> Iterator[Any]
        """(images, labels) in ``order`` (default: as stored), ``batch_size`` at a time."""
        n = len(self)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            if order is None:
                index = slice(start, min(start + batch_size, n))  # type: Any
            else:
                index = order[start:start + batch_size]
            yield self.normalised(index), self.labels[index]


class Data(object):
    """The prepared data set: its training and held-out splits and what it is."""

    def __init__(self, directory):
        # type: (str) -> None
        with open(os.path.join(directory, "meta.json")) as handle:
            self.meta = json.load(handle)
        self.classes = list(self.meta["classes"])
        self.train = Split(directory, "train", self.meta["mean"], self.meta["std"])
        self.test = Split(directory, "test", self.meta["mean"], self.meta["std"])

    def calibration_indices(self, samples, seed):
        # type: (int, int) -> np.ndarray
        """Which training images INT8 calibration sees: a seeded sample, never held-out ones."""
        rng = np.random.RandomState(seed + 1)
        count = min(int(samples), len(self.train))
        return np.sort(rng.choice(len(self.train), size=count, replace=False))


def top_k(logits, k=TOP_K):
    # type: (np.ndarray, int) -> np.ndarray
    """Indices of the ``k`` largest logits per row, best first (ties: lowest index first)."""
    k = min(k, logits.shape[1])
    order = np.argsort(-logits, axis=1, kind="stable")
    return order[:, :k]


def score(predictions, labels, reference=None):
    # type: (np.ndarray, np.ndarray, Optional[np.ndarray]) -> Dict[str, Any]
    """Top-1/top-5 accuracy (in %) of ``predictions`` (N x k best-first indices).

    With ``reference`` (the fp32 predictions of the same engine): how many samples changed their
    top-1 answer, which a difference of accuracies can hide (two flips cancel out).
    """
    n = int(labels.shape[0])
    top1 = predictions[:, 0] == labels
    top5 = (predictions == labels[:, None]).any(axis=1)
    out = {"samples": n, "top1": 100.0 * float(top1.mean()) if n else None,
           "top5": 100.0 * float(top5.mean()) if n else None,
           "top5_k": int(predictions.shape[1]),
           "correct_top1": int(top1.sum()), "correct_top5": int(top5.sum())}  # type: Dict[str, Any]
    if reference is not None:
        ref1 = reference[:, 0] == labels
        out["changed_top1"] = int((predictions[:, 0] != reference[:, 0]).sum())
        out["gained_top1"] = int((top1 & ~ref1).sum())  # wrong in fp32, right here
        out["lost_top1"] = int((~top1 & ref1).sum())  # right in fp32, wrong here
    return out


def _classify(error):
    # type: (BaseException) -> str
    if isinstance(error, UnsupportedError):
        return "unsupported"
    if isinstance(error, MemoryError) or "out of memory" in str(error).lower():
        return "oom"
    return "crash"


def _failure(error):
    # type: (BaseException) -> Dict[str, Any]
    text = "%s: %s" % (type(error).__name__, str(error).strip())
    if not isinstance(error, UnsupportedError):
        traceback.print_exc()
    return {"status": _classify(error), "error": text[:2000]}


def evaluate(request, data, trained):
    # type: (Dict[str, Any], Data, Any) -> List[Dict[str, Any]]
    """Every (framework, precision) cell; fp32 of each framework first, as the reference."""
    cells = []  # type: List[Dict[str, Any]]
    labels = data.test.labels
    for framework in request["frameworks"]:
        reference = None  # type: Optional[np.ndarray]
        precisions = list(request["precisions"])
        if "fp32" in precisions:
            precisions.remove("fp32")
            precisions.insert(0, "fp32")
        try:
            engine = importlib.import_module(ENGINES[framework])
        except KeyError:
            engine = None
            missing = UnsupportedError("no accuracy engine for framework %r; engines: %s"
                                       % (framework, ", ".join(sorted(ENGINES))))
        except ImportError as error:
            engine = None
            missing = UnsupportedError("framework %s is not importable here: %s"
                                       % (framework, error))
        for precision in precisions:
            cell = {"framework": framework, "precision": precision}  # type: Dict[str, Any]
            start = time.perf_counter()
            try:
                if engine is None:
                    raise missing
                chunks = []  # type: List[np.ndarray]
                facts = {}  # type: Dict[str, Any]
                for logits in engine.predict(trained, precision, data, request, facts):
                    logits = np.asarray(logits, dtype=np.float32)
                    if not np.isfinite(logits).all():
                        raise FloatingPointError("non-finite logits from %s %s"
                                                 % (framework, precision))
                    chunks.append(top_k(logits))
                predictions = np.concatenate(chunks, axis=0)
                if precision == "fp32":
                    reference = predictions
                cell.update(score(predictions, labels,
                                  None if precision == "fp32" else reference))
                cell.update({"status": "ok", "error": None, "engine": facts})
            except Exception as error:
                cell.update(_failure(error))
            cell["seconds"] = time.perf_counter() - start
            print("accuracy: %s %s %s" % (framework, precision,
                                          cell.get("top1") if cell["status"] == "ok"
                                          else cell["status"]), file=sys.stderr)
            cells.append(cell)
    return cells


def run(request):
    # type: (Dict[str, Any]) -> Dict[str, Any]
    data = Data(request["data_dir"])
    trainer = importlib.import_module(ENGINES["torch"])
    out = {"model": request["model"], "knobs": request["knobs"],
           "data": dict(data.meta, train_samples=len(data.train), test_samples=len(data.test)),
           "python": sys.version.split()[0]}  # type: Dict[str, Any]
    try:
        trained, training = trainer.trained_model(request, data)
    except Exception as error:
        out.update(_failure(error))
        out["training"] = None
        out["cells"] = []
        return out
    out["training"] = training
    out["cells"] = evaluate(request, data, trained)
    out["status"] = "ok"
    out["error"] = None
    return out


def _write_json(path, value):
    # type: (str, Any) -> None
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(value, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)


def main(argv=None):
    # type: (Optional[List[str]]) -> int
    parser = argparse.ArgumentParser(prog="python -m dlperf.worker.accuracy")
    parser.add_argument("--request", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    with open(args.request) as handle:
        request = json.load(handle)
    _write_json(args.out, run(request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
