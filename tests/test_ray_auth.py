"""The private Ray cluster a run starts is closed: token authentication on, every port on loopback.

A learner process starts ``RayBackend`` without an address (its private cluster) and holds it while this
test tries it from outside: raw gRPC calls to its GCS without the token and with a wrong one, and a real
Ray client in another process, must all be refused; the same call with the token must work (so the
refusals are the token check's). Every listening socket of the learner and of the processes Ray started
for it must be on loopback. When the backend closes, the token file is gone and the environment Ray
reads is as it was.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from minionsrl.backends.remote import private_file, remove_private_file

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
grpc = pytest.importorskip("grpc")

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")

# The learner: a private cluster, held until told to close. It starts with a user's own Ray settings in its
# environment (auth disabled, a token for some other cluster), which the private cluster must not use.
LEARNER = r"""
import json, os, sys
import ray
from minionsrl.backends.ray_backend import RayBackend

backend = RayBackend(b"k" * 32, max_concurrency=1)
token_path = str(backend.token_path)
print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "token_path": token_path,
                  "task": ray.get(ray.remote(lambda: 41 + 1).remote()),
                  "session": ray._private.worker._global_node.get_session_dir_path()}), flush=True)
sys.stdin.readline()
backend.close()
print(json.dumps({"token_left": os.path.exists(token_path), "initialized": ray.is_initialized(),
                  "env": {k: os.environ.get(k) for k in AUTH_VARS}}), flush=True)
""".replace("AUTH_VARS", repr(AUTH_VARS))

CLIENT = r"""
import sys
import ray
try:
    ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
except Exception as exc:
    chain = []
    while exc is not None:
        chain.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__
    print("REFUSED", " | ".join(chain))
else:
    print("CONNECTED", ray.cluster_resources())
"""


def _clean_env(home: Path) -> dict[str, str]:
    """This test's environment without any Ray authentication setting (the session's cluster sets some)."""
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    env["HOME"] = str(home)
    return env


def _read_line(proc: subprocess.Popen, timeout: float) -> dict:
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sel.select(timeout=max(0.0, end - time.monotonic())):
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("{"):
                return json.loads(line)
    proc.kill()
    raise AssertionError(f"the learner did not answer in {timeout:g} s:\n{proc.stderr.read()[-3000:]}")


def _listening(proc: psutil.Process) -> list[tuple[str, int]]:
    try:
        return [(c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _name(proc: psutil.Process) -> str | None:
    """A process's name, or None for one that ended since it was listed (Ray starts short-lived helpers)."""
    try:
        return proc.name()
    except psutil.NoSuchProcess:
        return None


def _gcs_call(address: str, token: str | None):
    """One real RPC to the GCS (list the nodes), with ``token`` in the header Ray's clients send, or none."""
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        metadata = None if token is None else [("authorization", f"Bearer {token}")]
        try:
            reply = stub.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(), metadata=metadata, timeout=20)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
        return grpc.StatusCode.OK, len(reply.node_info_list)


@pytest.mark.integration
def test_private_cluster_refuses_clients_without_its_token_and_listens_on_loopback_only(tmp_path, subprocess_env):
    home = tmp_path / "home"
    home.mkdir()
    env = {**_clean_env(home), "PYTHONPATH": subprocess_env["PYTHONPATH"],
           "RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": "a-token-of-another-cluster"}
    learner = subprocess.Popen([sys.executable, "-c", LEARNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        up = _read_line(learner, timeout=240)
        assert up["task"] == 42  # the cluster works, with authentication on
        gcs = up["gcs"]
        assert gcs.rsplit(":", 1)[0] == "127.0.0.1"

        # the token: fresh, 0600 in a 0700 directory of its own, outside the home folder; none under ~/.ray
        token_path = Path(up["token_path"])
        token = token_path.read_text()
        assert len(token) == 64 and int(token, 16) >= 0
        assert stat.S_IMODE(token_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_path.parent.stat().st_mode) == 0o700
        assert not token_path.is_relative_to(home) and not (home / ".ray").exists()
        assert token_path.is_relative_to(Path(tempfile.gettempdir()))
        copies = [str(p) for p in Path(up["session"]).rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
        assert copies == []  # Ray wrote no copy of it into its session folder

        # every port of the learner and of the processes Ray started for it is on loopback
        root = psutil.Process(learner.pid)
        processes = [root, *root.children(recursive=True)]
        names = {name: _listening(p) for p in processes if (name := _name(p))}
        assert names.get("gcs_server") and names.get("raylet"), names
        sockets = [s for p in processes for s in _listening(p)]
        assert sockets and all(ip in LOOPBACK for ip, _ in sockets), sockets

        # refused without the token, and with a wrong one; served with it
        assert _gcs_call(gcs, None)[0] == grpc.StatusCode.UNAUTHENTICATED
        assert _gcs_call(gcs, "0" * 64)[0] == grpc.StatusCode.UNAUTHENTICATED
        assert _gcs_call(gcs, token) == (grpc.StatusCode.OK, 1)

        # nothing answers on this machine's other addresses
        port = int(gcs.rsplit(":", 1)[1])
        outside = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                   if a.family == socket.AF_INET and not a.address.startswith("127.")]
        for address in outside:
            with socket.socket() as probe, pytest.raises(OSError):
                probe.settimeout(5)
                probe.connect((address, port))

        # a real Ray client on this machine without the token (another user's shell, say) cannot join; it
        # is told to stay on loopback, else Ray would dial the machine's outside address, where nothing listens
        client_home = tmp_path / "client-home"
        client_home.mkdir()
        client = subprocess.run([sys.executable, "-c", CLIENT, gcs],
                                env={**_clean_env(client_home), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
                                capture_output=True, text=True, timeout=180)
        assert "CONNECTED" not in client.stdout
        assert "REFUSED" in client.stdout and "AuthenticationError" in client.stdout, client.stdout + client.stderr

        # closed: the token is removed with the cluster, and Ray's settings are as the learner had them
        learner.stdin.write("close\n")
        learner.stdin.flush()
        down = _read_line(learner, timeout=120)
        assert down["token_left"] is False and not token_path.parent.exists()
        assert down["initialized"] is False
        assert down["env"] == {"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": "a-token-of-another-cluster",
                               "RAY_AUTH_TOKEN_PATH": None, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": None}
        assert learner.wait(timeout=60) == 0
    finally:
        if learner.poll() is None:
            os.killpg(learner.pid, signal.SIGKILL)
            learner.wait()


def test_private_secret_files_are_0600_and_left_ones_are_removed_once_their_process_is_gone():
    prefix = "minionsrl-test-secret-"
    path = private_file(prefix, "key", b"secret")
    assert path.read_bytes() == b"secret" and stat.S_IMODE(path.stat().st_mode) == 0o600
    code = f"from minionsrl.backends.remote import private_file; print(private_file({prefix!r}, 'key', b's'))"
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    left = Path(killed.stdout.strip())  # its process ended without removing it, as a SIGKILL leaves it
    assert left.exists()
    other = private_file(prefix, "key", b"other")  # the next one to start removes it
    assert not left.parent.exists() and path.exists()  # a dead process's folder goes; a live one's stays
    for made in (path, other):
        remove_private_file(made)
        assert not made.parent.exists()


@pytest.mark.integration
def test_joining_a_cluster_without_its_token_is_one_line_naming_what_to_set(ray_address, tmp_path, subprocess_env):
    """--ray-address of a cluster with token authentication (the session's), from a process without the token."""
    home = tmp_path / "home"
    home.mkdir()
    code = ("import sys\nfrom minionsrl.backends.ray_backend import RayBackend\n"
            "from minionsrl.errors import ConfigError\n"
            "try:\n    RayBackend(b'k' * 32, address=sys.argv[1])\n"
            "except ConfigError as exc:\n    print('ERROR', exc)\n")
    proc = subprocess.run([sys.executable, "-c", code, ray_address], capture_output=True, text=True, timeout=180,
                          env={**_clean_env(home), "PYTHONPATH": subprocess_env["PYTHONPATH"]})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ERROR")]
    assert len(lines) == 1 and "\n" not in lines[0], proc.stdout + proc.stderr[-2000:]
    assert "refused this process's authentication token" in lines[0]
    assert "RAY_AUTH_MODE=token" in lines[0] and "RAY_AUTH_TOKEN_PATH" in lines[0]
