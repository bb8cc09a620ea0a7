"""The backend choices issue 32 made so each framework runs as its own users write it
(docs/fidelity.md): each checked where it lives, with the real framework, on tiny shapes.

- torch: the layout of a convolutional network is a case option (``memory_format``), recorded
  with what chose it, and refused for a model it does not apply to;
- MXNet: ResNet-50's ReLUs are MXNet's oneDNN ``Activation`` operator, never its own ``relu``;
- MindSpore: the stem's explicit zero pad + valid max pool gives exactly the padded pool's
  maxima on the non-negative values it receives;
- JAX: the training state is donated only where it pays (tests/backends/test_env_jax_paddle.py reads
  ``buffer_donation`` in a real run).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import TINY_RESNET, dlperf, pinned_env

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _in_env(framework: str, code: str) -> str:
    """``code`` run by the framework environment's interpreter, dlperf's sources importable;
    its last stdout line."""
    proc = subprocess.run([pinned_env(framework), "-c", code], capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": SRC, "OMP_NUM_THREADS": "1",
                                            "GLOG_minloglevel": "3", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_torch_memory_format_is_an_option_recorded_with_its_source(tmp_path):
    out = tmp_path / "r.json"
    proc = dlperf("run", *TINY_RESNET, "--repeats", "1", "--option", "memory_format=contiguous",
                  "--db", str(tmp_path / "r.db"), "--json", str(out))
    result = json.loads(out.read_text())
    assert proc.returncode == 0 and result["status"] == "ok", result.get("error")
    info = result["env"]["worker"]["framework"]
    assert info["memory_format"] == "contiguous"
    assert info["memory_format_set_by"] == "the case's option memory_format"

    # a model without convolutions refuses it, naming the models it applies to
    out = tmp_path / "bert.json"
    dlperf("run", "--framework", "torch", "--model", "bert-base", "--seq-len", "8",
           "--batch-size", "2", "--knob", "layers=1", "--knob", "hidden=32", "--knob", "heads=2",
           "--knob", "intermediate=64", "--knob", "vocab_size=200", "--warmup-steps", "1",
           "--steps", "2", "--repeats", "1", "--option", "memory_format=channels_last",
           "--db", str(tmp_path / "r.db"), "--json", str(out))
    refused = json.loads(out.read_text())
    assert refused["status"] == "unsupported"
    assert "option memory_format=channels_last: bert-base is not a convolutional network" \
        in refused["error"] and "resnet50" in refused["error"]


@pytest.mark.parallel
def test_torch_default_memory_format_per_device_kind():
    from dlperf.backends.torch import SUPPORT

    # the default is declared for every device kind the backend runs on, and is an allowed value
    from dlperf.backends.torch.backend import DEFAULT_MEMORY_FORMAT

    assert set(DEFAULT_MEMORY_FORMAT) == set(SUPPORT.precisions)
    assert set(DEFAULT_MEMORY_FORMAT.values()) <= set(SUPPORT.options["memory_format"].values)


def test_mxnet_resnet50_relus_are_onednn_activations():
    counts = json.loads(_in_env("mxnet", """
import collections, json
import mxnet as mx
from dlperf.backends.mxnet.resnet import ResNet50
net = ResNet50(10)
net.initialize()
net.hybridize()
net(mx.nd.zeros((2, 3, 32, 32)))
graph = json.loads(net._cached_graph[1].tojson())
print(json.dumps(collections.Counter(node["op"] for node in graph["nodes"])))
"""))
    assert counts.get("relu", 0) == 0
    assert counts["Activation"] == 49  # the stem's and three per bottleneck (16 blocks)


def test_mindspore_zero_pad_then_valid_pool_is_the_padded_pool():
    line = _in_env("mindspore", """
import numpy as np, mindspore as ms
from mindspore import nn
from dlperf.backends.mindspore.resnet import _PaddedMaxPool
rng = np.random.default_rng(0)
for shape in ((2, 4, 17, 16), (1, 3, 8, 9)):
    x = ms.Tensor(np.maximum(rng.standard_normal(shape), 0).astype(np.float32))
    ours = _PaddedMaxPool()(x).asnumpy()
    padded = nn.MaxPool2d(3, 2, pad_mode="pad", padding=1)(x).asnumpy()
    assert ours.shape == padded.shape, (ours.shape, padded.shape)
    assert float(np.abs(ours - padded).max()) == 0.0
print("same")
""")
    assert line == "same"
