"""``python tests/matrix_worker.py CASES.json OUT.json``: run many cases of one framework through
the worker's own ``run`` (``dlperf.worker.__main__.run``: the backend's ``SUPPORT.check``,
``build``, the first step, the warm-up and the timed window of ``worker/loop.py``), one after
another in this one process, and write each case's figures to OUT.json as a list.

For tests/backends/test_declared_matrix.py (and tests/gpu/): every declared (model, task, precision) of a
framework run for real, paying the framework's start-up once instead of once per case. Each
result keeps the worker's status and error, the losses, the window's step times (every
inference step is synchronised, so these are the latencies) and the backend's ``info``.
Runs in the framework's own environment (valid Python 3.7: the tensorflow1 and caffe2
environments).
"""

import json
import sys
import time


def main():
    # type: () -> None
    from dlperf.worker.__main__ import run

    with open(sys.argv[1]) as handle:
        cases = json.load(handle)
    out = []
    for case in cases:
        started = time.monotonic()
        result = run(case)
        keep = {key: result.get(key) for key in (
            "status", "error", "loss_first", "loss_last", "window_steps", "window_s",
            "latencies_s", "params", "peak_device_bytes")}
        info = result.get("info") or {}
        keep["info"] = {key: info.get(key) for key in (
            "precision", "task", "compile", "compile_mode", "device", "cast_dtype", "onnx")
            if key in info}
        keep["case"] = {key: case[key] for key in ("model", "task", "precision", "compile")}
        out.append(keep)
        print("matrix: %s %s %s -> %s in %.1f s %s" % (
            case["model"], case["task"], case["precision"], result.get("status"),
            time.monotonic() - started, result.get("error") or ""))
        sys.stdout.flush()
    with open(sys.argv[2], "w") as handle:
        json.dump(out, handle)


if __name__ == "__main__":
    main()
