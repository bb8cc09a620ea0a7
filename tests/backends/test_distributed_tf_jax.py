"""Data-parallel TensorFlow 2, TensorFlow 1.15 and JAX through their own documented paths
(MultiWorkerMirroredStrategy from TF_CONFIG, the collective all-reduce strategy in graph mode,
jax.distributed + shard_map), started by dlperf.launchers.spawn: real environments, real `dlperf`
subprocesses, tiny shapes.

Per framework: 2 processes to ``ok`` with both ranks' figures and a speedup over a 1-process
baseline in the same database; a failing rank whose own message is the result; a node whose
peers never come -> ``timeout``. JAX and TensorFlow 2 also run as two `dlperf run` "nodes" on
127.0.0.1. Each engine's two ranks step as one process on both batches (tests/dp_check.py).
Every test leaves a marker variable in the environment of what it starts and checks at the end
that no process carrying it is still alive.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import VOTE_MAX_STEPS, check_voted_warmup, dlperf_main, load, pinned_env
from dp_check import check_native_engine
from dlperf.launchers import launch, registry
from dlperf import envs, runner
from dlperf.launchers import jax as jax_launch
from dlperf.backends.tensorflow import cluster
from dlperf.launchers import tensorflow as tf_launch
from dlperf.launchers import tensorflow1 as tf1_launch
from dlperf.spec import Case

# multi-process jobs, a rank per core, and their speedup over one (as computed, never
# its size).
# spans_cores: in `make test`'s framework phase it gets every CPU back (tests/conftest.py)
pytestmark = pytest.mark.spans_cores

FRAMEWORKS = ("jax", "tensorflow", "tensorflow1")
TINY = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--warmup-steps", "1",
        "--steps", "2", "--device", "cpu"]
# a 1-layer BERT, 32 wide, with a 128-word vocabulary and 8-token sequences: built, traced and
# compiled in a fraction of ResNet-50's time, which dominated these runs (JAX's single-process
# run 19.8 -> 8.2 s against the 2-layer, 64-wide one); ranks, all-reduce and speedup are the same
TINY_BERT_KNOBS = {"seq_len": 8, "layers": 1, "hidden": 32, "heads": 2, "intermediate": 64,
                   "vocab_size": 128}
TINY_BERT = ["--model", "bert-base",
             *[flag for name, value in TINY_BERT_KNOBS.items()
               for flag in ("--knob", f"{name}={value}")],
             "--batch-size", "2", "--warmup-steps", "1", "--steps", "2", "--device", "cpu"]
LAUNCHERS = {"jax": "dlperf.launchers.spawn (jax.distributed)", "tensorflow": "dlperf.launchers.spawn (TF_CONFIG)",
             "tensorflow1": "dlperf.launchers.spawn (TF_CONFIG, TF 1.15)"}
DATA_PARALLEL = {"jax": "jax.shard_map over 2 devices of 2 processes",
                 "tensorflow": "tf.distribute.MultiWorkerMirroredStrategy over 2 workers",
                 "tensorflow1": "CollectiveAllReduceStrategy (MultiWorkerMirroredStrategy) over "
                                "2 workers"}


def check_two_ranks(result: dict, samples_per_rank: int) -> None:
    """Both ranks' figures, each with its own all-reduce probe; the job's throughput is the
    global samples over the slowest rank's window."""
    ranks = result["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(s > 0 for r in ranks for s in r["allreduce_s"]), ranks
    for i, job in enumerate(result["throughput"]["repeats"]):
        samples = sum(r["throughput"][i] * r["window_s"][i] for r in ranks)
        assert samples == pytest.approx(2 * samples_per_rank)
        assert job == pytest.approx(samples / max(r["window_s"][i] for r in ranks))
    assert result["global_batch"] == 4  # batch 2 per device x 2 devices


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_two_processes_and_speedup_over_one(framework, tmp_path, tagged):
    db = str(tmp_path / "r.db")
    # tiny BERT, not ResNet-50: what is asserted does not depend on the model (the failing-rank
    # test below still builds ResNet-50 under each framework's data-parallel launcher)
    common = ["--framework", framework, *TINY_BERT, "--db", db, "--repeats", "1"]
    # the harness through dlperf_main in this process (its worker and ranks are still fresh
    # processes): the harness process itself is not what is checked
    dlperf_main("run", *common, "--json", str(tmp_path / "one.json"), check=True, timeout=600)
    # the ranks warm up until they agree (the baseline's fixed warm-up still matches it)
    proc = dlperf_main("run", *common, "--devices", "2", "--warmup-steps", "auto",
                       "--warmup-max-steps", str(VOTE_MAX_STEPS),
                       "--json", str(tmp_path / "two.json"), check=True, timeout=600)
    one, two = load(tmp_path / "one.json"), load(tmp_path / "two.json")
    assert two["status"] == "ok" and two["case"]["devices"] == 2
    check_two_ranks(two, samples_per_rank=2 * 2)  # batch 2 x 2 measured steps
    check_voted_warmup(two, db, max_steps=VOTE_MAX_STEPS)
    assert one["speedup"] == 1.0 and len(one["ranks"]) == 1
    assert two["speedup"] == pytest.approx(two["throughput"]["median"]
                                           / one["throughput"]["median"])
    assert two["speedup_baseline"]["run_id"] == one["run_id"]
    assert "scaling efficiency" in proc.stdout
    assert two["model"]["params"] == two["model"]["catalogue_params"]
    assert two["launch"]["launcher"] == LAUNCHERS[framework]
    threads = max(1, launch.usable_cores() // 2)  # the node's cores divided between 2 processes
    assert two["launch"]["threads_per_process"] == threads
    assert [r["threads"] for r in two["ranks"]] == [threads, threads]  # as the framework says
    info = two["env"]["worker"]["framework"]
    assert info["world_size"] == 2 and info["rank"] == 0  # the framework's own count
    assert info["data_parallel"].startswith(DATA_PARALLEL[framework])


# rank 1 alone fails, each its own way: JAX joins the job and loads the backend, then runs under
# an address-space limit 64 MiB above what it holds, so ResNet-50's 100 MB of weights cannot be
# made; the TensorFlow ranks are given batch 1, which at 32x32 leaves BatchNorm one value per
# channel
FAILING_RANK = """\
import importlib, json, os, resource, runpy, sys
if os.environ["RANK"] == "1":
    if os.environ["FRAMEWORK"] == "jax":
        importlib.import_module("dlperf.backends.jax").BACKEND.resolve_device("cpu")
        importlib.import_module("dlperf.backends.jax.backend")
        with open("/proc/self/status") as status:
            vm = [int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize")][0]
        resource.setrlimit(resource.RLIMIT_AS, (vm + 64 * 2 ** 20, vm + 64 * 2 ** 20))
    else:
        at = sys.argv.index("--case") + 1
        with open(sys.argv[at]) as handle:
            case = json.load(handle)
        case["batch_size"] = 1
        sys.argv[at] += ".rank1"
        with open(sys.argv[at], "w") as handle:
            json.dump(case, handle)
sys.argv = ["dlperf.worker"] + sys.argv[1:]
runpy.run_module("dlperf.worker", run_name="__main__", alter_sys=True)
"""
OWN_ERROR = {
    "jax": ("oom", "rank 1: MemoryError: Unable to allocate"),
    "tensorflow": ("unsupported", "rank 1: UnsupportedError: resnet50 training at image_size 32 "
                                  "ends at 1x1, so batch 1 gives BatchNorm a single value"),
    "tensorflow1": ("unsupported", "rank 1: UnsupportedError: resnet50 training at image_size 32 "
                                   "ends at 1x1, so batch 1 gives BatchNorm a single value"),
}


def ranks_running(script, case: Case):
    """The case's own launcher, with every rank running ``script`` instead of ``-m
    dlperf.worker`` (same arguments)."""
    inner = registry.launcher_for(case)

    def launcher(case, case_file, out_dir):
        spec = inner(case, case_file, out_dir)
        at = spec.argv.index("dlperf.worker")
        spec.argv[at - 1:at + 1] = [str(script)]
        return spec

    return launcher


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_failing_rank_shows_its_own_message(framework, tmp_path, tagged, monkeypatch):
    script = tmp_path / "failing_rank.py"
    script.write_text(FAILING_RANK)
    monkeypatch.setenv("FRAMEWORK", framework)
    case = Case(framework=framework, model="resnet50", batch_size=2, repeats=2, warmup_steps=1,
                steps=2, knobs={"image_size": 32}, device="cpu", devices=2, timeout_s=300)
    result = runner.run_case(case, launcher=ranks_running(script, case))
    status, message = OWN_ERROR[framework]
    assert result["status"] == status, result["error"]
    assert result["error"].startswith(message), result["error"]
    assert result["repeats_done"] == 1


def rank_1_late(backend: str, seconds: int, rdzv_timeout_s: int | None = None) -> str:
    """A script for every rank: the real worker of ``backend``, with rank 1's build returning
    ``seconds`` after its peer's (and each rank's --rdzv-timeout ``rdzv_timeout_s`` where given)."""
    deadline = (f'os.environ["DLPERF_RDZV_TIMEOUT_S"] = "{rdzv_timeout_s}"\n'
                if rdzv_timeout_s else "")
    return f"""\
import os, runpy, time
{deadline}from dlperf.backends.{backend} import backend
build = backend.build
def late_build(case):
    workload = build(case)
    if os.environ["DLPERF_RANK"] == "1":
        time.sleep({seconds})
    return workload
backend.build = late_build
runpy.run_module("dlperf.worker", run_name="__main__", alter_sys=True)
"""


# rank 1's build done 35 s after its peer's: a rank that compiles its step on a loaded host
# reaches the first all-reduce that much later
LATE_RANK = rank_1_late("jax", 35)


def test_a_jax_rank_late_to_its_first_step_is_waited_for(tmp_path, tagged):
    """JAX's gloo waits only 30 s for the peers of the collective that forms its context: the
    backend forms it when the processes join (jax/distributed.py), so a rank whose first step
    comes 35 s after its peer's is waited for instead of failing the job with "Gloo context
    initialization failed"."""
    script = tmp_path / "late_rank.py"
    script.write_text(LATE_RANK)
    # tiny BERT: what is waited for is the first all-reduce, whatever the model
    case = Case(framework="jax", model="bert-base", batch_size=2, repeats=1, warmup_steps=1,
                steps=2, knobs=TINY_BERT_KNOBS, device="cpu", devices=2, timeout_s=300)
    result = runner.run_case(case, launcher=ranks_running(script, case))
    assert result["status"] == "ok", result["error"]
    ranks = result["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    # rank 0 waited for its peer in the first step, rank 1 in its build
    assert ranks[0]["first_step_s"][0] > 30 and ranks[1]["build_s"][0] > 35, ranks


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_two_ranks_step_as_one_process_on_both_batches(framework, tmp_path, tagged):
    """Each native engine (TensorFlow 2's MultiWorkerMirroredStrategy, TensorFlow 1.15's
    collective all-reduce strategy in graph mode, JAX's shard_map over jax.distributed), both
    ranks as `dlperf run --devices 2` starts them (TF_CONFIG, the coordinator and all): one step
    of two ranks fed different batches averages their gradients (tests/dp_check.py, the check
    torch's DDP, MXNet's kvstore, Paddle's DataParallel and Horovod's paths pass)."""
    check_native_engine(framework, pinned_env(framework), tmp_path)


# rank 1 of TensorFlow 1.15 never reaching its first step (as one rank of a
# job stalled once across two emulated hosts, 2026-12-01: the broadcast done, no all-reduce)
STALLED_TF1_RANK = rank_1_late("tensorflow1", 600, rdzv_timeout_s=10)


def test_a_tensorflow1_first_step_its_peer_never_reaches_times_out(tmp_path, tagged):
    """TF 1.15's collectives have no timeout of their own: the first step's all-reduce waits
    for every worker as the initialiser's broadcast does, and like it ends at --rdzv-timeout
    (here 10 s, the rank's own) with a rendezvous timeout that names it, not at the repeat's
    --timeout (300 s)."""
    script = tmp_path / "stalled_rank.py"
    script.write_text(STALLED_TF1_RANK)
    case = Case(framework="tensorflow1", model="bert-base", batch_size=2, repeats=2,
                warmup_steps=1, steps=2, knobs=TINY_BERT_KNOBS, device="cpu", devices=2,
                timeout_s=300)
    result = runner.run_case(case, launcher=ranks_running(script, case))
    assert result["status"] == "timeout", result["error"]
    assert result["error"].startswith("rendezvous timed out after "), result["error"]
    assert ("the workers met at 127.0.0.1:" in result["error"]
            and cluster.FIRST_STEP_STALLED in result["error"]), result["error"]
    assert result["repeats_done"] == 1


# both ranks form the TensorFlow 2 cluster, then rank 1 fails and rank 0 waits as a rank whose
# peer left it in a collective would
STOPPED_IN_A_FORMED_CLUSTER = """\
import os, sys, time
from dlperf.backends.tensorflow import distribute
distribute.make_strategy({"devices": 1}, False)
if os.environ["DLPERF_RANK"] == "1":
    sys.exit(3)
time.sleep(120)
"""


def test_a_tensorflow_rank_in_a_formed_cluster_ends_at_its_launchers_sigterm(tmp_path, tagged):
    """The cluster's forming installs TensorFlow's own SIGTERM handler, which ended nothing:
    the launcher's SIGTERM was lost and the rank lived until its SIGKILL, 5 s later. The
    backend puts the default back, so the rank dies of the SIGTERM."""
    python = pinned_env("tensorflow")
    script = tmp_path / "rank.py"
    script.write_text(STOPPED_IN_A_FORMED_CLUSTER)
    # each rank's own port, reserved as the launcher reserves them for one node (master port +
    # rank is the multi-node rule: rank 1's port was once taken by the kernel's next pick)
    ports = {"DLPERF_RANK_PORTS": ",".join(map(str, tf_launch.reserve_ports(2)))}
    proc = subprocess.run([python, "-m", "dlperf.launchers.spawn", "--nproc", "2",
                           "--master-port", str(launch.free_port()), "--", python, str(script)],
                          capture_output=True, text=True, timeout=300, env=envs.worker_env(ports))
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    assert "dlperf.launchers.spawn: rank 1 exited with code 3" in proc.stdout
    assert "dlperf.launchers.spawn: rank 0 died from SIGTERM (exitcode -15)" in proc.stdout, \
        proc.stdout


def test_peers_that_never_come_time_out_cleanly(tmp_path, tagged):
    # every framework's node 0 waits for a node 1 that never starts, and a JAX node 1 for a
    # node 0 that never starts: all end as timeout after --rdzv-timeout, after one repeat of
    # three. (TensorFlow needs every node's address; without them its workers refuse at once:
    # test_tf_workers_refuse_two_nodes_without_their_addresses, in-process.)
    # the tiny BERT: TensorFlow 1.15 builds its graph before its first collective times out
    common = [sys.executable, "-m", "dlperf.cli", "run", *TINY_BERT, "--nnodes", "2",
              "--master-addr", "127.0.0.1", "--repeats", "3", "--rdzv-timeout", "2"]
    addrs = ["--node-addrs", "127.0.0.1,127.0.0.1"]
    runs = {"jax-0": ["jax", "0"], "jax-1": ["jax", "1"], "tensorflow-0": ["tensorflow", "0", *addrs],
            "tensorflow1-0": ["tensorflow1", "0", *addrs]}
    procs = {name: subprocess.Popen(
        [*common, "--framework", fw, "--node-rank", rank, *rest,
         "--master-port", str(launch.free_port()), "--db", str(tmp_path / f"{name}.db"),
         "--json", str(tmp_path / f"{name}.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, (fw, rank, *rest) in runs.items()}
    outputs = {name: proc.communicate(timeout=300) for name, proc in procs.items()}
    assert {name: proc.returncode for name, proc in procs.items()} == dict.fromkeys(runs, 1), \
        outputs
    results = {name: load(tmp_path / f"{name}.json") for name in runs}
    head = "rendezvous timed out after 2 s (--rdzv-timeout): "
    for name in ("jax-0", "jax-1", "tensorflow-0", "tensorflow1-0"):
        assert results[name]["status"] == "timeout", (name, results[name]["error"])
        assert results[name]["error"].startswith(head), results[name]["error"]
        assert results[name]["repeats_done"] == 1
    assert "the 2 nodes never all joined at 127.0.0.1:" in results["jax-0"]["error"]
    assert "node 0 never answered at 127.0.0.1:" in results["jax-1"]["error"]
    assert results["jax-1"]["node_rank"] == 1 and "stored_by" in results["jax-1"]
    assert "1 of 2 workers joined at 127.0.0.1:" in results["tensorflow-0"]["error"]
    assert "(TensorFlow: Barrier timed out" in results["tensorflow-0"]["error"]
    assert "the 2 nodes never all joined" in results["tensorflow1-0"]["error"]


@pytest.mark.parametrize("framework, repeats", [("jax", 2), ("tensorflow", 1)])
def test_two_nodes_on_this_machine_store_one_case(framework, repeats, tmp_path, tagged):
    db, port = str(tmp_path / "shared.db"), launch.free_port()
    base = [sys.executable, "-m", "dlperf.cli", "run", "--framework", framework, *TINY_BERT,
            "--nnodes", "2", "--threads-per-process", "1", "--repeats", str(repeats),
            "--master-addr", "127.0.0.1", "--master-port", str(port),
            "--node-addrs", "127.0.0.1,127.0.0.1", "--rdzv-timeout", "120", "--db", db]
    nodes = [subprocess.Popen([*base, "--node-rank", str(rank), "--json",
                               str(tmp_path / f"node{rank}.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (1, 0)]
    outputs = [node.communicate(timeout=600) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    master, peer = load(tmp_path / "node0.json"), load(tmp_path / "node1.json")
    assert master["status"] == "ok" and master["case"]["nnodes"] == 2
    assert len(master["throughput"]["repeats"]) == repeats
    check_two_ranks(master, samples_per_rank=2 * 2)
    assert master["launch"]["node_rank"] == 0 and master["launch"]["nnodes"] == 2
    assert [r["threads"] for r in master["ranks"]] == [1, 1]
    assert peer["status"] == "ok" and peer["node_rank"] == 1 and "throughput" not in peer
    assert peer["stored_by"].startswith("node 0")


# ------------------------------------------------------------------------------------------------
# the pieces, without processes
# ------------------------------------------------------------------------------------------------


@pytest.mark.parallel
def test_tf_config_names_every_worker(monkeypatch):
    variables = {"DLPERF_RANK": "3", "DLPERF_WORLD_SIZE": "4", "DLPERF_LOCAL_WORLD_SIZE": "2",
                 "DLPERF_NNODES": "2", "DLPERF_MASTER_ADDR": "10.0.0.1",
                 "DLPERF_MASTER_PORT": "29500", "DLPERF_NODE_ADDRS": "10.0.0.1,10.0.0.2"}
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DLPERF_RANK_PORTS", raising=False)
    assert cluster.tf_config() == {
        "cluster": {"worker": ["10.0.0.1:29500", "10.0.0.1:29501", "10.0.0.2:29502",
                               "10.0.0.2:29503"]},
        "task": {"type": "worker", "index": 3}}
    for name, value in (("DLPERF_NNODES", "1"), ("DLPERF_WORLD_SIZE", "2"),
                        ("DLPERF_RANK", "1"), ("DLPERF_MASTER_ADDR", "127.0.0.1"),
                        ("DLPERF_RANK_PORTS", "41000,40007")):
        monkeypatch.setenv(name, value)
    assert cluster.workers() == ["127.0.0.1:41000", "127.0.0.1:40007"]  # the reserved ports


@pytest.mark.parallel
def test_tf_workers_refuse_two_nodes_without_their_addresses(tmp_path, monkeypatch):
    """What a tensorflow node 0 of 2 started without --node-addrs does, in this process: the
    launcher gives its rank no DLPERF_NODE_ADDRS, and the rank's TF_CONFIG (which its strategy
    sets before TensorFlow's runtime starts) refuses the case with how to name the nodes, which
    the worker records as ``unsupported`` (a worker's refusal under dlperf.launchers.spawn ending
    as the result: test_a_failing_rank_shows_its_own_message[tensorflow])."""
    from dlperf.launchers import spawn
    from dlperf.worker.__main__ import classify
    from dlperf.worker.workload import UnsupportedError

    port = launch.free_port()
    rdzv = launch.Rendezvous(node_rank=0, master_addr="127.0.0.1", master_port=port)
    case = Case(framework="tensorflow", model="bert-base", batch_size=2, nnodes=2, device="cpu")
    spec = tf_launch.TFConfigLauncher(rdzv, python=sys.executable)(case, tmp_path / "c.json",
                                                                   tmp_path)
    assert "DLPERF_NODE_ADDRS" not in spec.env
    monkeypatch.delenv("DLPERF_NODE_ADDRS", raising=False)
    monkeypatch.delenv("DLPERF_RANK_PORTS", raising=False)
    for name, value in {**spec.env, **spawn.rank_env(0, 0, 2, 1, 0, 2, "127.0.0.1",
                                                      port)}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UnsupportedError, match="pass --node-addrs") as refused:
        cluster.tf_config()
    assert classify(refused.value) == "unsupported"


@pytest.mark.parallel
def test_tf_launcher_one_node_reserves_ports_and_gpus_get_one_process_per_node(tmp_path):
    rdzv = launch.Rendezvous(node_rank=1, master_addr="10.0.0.1", master_port=29511,
                             node_addrs=("10.0.0.1", "10.0.0.2"))
    case = Case(framework="tensorflow", model="resnet50", batch_size=2, devices=2, nnodes=2,
                device="cpu")
    launcher = tf_launch.TFConfigLauncher(rdzv, python=sys.executable)
    spec = launcher(case, tmp_path / "c.json", tmp_path)
    assert spec.env["DLPERF_NODE_ADDRS"] == "10.0.0.1,10.0.0.2" and spec.ranks == 2
    assert spec.argv[spec.argv.index("--nproc") + 1] == "2"
    one_node = Case(framework="tensorflow1", model="resnet50", batch_size=2, devices=3,
                    device="cpu")
    launcher = tf1_launch.TF1ConfigLauncher(python=sys.executable)
    spec = launcher(one_node, tmp_path / "c.json", tmp_path)
    ports = spec.env["DLPERF_RANK_PORTS"].split(",")
    assert len(set(ports)) == 3 and spec.facts["workers"] == [f"127.0.0.1:{p}" for p in ports]
    gpus = Case(framework="tensorflow", model="resnet50", batch_size=2, devices=4, nnodes=2,
                device="cuda")
    launcher = tf_launch.TFConfigLauncher(rdzv, python=sys.executable)
    spec = launcher(gpus, tmp_path / "c.json", tmp_path)
    assert spec.argv[spec.argv.index("--nproc") + 1] == "1" and spec.ranks == 1
    assert spec.facts["replicas_per_process"] == 4


@pytest.mark.parallel
def test_explain_reads_each_frameworks_own_words():
    case = Case(framework="jax", model="resnet50", batch_size=2, nnodes=2)
    master = launch.Rendezvous(node_rank=0, master_addr="10.0.0.1", timeout_s=30)
    peer = launch.Rendezvous(node_rank=1, master_addr="10.0.0.1", timeout_s=30)
    fatal = ("F1123 11:53:58.818994 16102 client.h:80] Terminating process because the JAX "
             "distributed service detected fatal errors. absl::Status: DEADLINE_EXCEEDED: "
             "Deadline Exceeded\n\nRPC: /xla.coordination.CoordinationService/RegisterTask\n")
    status, message = jax_launch.explain(fatal, case, peer, "10.0.0.1:29500")
    assert status == "timeout" and "node 0 never answered at 10.0.0.1:29500" in message
    status, message = jax_launch.explain(fatal, case, master, "10.0.0.1:29500")
    assert status == "timeout" and message.startswith("rendezvous timed out after 30 s")
    killed = "dlperf.launchers.spawn: first failure: rank 1 died from SIGKILL (exitcode -9)\n"
    assert jax_launch.explain(killed, case, master, "x")[0] == "oom"
    assert jax_launch.explain("dlperf.launchers.spawn: rank 1 exited with code 1\n", case, master,
                              "x") is None
    tf_case = Case(framework="tensorflow", model="resnet50", batch_size=2, nnodes=2)
    line = (f"{cluster.MARKER} after 30 s: Barrier timed out. Id: [Init]Wait_for_all_tasks_to_"
            f"register::0. This usually happens ... # of tasks that reached the barrier: 3/4.\n")
    status, message = tf_launch.explain(line, tf_case, master, "10.0.0.1:29500")
    assert status == "timeout" and "3 of 4 workers joined at 10.0.0.1:29500" in message
    assert message.endswith("(TensorFlow: Barrier timed out)")


@pytest.mark.parallel
def test_node_addrs_must_name_every_node(tmp_path):
    proc = dlperf_main("run", "--framework", "tensorflow", *TINY, "--nnodes", "2",
                       "--master-addr", "127.0.0.1", "--node-addrs", "127.0.0.1",
                       "--db", str(tmp_path / "x.db"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--node-addrs: 1 addresses given for --nnodes 2" in lines[0]
