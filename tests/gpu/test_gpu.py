"""GPU tests: every CUDA path dlperf declares, run on the GPU where ``nvidia-smi -L`` lists one.

Skipped as a whole (one summary line) elsewhere. Each framework with a cuda variant is installed
the way a user does it (`dlperf envs install FW --variant cuda`) and runs every (model, task,
precision) its ``SUPPORT`` declares on cuda, in one worker process (tests/matrix_worker.py),
ResNet-50 and BERT also in the other compile mode; the ``@covers`` of these tests are what
tests/backends/test_declared_tested.py checks against the declarations on every machine. Then the paths
that are not a precision: the loop's host-synchronised window against CUDA events, NCCL data
parallelism over two GPUs, NVML columns in the timeline, DALI's GPU decode, ONNX Runtime's CUDA
(and TensorRT) int8 against fp32, and `dlperf capacity` ending at a real device out-of-memory.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import TINY_RESNET, dlperf, gpus_listed, load, tiny_dataset
from declared import covers

# a GPU's tests share it with nothing: `make test` runs them in its last phase, one at a time;
# each installs its framework's CUDA build on first use and runs a whole cuda declaration, which
# the CPU suite's ceiling (tests/ceiling.py) was not set for
pytestmark = [pytest.mark.whole_machine,
              pytest.mark.slow(reason="a CUDA install and a whole cuda declaration per test")]

if not gpus_listed():
    pytest.skip("no GPU: nvidia-smi lists none; the GPU tests in tests/gpu/ did not run",
                allow_module_level=True)

from matrix import run_matrix  # noqa: E402  (only where a GPU is)

HERE = Path(__file__).resolve().parent
TIMEOUT = 3000
BOTH_MODES = ("resnet50", "bert-base")  # trained and served compiled and not

TORCH_MODELS = ("resnet50", "resnet101", "resnet152", "vgg16", "vgg19", "alexnet", "googlenet",
                "bert-base", "gpt", "wide-deep", "face-resnet50")
TORCH_TRAIN = ("fp32", "tf32", "amp-bf16", "amp-fp16")
TORCH_INFER = TORCH_TRAIN + ("bf16", "fp16")
RESNET_BERT = ("resnet50", "bert-base")
KERAS = ("fp32", "amp-bf16", "amp-fp16", "tf32")
JAX_MODELS = ("resnet50", "bert-base", "gpt", "wide-deep")
JAX_PRECISIONS = ("fp32", "tf32", "amp-bf16", "amp-fp16")
PADDLE = ("fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16")
ORT_MODELS = ("resnet50", "resnet101", "resnet152", "vgg16", "vgg19", "alexnet", "googlenet",
              "bert-base")
ORT_PRECISIONS = ("fp32", "fp16", "bf16", "int8")
CUDA = dict(device="cuda")


@covers("torch", TORCH_MODELS, "train", TORCH_TRAIN, device="cuda")
@covers("torch", TORCH_MODELS, "infer", TORCH_INFER, device="cuda")
def test_torch_cuda_matrix(cuda_env, tmp_path):
    run_matrix(test_torch_cuda_matrix, tmp_path, cuda_env("torch"), BOTH_MODES)


@covers("tensorflow", RESNET_BERT, ("train", "infer"), KERAS, device="cuda")
def test_tensorflow_cuda_matrix(cuda_env, tmp_path):
    run_matrix(test_tensorflow_cuda_matrix, tmp_path, cuda_env("tensorflow"), BOTH_MODES)


@covers("tensorflow1", RESNET_BERT, ("train", "infer"), ("fp32", "amp-fp16"), device="cuda")
def test_tensorflow1_cuda_matrix(cuda_env, tmp_path):
    run_matrix(test_tensorflow1_cuda_matrix, tmp_path, cuda_env("tensorflow1"), BOTH_MODES)


@covers("jax", JAX_MODELS, ("train", "infer"), JAX_PRECISIONS, device="cuda")
def test_jax_cuda_matrix(cuda_env, tmp_path):
    run_matrix(test_jax_cuda_matrix, tmp_path, cuda_env("jax"), BOTH_MODES)


@covers("paddle", RESNET_BERT, ("train", "infer"), PADDLE, device="cuda")
def test_paddle_cuda_matrix(cuda_env, tmp_path):
    run_matrix(test_paddle_cuda_matrix, tmp_path, cuda_env("paddle"), BOTH_MODES)


@covers("onnxruntime", ORT_MODELS, "infer", ORT_PRECISIONS, device="cuda")
def test_onnxruntime_cuda_matrix(cuda_env, tmp_path):
    run_matrix(test_onnxruntime_cuda_matrix, tmp_path, cuda_env("onnxruntime"))


# one tiny training case of each framework's CUDA build (the whole declarations are the
# matrices above): what the short GPU check runs of the frameworks that never ran on a GPU
SMOKE = ("tensorflow", "paddle", "tensorflow1", "jax", "caffe2")


@pytest.mark.parametrize("framework", SMOKE)
def test_cuda_smoke(cuda_env, tmp_path, framework):
    cuda_env(framework)
    proc = dlperf("run", "--framework", framework, "--model", "resnet50", "--image-size", "64",
                  "--batch-size", "8", "--warmup-steps", "2", "--steps", "3", "--repeats", "1",
                  "--device", "cuda", "--db", str(tmp_path / "r.db"), "--json",
                  str(tmp_path / "r.json"), timeout=TIMEOUT)
    result = load(tmp_path / "r.json")
    if framework == "caffe2" and _capability_refusal(result):
        pytest.skip(f"caffe2's CUDA 10.2 build refuses this GPU: {result['error']}")
    assert proc.returncode == 0 and result["status"] == "ok", result.get("error")
    from dlperf.result import device_of

    assert device_of(result).startswith("cuda"), device_of(result)


def _capability_refusal(result: dict) -> bool:
    """Caffe2's CUDA 10.2 build runs GPUs up to compute capability 7.5 and refuses a newer one
    before building, naming its capability: the declared behaviour on an A100/H100."""
    return result["status"] == "unsupported" and "compute capability" in (result["error"] or "")


@covers("caffe2", "resnet50", ("train", "infer"), "fp32", device="cuda")
def test_caffe2_cuda_matrix(cuda_env, tmp_path):
    run_matrix(test_caffe2_cuda_matrix, tmp_path, cuda_env("caffe2"),
               allowed=_capability_refusal)


def run(tmp_path: Path, *args: str, command: str = "run") -> tuple[subprocess.CompletedProcess,
                                                                   dict | list]:
    out = tmp_path / "r.json"
    proc = dlperf(command, *args, "--db", str(tmp_path / "r.db"), "--json", str(out),
                  timeout=TIMEOUT)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, load(out)


def test_cuda_event_window_equals_the_host_synchronised_window(cuda_env, tmp_path):
    """The loop times its window on the host between two device synchronisations; CUDA events
    recorded on the stream around the same window agree within 2 % (ResNet-50 at 224, a window
    long enough that launch latency is noise)."""
    python = cuda_env("torch")
    proc = subprocess.run([python, str(HERE / "event_window.py")], capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["window_steps"] >= 20 and found["event_s"] > 0.5
    assert abs(found["window_s"] - found["event_s"]) <= 0.02 * found["event_s"], found


def test_two_gpu_data_parallel_over_nccl(cuda_env, tmp_path):
    if len(gpus_listed()) < 2:
        pytest.skip("data parallelism over NCCL needs two GPUs; nvidia-smi lists one")
    cuda_env("torch")
    proc, result = run(tmp_path, *TINY_RESNET, "--device", "cuda", "--devices", "2",
                       "--repeats", "1")
    assert proc.returncode == 0 and result["status"] == "ok", result.get("error")
    assert result["launch"]["processes"] == 2 and len(result["ranks"]) == 2
    assert result["global_batch"] == 4
    assert "nccl" in json.dumps(result["env"]["worker"]["framework"]).lower()


def test_collectives_over_nccl_on_two_gpus(cuda_env, tmp_path):
    """`dlperf collectives --path nccl`: torch's NCCL process group, one GPU per rank."""
    if len(gpus_listed()) < 2:
        pytest.skip("NCCL collectives need two GPUs (one per rank); nvidia-smi lists one")
    cuda_env("torch")
    from dlperf import collective_model

    db, out = tmp_path / "c.db", tmp_path / "c.json"
    proc = dlperf("collectives", "--path", "nccl", "--sizes", "4K:1M", "--iters", "5",
                  "--db", str(db), "--json", str(out), timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert load(out)["facts"]["backend"] == "nccl"
    key = collective_model.Key("torch", "nccl", "allreduce", 2)
    assert collective_model.model_for(db, key).sizes[-1] == 2 ** 20


def test_nvml_columns_in_the_timeline_are_filled(cuda_env, tmp_path):
    cuda_env("torch")
    proc, result = run(tmp_path, *TINY_RESNET, "--device", "cuda", "--repeats", "1",
                       "--min-duration", "3")
    assert proc.returncode == 0 and result["status"] == "ok", result.get("error")
    columns = result["timeline"]["median"]["columns"]
    for name in ("gpu0_util_pct", "gpu0_mem_used_bytes", "gpu0_power_w", "gpu0_sm_clock_mhz"):
        values = [v for v in columns.get(name, []) if v is not None]
        assert values, f"{name} empty: {sorted(columns)}"
    assert max(columns["gpu0_mem_used_bytes"]) > 0
    assert result["monitor"]["gpu_util_mean"] is not None
    assert result["monitor"]["gpu_mem_peak_bytes"] > 0
    # the steady step's peak: cuDNN's autotuner scratch in the first steps does not count
    assert result["memory"]["peak_device_since"] == "window"
    assert 0 < result["memory"]["peak_device_bytes"] < 2 ** 30


def test_dali_decodes_on_the_gpu(cuda_env, tmp_path):
    cuda_env("torch")  # torch's cuda lock pins DALI
    data = tiny_dataset(tmp_path, 24)
    proc, result = run(tmp_path, "--framework", "torch", "--model", "resnet50", "--image-size",
                       "32", "--num-classes", "4", "--batch-size", "4", "--warmup-steps", "1",
                       "--steps", "2", "--repeats", "1", "--device", "cuda", "--data",
                       str(data), "--loader", "dali")
    assert proc.returncode == 0 and result["status"] == "ok", result.get("error")
    assert "mixed (nvJPEG)" in json.dumps(result["data"])


def test_onnxruntime_cuda_int8_against_fp32(cuda_env, tmp_path):
    cuda_env("onnxruntime")
    proc, results = run(tmp_path, "--framework", "onnxruntime", "--model", "resnet50",
                        "--image-size", "64", "--device", "cuda", "--precision", "fp32,int8",
                        "--batch-sizes", "8", "--warmup-steps", "2", "--steps", "10",
                        "--repeats", "1", command="infer")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fp32, int8 = results
    assert (fp32["case"]["precision"], int8["case"]["precision"]) == ("fp32", "int8")
    for result in results:
        assert result["status"] == "ok", result["error"]
        providers = result["env"]["worker"]["framework"]["providers"]
        # TensorRT first where it loads, CUDA always: never the CPU provider alone
        assert {"CUDAExecutionProvider", "TensorrtExecutionProvider"} & set(providers)
    assert int8["speedup_vs_fp32"]["source"] == "this invocation"
    assert int8["speedup_vs_fp32"]["value"] > 0


def test_capacity_ends_at_a_real_device_out_of_memory(cuda_env, tmp_path):
    """ResNet-50 at 224 doubles its batch from 640 until the GPU's memory runs out: one probe
    is a device OOM (status oom, the framework's CUDA message), the answer the largest batch
    that ran. Not bisected finer than the start (test_capacity.py checks bisection): each
    probe near an 80 GB card's limit is a fresh process that autotunes cuDNN at that batch,
    and from 512 at resolution 256 the test ran past 170 s on an H100 (2026-11-27)."""
    cuda_env("torch")
    proc, answer = run(tmp_path, "--framework", "torch", "--model", "resnet50", "--device",
                       "cuda", "--warmup-steps", "1", "--steps", "2", "--param", "batch_size",
                       "--from", "640", "--resolution", "640", command="capacity")
    statuses = [p["status"] for p in answer["probes"]]
    assert "oom" in statuses and statuses[0] == "ok", answer
    assert answer["largest"] >= 640
    oom = next(p for p in answer["probes"] if p["status"] == "oom")
    assert oom["value"] > answer["largest"]
    assert "cuda" in json.dumps(oom).lower()
