"""Shared fixtures for the minionsrl test suite.

``tests/`` is put on ``sys.path`` (and on ``PYTHONPATH`` for subprocesses and the local backend's
worker processes) so that ``custom_env:ClassName`` entry points resolve everywhere.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(TESTS_DIR), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
)
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")


# no example database: the suite must not write into the repository
settings.register_profile("minionsrl", database=None, deadline=None)
settings.load_profile("minionsrl")
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "minionsrl-tests-hypothesis"))


@pytest.fixture
def key() -> bytes:
    return b"k" * 32


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for child Python processes: the package and tests/ importable, no display."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join((str(TESTS_DIR), str(REPO_ROOT)))
    env["SDL_VIDEODRIVER"] = "dummy"
    env["SDL_AUDIODRIVER"] = "dummy"
    return env


@pytest.fixture(scope="session")
def ray_address():
    """A real two-node Ray cluster for the whole session, with token authentication on: ``ray start --head``
    plus a second node joining it, both stopped at the end. The test process stays connected to it. (Its
    nodes listen on all interfaces, guarded by the token: Ray binds to loopback only in its one-machine
    mode, where ``ray start`` refuses a second node.)"""
    ray = pytest.importorskip("ray")
    import shutil
    import signal
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    # token authentication on, as a cluster should run: a fresh token in a 0600 file of its own (never under
    # ~/.ray), for the driver as for the nodes, removed at the end
    import secrets

    from minionsrl.backends.ray_backend import reload_ray_auth
    from minionsrl.backends.remote import private_file, remove_private_file

    auth_vars = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    saved_env = {name: os.environ.get(name) for name in auth_vars}
    token_path = private_file("minionsrl-test-ray-token-", "auth_token", secrets.token_hex(32).encode())
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)})
    reload_ray_auth()
    ray_cli = shutil.which("ray", path=os.path.dirname(sys.executable)) or "ray"
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=2", "--disable-usage-stats", "--block"]
    log_dir = Path(tempfile.mkdtemp(prefix="minionsrl-ray-"))
    nodes = []

    def start(name: str, args: list[str]) -> None:
        with open(log_dir / f"{name}.log", "wb") as log:
            nodes.append(subprocess.Popen([ray_cli, "start", *args, *common], stdout=log, stderr=subprocess.STDOUT,
                                          env=dict(os.environ), start_new_session=True))

    try:
        start("head", ["--head", f"--port={port}", "--include-dashboard=false"])
        deadline = time.monotonic() + 90
        while True:
            try:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
                break
            except (ConnectionError, RuntimeError):
                if time.monotonic() > deadline or nodes[0].poll() is not None:
                    raise RuntimeError(f"the Ray head did not start; see {log_dir}/head.log") from None
                time.sleep(0.5)
        start("worker", [f"--address={address}"])
        deadline = time.monotonic() + 90  # the second node's own time to join, on a machine the head has loaded
        while sum(1 for n in ray.nodes() if n["Alive"]) < 2:
            if time.monotonic() > deadline or nodes[1].poll() is not None:
                raise RuntimeError(f"the second Ray node did not join; see {log_dir}/worker.log")
            time.sleep(0.5)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for node in reversed(nodes):  # `ray start --block` stops its own processes on SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(timeout=5)  # the head can take 30 s to stop gracefully
            with contextlib.suppress(ProcessLookupError):  # whatever is left of its group (gcs, raylet, workers)
                os.killpg(node.pid, signal.SIGKILL)
            node.wait()
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        reload_ray_auth()
        remove_private_file(token_path)


@pytest.fixture
def make_backend():
    """``make(**kwargs)``: a local backend (two instances at once unless told), closed after the test."""
    from backend_helpers import KEY

    from minionsrl.backends.local import LocalBackend

    backends: list[LocalBackend] = []

    def make(**kwargs) -> LocalBackend:
        backend = LocalBackend(KEY, **{"max_concurrency": 2, **kwargs})
        backends.append(backend)
        return backend

    yield make
    for backend in backends:
        backend.close()


def as_resolved(values: dict) -> dict:
    """A preset's values as the resolved config holds them: its anneal_lr (CleanRL's flag) is lr_schedule."""
    from minionsrl.config import lr_schedule_of

    out = dict(values)
    if "anneal_lr" in out:
        out["lr_schedule"] = lr_schedule_of(out.pop("anneal_lr"))
    return out
