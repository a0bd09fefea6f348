"""Cluster-level faults on real components: a Ray worker node stopped mid-run, the Ray head lost, the function
platform throttling calls, and a function killed for exceeding its memory."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from run_dir_tools import train_process, wait_rounds

from minionsrl.backends.local import LocalBackend
from minionsrl.backends.ray_backend import RayBackend
from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig
from minionsrl.errors import ClusterLost
from minionsrl.function import wire
from minionsrl.loop.metrics import LEARNING_COLUMNS, read_metrics, read_rows

FAST = dict(env_id="CartPole-v1", fragment_length=32, eval_episodes=1, eval_every=100, progress=False,
            tensorboard=False, fault_seed=3)


def _run(run_dir: Path, backend=None, **overrides) -> tuple[list[dict], list[dict]]:
    make_trainer(TrainConfig(**{**FAST, "run_dir": str(run_dir), **overrides}), backend=backend).run()
    return read_metrics(run_dir), read_rows(run_dir / "invocations.csv")


def _total(rows: list[dict], column: str) -> int:
    return sum(int(r[column]) for r in rows)


# -- throttling -------------------------------------------------------------------------------------
@pytest.mark.integration
def test_throttled_calls_back_off_and_retry_without_using_up_retries(tmp_path):
    """Half the calls refused by the platform, no retries allowed for failures: every slot still gets its
    fragment after backing off, the refusals are counted `throttled`, and learning is the clean run's."""
    clean, _ = _run(tmp_path / "clean", actors=3, max_rounds=3, max_concurrency=2)
    rows, invocations = _run(tmp_path / "throttled", actors=3, max_rounds=3, max_concurrency=2, max_retries=0,
                             fault_throttle=0.5)
    refused = [r for r in invocations if r["status"] == "throttled"]
    assert refused and all(r["fault"] == "throttle" and "TooManyRequestsException" in r["error"] for r in refused)
    assert all(float(r["duration_s"]) == 0.0 and r["instance_id"] == "" for r in refused)  # never ran
    assert _total(rows, "throttled") == len(refused) and _total(rows, "lost") == 0 and _total(rows, "failed") == 0
    assert [{k: r[k] for k in LEARNING_COLUMNS} for r in rows] == [{k: r[k] for k in LEARNING_COLUMNS} for r in clean]


@pytest.mark.integration
@pytest.mark.parametrize("algo", ["appo", "impala"])
def test_asynchronous_runs_back_off_throttled_calls_without_using_up_retries(tmp_path, algo):
    """APPO and IMPALA keep functions in flight: a refused call is resubmitted after a back-off (not at once)
    and does not count as a failure, so with no retries allowed the run still finishes every round."""
    rows, invocations = _run(tmp_path / algo, algo=algo, actors=3, max_rounds=4, max_concurrency=2, max_retries=0,
                             fault_throttle=0.5, eval_every=2)
    refused = [r for r in invocations if r["status"] == "throttled"]
    assert refused and len(rows) == 4 and _total(rows, "throttled") == len(refused) and _total(rows, "failed") == 0
    assert all(r["eval_return_mean"] for r in rows[1::2])  # evaluations were refused too and still ran


def test_back_off_grows_exponentially_with_full_jitter():
    from minionsrl.loop.retry import RetryPolicy, backoff_s

    policy = RetryPolicy(backoff_base_s=0.1, backoff_cap_s=1.0)
    for refusals, bound in ((1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (30, 1.0)):
        waits = [backoff_s(policy, refusals) for _ in range(200)]
        assert all(0.0 <= w <= bound for w in waits) and max(waits) > 0.7 * bound  # uniform over [0, bound]


def test_a_slot_throttled_past_max_throttled_is_lost(tmp_path):
    """A platform that refuses every call: the round gives up after max_throttled refusals, with one line."""
    from minionsrl.backends.base import OK
    from minionsrl.function.envs import EnvSpec
    from minionsrl.function.request import Request
    from minionsrl.loop.retry import RetryPolicy, TooFewReplies, run_group

    with LocalBackend(wire.new_key(), max_concurrency=1) as backend:
        def request(slot: int, attempt: int) -> Request:
            return Request(id=f"r1-train-{slot}-a{attempt}", kind="train", policy="p", env=EnvSpec("CartPole-v1"),
                           seed=slot, gamma=0.99, attempt=attempt, fault={"kind": "throttle"})

        with pytest.raises(TooFewReplies, match="TooManyRequestsException") as caught:
            run_group(backend, 2, request, lambda req, reply: None,
                      RetryPolicy(max_retries=0, max_throttled=3, backoff_base_s=0.01))
    attempts = caught.value.outcome.attempts
    assert len(attempts) == 2 * 4 and all(a.status == "throttled" for a in attempts)  # 1 try + 3 after back-off
    assert OK not in {a.status for a in attempts}


@pytest.mark.slow
def test_throttling_on_lithops_localhost(tmp_path):
    """Lithops' localhost backend: refused calls back off and are retried; nothing is lost."""
    pytest.importorskip("lithops")
    cfg = TrainConfig(**{**FAST, "run_dir": str(tmp_path / "lithops"), "backend": "lithops", "actors": 2,
                         "max_rounds": 2, "max_retries": 0, "fault_throttle": 0.5})
    make_trainer(cfg).run()
    rows, invocations = read_metrics(tmp_path / "lithops"), read_rows(tmp_path / "lithops" / "invocations.csv")
    assert _total(rows, "throttled") > 0 and _total(rows, "lost") == 0 and len(rows) == 2
    assert {r["status"] for r in invocations} == {"ok", "throttled"}


# -- out of memory ----------------------------------------------------------------------------------
@pytest.mark.integration
def test_function_past_its_memory_is_killed_recorded_oom_and_retried(tmp_path):
    """The local backend enforces a function's memory as platforms do: an instance that allocates past it is
    killed, the attempt is recorded `oom` (counted failed) and retried; nothing is lost."""
    backend = LocalBackend(wire.new_key(), max_concurrency=2, memory_mb=300)
    rows, invocations = _run(tmp_path / "oom", backend=backend, actors=3, max_rounds=2, max_concurrency=2,
                             fault_oom=0.3, max_retries=3)
    killed = [r for r in invocations if r["status"] == "oom"]
    assert killed and all(r["fault"] == "oom" and "out of memory" in r["error"] and "was killed" in r["error"]
                          for r in killed)
    assert _total(rows, "failed") == len(killed) and _total(rows, "retried") >= len(killed)
    assert _total(rows, "lost") == 0 and len(rows) == 2


def test_memory_error_in_a_function_is_recorded_oom():
    """Where no platform enforces the limit, the function's own MemoryError names the cause all the same."""
    from minionsrl.backends.base import FAILED, OOM, THROTTLED, InvocationRecord, classify_failure

    def status(error: str) -> str:
        return classify_failure(InvocationRecord("r1-train-0", "train", status=FAILED, error=error)).status

    assert status("MemoryError: out of memory (injected)") == OOM
    assert status("OutOfMemoryError: Task was killed due to the node running low on memory.") == OOM
    assert status("Error 429: {\"message\": \"Rate Exceeded.\"}") == THROTTLED
    assert status("InjectedFault: injected fault in r1-train-0") == FAILED


# -- a Ray cluster of real nodes --------------------------------------------------------------------
class RayCluster:
    """Ray nodes as `ray start --block` processes on this machine, with token authentication on (a fresh token
    in a 0600 file), each in a process group of its own so that it can be stopped as a machine would be."""

    def __init__(self) -> None:
        from minionsrl.backends.remote import private_file

        self.token = private_file("minionsrl-test-ray-token-", "auth_token", secrets.token_hex(32).encode())
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"}
        self.env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token)})
        self.logs = Path(tempfile.mkdtemp(prefix="minionsrl-ray-cluster-"))
        self.ray = shutil.which("ray", path=os.path.dirname(sys.executable)) or "ray"
        self.nodes: dict[str, subprocess.Popen] = {}
        self.address = ""

    def start(self, name: str, cpus: int, head: bool = False) -> None:
        if head:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            self.address = f"127.0.0.1:{port}"
            args = ["--head", f"--port={port}", "--include-dashboard=false"]
        else:
            args = [f"--address={self.address}"]
        log = self.logs / f"{name}.log"
        with open(log, "wb") as out:
            self.nodes[name] = subprocess.Popen(
                [self.ray, "start", *args, "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}",
                 "--disable-usage-stats", "--block"], stdout=out, stderr=subprocess.STDOUT, env=self.env,
                start_new_session=True)
        deadline = time.monotonic() + 120
        while b"Ray runtime started" not in log.read_bytes():
            if time.monotonic() > deadline or self.nodes[name].poll() is not None:
                raise RuntimeError(f"Ray node {name} did not start; see {log}")
            time.sleep(0.5)

    def running_task(self, name: str, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
        """Wait until a rollout function runs on node ``name`` (Ray titles a worker process by its task)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            for pid in _descendants(self.nodes[name].pid):
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::ray_rollout"):
                        return
            time.sleep(0.05)
        raise AssertionError(f"no rollout function ran on Ray node {name} within {timeout_s:g} s")

    def kill(self, name: str) -> None:
        """Stop a node as a machine that fails: SIGKILL to every process of it at once — its raylet, its worker
        processes (which Ray starts in sessions of their own) and, on the head, its GCS."""
        node = self.nodes.pop(name)
        for pid in [node.pid, *_descendants(node.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
        node.wait()

    def stop(self) -> None:
        for name in list(self.nodes):
            node = self.nodes[name]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(timeout=5)
            self.kill(name)
        from minionsrl.backends.remote import remove_private_file

        remove_private_file(self.token)


def _descendants(pid: int) -> list[int]:
    """The process ids of every descendant of ``pid`` (from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@pytest.fixture
def cluster() -> Iterator[RayCluster]:
    pytest.importorskip("ray")
    c = RayCluster()
    try:
        yield c
    finally:
        c.stop()


# each function steps a slow env (16 steps of 0.1 s), so that a node can be stopped while it runs functions
SLOW = ["--env-id", "custom_env:CounterEnv", "--env-kwargs", '{"length": 8, "sleep_s": 0.1}', "--fragment-length",
        "16", "--eval-every", "100", "--eval-episodes", "1", "--no-progress", "--no-tensorboard", "--seed", "1"]


@pytest.mark.slow
def test_ray_worker_node_stopped_mid_run_the_run_goes_on(cluster, tmp_path):
    """A head with 1 CPU and a worker node with 2; 3 functions a round. The worker node is SIGKILLed while round
    2's functions run on it: their invocations fail with Ray's error, are retried on the head, and the run
    completes every round with nothing lost."""
    cluster.start("head", cpus=1, head=True)
    cluster.start("worker", cpus=2)
    run = tmp_path / "run"
    proc = train_process([*SLOW, "--backend", "ray", "--ray-address", cluster.address, "--actors", "3",
                          "--max-rounds", "5", "--run-dir", str(run)], cluster.env)
    wait_rounds(run, 1, proc)
    cluster.running_task("worker", proc)  # round 2's functions are running, on the worker node too
    cluster.kill("worker")
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err.decode()
    rows, invocations = read_metrics(run), read_rows(run / "invocations.csv")
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4, 5]
    assert _total(rows, "lost") == 0 and _total(rows, "retried") > 0
    died = [r for r in invocations if r["status"] == "failed"]
    assert died and all("Error" in r["error"] for r in died)  # Ray's error: the worker or its node died
    assert all(r["status"] == "ok" for r in invocations if int(r["round"]) > 2)


@pytest.mark.slow
def test_ray_head_lost_is_one_line_and_resume_continues(cluster, tmp_path):
    """The head is SIGKILLed mid-run: the learner stops within seconds with one line naming the run to resume
    (not Ray's own exit a minute later); with a head back, `--resume` runs the remaining rounds."""
    cluster.start("head", cpus=2, head=True)
    run = tmp_path / "run"
    proc = train_process([*SLOW, "--backend", "ray", "--ray-address", cluster.address, "--actors", "2",
                          "--max-rounds", "4", "--run-dir", str(run)], cluster.env)
    wait_rounds(run, 2, proc)
    time.sleep(0.5)
    cluster.kill("head")
    _, err = proc.communicate(timeout=90)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, err.decode()
    assert lines[0].startswith("minionsrl: cluster lost: the Ray cluster's head") and "--resume" in lines[0]
    assert f"--run-dir {run}" in lines[0], lines
    cluster.start("head", cpus=2, head=True)  # a new head, at a new address
    proc = train_process(["--resume", "--run-dir", str(run), "--no-progress", "--ray-address", cluster.address],
                         cluster.env)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err.decode()
    assert [int(r["round"]) for r in read_metrics(run)] == [1, 2, 3, 4]


def test_a_raylet_gone_a_moment_before_its_gcs_is_a_lost_head():
    """A failing head machine's processes die one by one: the raylet can be seen gone while the GCS, killed in
    the same instant, still accepts connections for a few milliseconds. That is the head's loss, not the raylet's.
    (Real processes and sockets: a raylet that has ended, a GCS port that closes 0.2 s later.)"""
    raylet = psutil.Popen([sys.executable, "-c", "pass"])
    raylet.wait()
    gcs = socket.create_server(("127.0.0.1", 0))
    backend = object.__new__(RayBackend)  # the checks only, without a cluster
    backend.lost, backend._raylet_lost, backend._watchdog, backend.token_path = None, False, None, None
    backend._gcs, backend._address, backend._raylet = gcs.getsockname()[:2], "127.0.0.1:6379", raylet
    threading.Timer(0.2, gcs.close).start()
    with pytest.raises(ClusterLost, match=r"the Ray cluster's head .* is gone: its GCS"):
        backend._check_raylet()
    assert not backend._raylet_lost


@pytest.mark.parametrize(("private", "says"), [
    (True, "a new private cluster starts with the run: continue with --resume"),
    (False, "start the cluster again, then continue with --resume"),
])
def test_a_lost_head_says_what_to_start_only_for_a_cluster_the_user_runs(tmp_path, private, says):
    from minionsrl.backends.ray_backend import RayBackend

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = object.__new__(RayBackend)  # what _head_lost reads, without starting Ray
    backend._gcs, backend._address = ("127.0.0.1", port), "the private cluster" if private else "10.0.0.1:6379"
    backend.token_path = tmp_path / "token" if private else None
    assert backend._head_lost().endswith(f"the run stopped at its last checkpoint: {says}")
