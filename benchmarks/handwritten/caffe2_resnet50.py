"""Caffe2's own ImageNet trainer (``caffe2/python/examples/imagenet_trainer.py`` in torch 1.8.1's
wheel: ResNet-50 through ``data_parallel_model`` on one CPU device) on its null input: the
reference dlperf's caffe2 backend is checked against. Not a loop written for dlperf: the
trainer's own ``Train(args)`` runs unchanged, and its own per-iteration timing (``Finished
iteration i/n of epoch 0 (X images/sec)``, ``batch / dt`` around each ``workspace.RunNet``) is
read from its log.

    python caffe2_resnet50.py BATCH IMAGE WARMUP STEPS fp32 0 [--min-seconds S]  (prints JSON)

One epoch of WARMUP + STEPS iterations (``--epoch_size`` = BATCH x that), ``--train_data null``
(a GaussianFill batch and constant labels, made once by its init net), ``--use_cpu``, one
device, lr 0.1, weight decay 1e-4, momentum 0.9 (the trainer's Nesterov: its choice, kept). It
prints {"throughput": samples/s}: the harmonic mean of its rates after WARMUP iterations (the
samples over the summed RunNet times), the same window a dlperf repeat measures.

The engine is Caffe2's CPU operators: the trainer's ``--use_ideep`` cannot build its net with this
wheel (``data_parallel_model`` adds ``CopyGPUToCPU`` ops for the accuracy blobs, which have no IDEEP
implementation), so benchmarks/fidelity.py runs dlperf with ``--option engine=cpu`` beside it. Subnormals are flushed as the backend flushes them (dlperf.worker.fpenv), before Caffe2
starts a thread. The trainer ends its epoch with ``assert loss < 40, "Exploded gradients"``; on
the null input's constant labels at lr 0.1 its loss may be NaN by then, after every timed
iteration was logged: that assertion alone is reported on stderr, not treated as a failure.

``--min-seconds S``: the epoch is made long enough for any window, and the log handler leaves it
(an exception raised out of ``log.info``, between two iterations) once at least STEPS timed
iterations have lasted S seconds in the trainer's own timing; without it the run is as above.
"""
import json
import logging
import os
import re
import shutil
import sys
import tempfile

min_seconds = 0.0
if "--min-seconds" in sys.argv:  # anywhere, default 0: the timed window lasts at least this long
    _at = sys.argv.index("--min-seconds")
    min_seconds = float(sys.argv[_at + 1])
    del sys.argv[_at:_at + 2]
batch, size, warmup, steps = (int(a) for a in sys.argv[1:5])
precision, compiled = sys.argv[5], sys.argv[6] == "1"
assert precision == "fp32", "Caffe2's trainer is measured in fp32 here (its fp16 is GPU-only)"
assert not compiled, "the trainer applies no net transform (and its --use_ideep fails here)"

from dlperf.worker import fpenv  # noqa: E402

fpenv.flush_denormals()  # as the backend does, before Caffe2 starts its threads

from caffe2.python.examples import imagenet_trainer  # noqa: E402

RATE = re.compile(r"Finished iteration (\d+)/\d+ of epoch \d+ \(([0-9.]+) images/sec\)")
rates = []


class WindowFilled(Exception):
    """--min-seconds: the timed iterations (at least STEPS) have lasted long enough."""


class Rates(logging.Handler):
    def emit(self, record):
        found = RATE.search(record.getMessage())
        if found:
            rates.append(float(found.group(2)))
            timed = rates[warmup:]
            # logged after an iteration's RunNet, outside the trainer's timing: leaving the
            # epoch here ends the window after a whole iteration (batch / rate is its time)
            if (min_seconds > 0 and len(timed) >= steps
                    and sum(batch / rate for rate in timed) >= min_seconds):
                raise WindowFilled()


imagenet_trainer.log.addHandler(Rates())
store = tempfile.mkdtemp(prefix="caffe2-trainer-")  # its rendezvous/model directory
os.chdir(store)  # it also writes an experiment log into the working directory
sys.argv = ["imagenet_trainer.py", "--train_data", "null", "--use_cpu", "--num_gpus", "1",
            "--batch_size", str(batch), "--image_size", str(size), "--num_labels", "1000",
            # with --min-seconds the epoch is long enough for any window; the handler ends it
            "--epoch_size", str(batch * (warmup + steps + (10 ** 7 if min_seconds > 0 else 0))),
            "--num_epochs", "1",
            "--base_learning_rate", "0.1", "--weight_decay", "1e-4",
            "--file_store_path", store]
try:
    imagenet_trainer.main()
except WindowFilled:
    pass
except AssertionError as error:
    if "Exploded gradients" not in str(error) or len(rates) < warmup + steps:
        raise
    print("caffe2 trainer: its end-of-epoch check failed (%s) after all %d iterations were "
          "timed" % (error, len(rates)), file=sys.stderr)
finally:
    shutil.rmtree(store, ignore_errors=True)
measured = rates[warmup:]
enough = len(measured) >= steps if min_seconds > 0 else len(measured) == steps
assert enough, "expected %d timed iterations, the trainer logged %d after %d" % (
    steps, len(measured), warmup)
print(json.dumps({"throughput": len(measured) / sum(1.0 / r for r in measured)}))
