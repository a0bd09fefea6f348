"""``ray``: each invocation is a Ray task; the round's policy goes into Ray's object store once.

With ``address`` the learner joins a running cluster (``ray start --head`` on one machine, ``ray start
--address=HEAD:6379`` on the others); without it a local single-node cluster is started and stopped
with the backend. Ray reuses worker processes, so a warm worker keeps its environments and the last
policy in the rollout function's module globals, as a warm function instance does.

The private cluster is closed to others: every one of its processes listens on loopback only, and Ray's
token authentication is on, with a fresh token per run in a file only this user can read (0600, in a
directory of its own under the system's temporary folder, never ``~/.ray``), removed with the cluster.
A joined cluster is the user's: its authentication is whatever its nodes were started with
(docs/DEPLOY.md says what to set up).

Tasks run with ``max_retries=0``: retrying is the learner's decision (it must be billed and counted),
not Ray's. A worker node that dies takes its tasks with it: each comes back as Ray's error (the worker or
node died) and is retried by the learner on the nodes that remain. The head is another matter: without it
Ray's driver waits a minute and then ends the process from C++. So while it waits for tasks the backend
checks every ``HEAD_CHECK_S`` that the head's GCS still accepts connections, and stops the run with one
line (:class:`~minionsrl.errors.ClusterLost`) when it does not; ``--resume`` continues once a head is back.
The raylet on this machine (the private cluster's, or the joined cluster's node here) is checked every
``RAYLET_CHECK_S`` meanwhile, and before every call that reaches it: Ray's driver talks to the raylet's object
store over a socket, and when that breaks (the raylet killed) Ray ends the process from C++ at once
(``QuickExit``: exit code 1, nothing printed, no Python cleanup). So a raylet that is gone, or exiting, stops
the run with the same one line as a lost head before any ``ray.put`` or ``ray.get`` reaches for it; Ray's own
report of the dead raylet (its log's last 20 lines, which its agents publish to the driver) is not printed.
Only a raylet killed in the instant between that check and the call still takes the process with it; the
watchdog then removes the token all the same, and writes the one line to stderr (:data:`_WATCHDOG`).
The private cluster lives no longer than the learner. Ray ties its head processes (GCS, raylet, monitors) to
the driver with ``PR_SET_PDEATHSIG``, but the raylet's own children, the dashboard and runtime-env agents,
notice a dead raylet only after a minute (they report it to the dead GCS, with a 60 s timeout), holding their
loopback ports meanwhile. So a watchdog process (:data:`_WATCHDOG`, in a session of its own) holds a pipe from
the learner and, when it reads end of file (the learner closed the backend, or died, SIGKILL included), kills
the cluster processes it was told of that are still there (checked by start time, so a reused pid is spared).
A call refused by the platform is a ``throttle`` fault's refusal (:class:`~minionsrl.backends.base.Refusals`):
Ray itself queues, it does not refuse.

What crosses the cluster is bytes — JSON requests, and HMAC-authenticated safetensors
policies and replies — which the learner verifies itself; Ray's own transport is trusted as part of
the cluster the user runs (see docs/DEPLOY.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from minionsrl.backends.base import concurrency, learner_path
from minionsrl.backends.remote import RemoteBackend, private_file, remove_private_file
from minionsrl.errors import ClusterLost, ConfigError, NotStarted
from minionsrl.function import rollout
from minionsrl.function.extras import missing_extra_error

# Ray's own settings for a private cluster, set for its life and restored after: token authentication with
# the token read from a file (RAY_AUTH_TOKEN would win over the file, so it is unset meanwhile), and Ray's
# single-machine mode, in which every process it starts binds to 127.0.0.1 instead of all interfaces.
_AUTH_MODE, _TOKEN, _TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"
_LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": one node, on 127.0.0.1
_PRIVATE_ENV = (_AUTH_MODE, _TOKEN, _TOKEN_PATH, _LOOPBACK_ONLY)
TOKEN_PREFIX = "minionsrl-ray-token-"
LOOPBACK = "127.0.0.1"
PROBE_TIMEOUT_S = 3.0  # how long a joined cluster's address may take to accept a TCP connection
CLIENT_PORT = 10001  # Ray Client's default port (``ray://HOST``)
HEAD_CHECK_S = 2.0  # while waiting for tasks, how often the head's GCS is checked (Ray's own wait is 60 s)
RAYLET_CHECK_S = 0.25  # and how often this machine's raylet is (a look at its process)
# a head's processes die one by one even when its machine fails at once: a raylet found gone is taken for the
# head's loss if the GCS stops answering within this while
HEAD_GONE_WITHIN_S = 1.0
# Ray gives a starting node 30 s to register (hard-coded in ray._private.node); a busy machine can miss that once
PRIVATE_START_TRIES = 2
_START_TIMED_OUT = "timed out during startup"  # what Ray's exception then says


# The watchdog: reads JSON messages, one a line, until end of file (the learner is gone): lists of [pid, start
# time] of the cluster's processes; {"token": FOLDER}, the token's folder; {"raylet": [pid, start time], "line":
# LINE}, the raylet the learner's driver talks to and what to say should the learner die after it; {"quiet": 1},
# the learner closes the backend or reports the lost raylet itself. At end of file it kills the processes still
# running and removes the token's folder; where the raylet ended before the learner did, and the learner said
# nothing (Ray's driver ends the process from C++ when its raylet dies under a call), it writes the line to stderr.
# psutil is Ray's own dependency.
_WATCHDOG = """
import json, os, select, shutil, signal, sys
import psutil
signal.signal(signal.SIGINT, signal.SIG_IGN)
procs, token, line, quiet, raylet_gone = {}, None, "", False, False
pidfd, buffer = None, b""
fd = sys.stdin.fileno()
while True:
    ready = select.select([fd] + ([pidfd] if pidfd is not None else []), [], [])[0]
    if pidfd is not None and pidfd in ready and fd not in ready:  # the raylet went first, not with the learner
        raylet_gone, pidfd = True, os.close(pidfd)
    if fd not in ready:
        continue
    chunk = os.read(fd, 65536)
    if not chunk:
        break
    *lines, buffer = (buffer + chunk).split(b"\\n")
    for text in lines:
        msg = json.loads(text)
        if isinstance(msg, list):
            procs.update((int(pid), float(t)) for pid, t in msg)
        else:
            token = msg.get("token", token)
            quiet = quiet or bool(msg.get("quiet"))
            if "raylet" in msg and pidfd is None and not raylet_gone:
                line = msg.get("line", "")
                try:
                    proc = psutil.Process(int(msg["raylet"][0]))
                    if abs(proc.create_time() - float(msg["raylet"][1])) < 0.01:
                        pidfd = os.pidfd_open(proc.pid)
                except (psutil.Error, OSError, AttributeError):
                    pass
for pid, started in procs.items():
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - started) < 0.01:
            proc.kill()
    except psutil.Error:
        pass
if token:
    shutil.rmtree(token, ignore_errors=True)
if raylet_gone and not quiet and line:
    sys.stderr.write(line + "\\n")
"""


def child_pids() -> set[int]:
    """The processes this one started (its direct children)."""
    import psutil

    return {proc.pid for proc in psutil.Process().children()}


def process_trees(pids: Iterable[int]) -> list[tuple[int, float]]:
    """(pid, start time) of these processes and all of theirs, those still running."""
    import psutil

    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    found.append((proc.pid, proc.create_time()))
    return found


def ray_rollout(payload: bytes, policy_refs: list[Any], key: bytes) -> bytes:
    """The Ray task: the rollout function, fetching the policy from the object store only when the
    worker does not hold this round's already. The ref travels in a list so Ray does not fetch it eagerly."""
    import ray

    return rollout.handle(payload, lambda _ref: ray.get(policy_refs[0]), key)


class RayBackend(RemoteBackend):
    """Rollout functions as Ray tasks on a local or existing Ray cluster."""

    name = "ray"

    def __init__(self, key: bytes, address: str | None = None, num_cpus: float = 1.0,
                 max_concurrency: int | None = None, invocation_timeout_s: float | None = None,
                 resume_flag: str = "") -> None:
        """``resume_flag``: what ``--resume`` needs besides itself to continue the run (``--run-dir DIR``), for
        the line the watchdog writes when this process ends before it can say why itself."""
        super().__init__(key, invocation_timeout_s)
        self.resume_flag = resume_flag
        try:
            import ray
        except ImportError as exc:
            raise missing_extra_error("--backend ray", "ray") from exc
        self._ray = ray
        self._owns_connection = not ray.is_initialized()  # a caller that connected keeps its connection
        self.token_path: Path | None = None  # the private cluster's token file, while it is up
        self._watchdog: subprocess.Popen | None = None  # kills the private cluster's leftovers once we are gone
        self._cluster_pids: set[int] = set()  # the processes ray.init started for the private cluster
        self._saved_env: dict[str, str | None] | None = None
        if self._owns_connection:
            self._connect(address, max_concurrency)
        self.max_concurrency = max(1, int(ray.cluster_resources().get("CPU", 1) // num_cpus))  # tasks at once
        self._task = ray.remote(ray_rollout).options(num_cpus=num_cpus, max_retries=0)
        self._policy_ref: Any = None
        self._address = address or "the private cluster"
        try:
            host, _, port = str(ray.get_runtime_context().gcs_address).rpartition(":")
            self._gcs: tuple[str, int] | None = (host, int(port))  # the head's GCS
        except Exception:  # a Ray Client (ray://) connection: no GCS address to check; Ray Client reports loss
            self._gcs = None
        self.lost: str | None = None  # the one line saying what of the cluster is gone, once something is
        self._raylet_lost = False  # what is gone is this machine's raylet (the head's GCS answers)
        self._raylet = local_raylet()  # the raylet this driver talks to (None through Ray Client)
        _quiet_raylet_death_reports()
        self._tell_watchdog_raylet()

    def _connect(self, address: str | None, max_concurrency: int | None) -> None:
        ray = self._ray
        if address:
            probe_cluster(address)  # ray.init would wait for an absent cluster for ever (and ignore Ctrl-C)
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as exc:
                if _is_auth_error(exc):
                    raise ConfigError(
                        f"ray_address: the Ray cluster at {address!r} refused this process's authentication token "
                        f"(missing or wrong); set {_AUTH_MODE}=token and {_TOKEN_PATH}=FILE holding the cluster's "
                        "token (see docs/DEPLOY.md)") from exc
                raise ConfigError(f"ray_address: cannot join the Ray cluster at {address!r} ({exc}); start it "
                                  "with `ray start --head` or leave --ray-address empty for a local one") from exc
            return
        for attempt in range(1, PRIVATE_START_TRIES + 1):
            try:
                self._start_private(max_concurrency)
                return
            except Exception as exc:  # Ray raises a bare Exception for it
                if _START_TIMED_OUT not in str(exc):
                    raise
                if attempt == PRIVATE_START_TRIES:
                    raise NotStarted(
                        f"backend 'ray': the private Ray cluster did not start, {PRIVATE_START_TRIES} tries (Ray: "
                        f"{exc}); this machine is too busy for Ray's 30 s start: run it again when it is quieter, "
                        "or pass --ray-address of a running cluster") from exc

    def _start_private(self, max_concurrency: int | None) -> None:
        """A single-node cluster for this run: on loopback, with a fresh authentication token. Its workers see
        what this interpreter imports (custom env modules included)."""
        ray = self._ray
        self.token_path = private_file(TOKEN_PREFIX, "auth_token", secrets.token_hex(32).encode())
        self._remove_token = weakref.finalize(self, remove_private_file, self.token_path)  # even if never closed
        self._saved_env = {name: os.environ.get(name) for name in _PRIVATE_ENV}
        os.environ.pop(_TOKEN, None)
        os.environ.update({_AUTH_MODE: "token", _TOKEN_PATH: str(self.token_path), _LOOPBACK_ONLY: "0"})
        from ray._private import ray_constants

        multi_node = ray_constants.ENABLE_RAY_CLUSTER  # read from the environment once, when Ray was imported
        children = child_pids()  # what was there before the cluster: not the cluster's to kill
        try:
            reload_ray_auth()
            ray_constants.ENABLE_RAY_CLUSTER = False  # so that 127.0.0.1 stays 127.0.0.1 (Ray reads it here)
            try:
                ray.init(address="local", num_cpus=concurrency(max_concurrency), include_dashboard=False,
                         log_to_driver=False, configure_logging=False, _node_ip_address=LOOPBACK,
                         runtime_env={"env_vars": {"PYTHONPATH": learner_path()}})
            finally:
                ray_constants.ENABLE_RAY_CLUSTER = multi_node  # the started node keeps its address
            host = str(ray.get_runtime_context().gcs_address).rsplit(":", 1)[0]
            if not _token_auth_enabled() or host != LOOPBACK:
                raise ConfigError(f"backend 'ray': the private Ray cluster did not start closed (token auth "
                                  f"{'on' if _token_auth_enabled() else 'off'}, address {host}); this Ray "
                                  f"{ray.__version__} does not support it: pass --ray-address of a cluster you secured")
            self._cluster_pids = child_pids() - children
            self._start_watchdog()
        except BaseException:
            self._stop_private()
            raise

    def _start_watchdog(self) -> None:
        """Start the watchdog and tell it of the cluster's processes (:data:`_WATCHDOG`)."""
        try:
            self._watchdog = subprocess.Popen([sys.executable, "-I", "-c", _WATCHDOG], stdin=subprocess.PIPE,
                                              stdout=subprocess.DEVNULL, start_new_session=True)
        except OSError:  # no watchdog: the agents go by themselves, a minute later
            return
        self._tell_watchdog()
        if self.token_path is not None:
            self._send_watchdog({"token": str(self.token_path.parent)})

    def _tell_watchdog(self) -> None:
        """Send the watchdog the cluster's processes as they are now (the agents start with the raylet)."""
        self._send_watchdog(process_trees(self._cluster_pids))

    def _tell_watchdog_raylet(self) -> None:
        """Send the watchdog the raylet to watch and the line to write should the learner die after it."""
        if self._raylet is not None:
            with contextlib.suppress(Exception):
                line = f"minionsrl: cluster lost: {self._raylet_message()}" + (
                    f" {self.resume_flag}" if self.resume_flag else "")  # the learner's own line gets it in the CLI
                self._send_watchdog({"raylet": [self._raylet.pid, self._raylet.create_time()], "line": line})

    def _send_watchdog(self, message: Any) -> None:
        if self._watchdog is None or self._watchdog.stdin is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._watchdog.stdin.write(json.dumps(message).encode() + b"\n")
            self._watchdog.stdin.flush()

    def _stop_watchdog(self) -> None:
        """Close the watchdog's pipe: it kills what is left of the cluster, and ends."""
        if self._watchdog is None:
            return
        self._send_watchdog({"quiet": 1})
        with contextlib.suppress(OSError):
            self._watchdog.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._watchdog.wait(timeout=5.0)
        self._watchdog = None

    def _stop_private(self) -> None:
        """Stop the private cluster, then restore Ray's settings and remove its token."""
        self._send_watchdog({"quiet": 1})  # a raylet that ends from now on is this stop's doing, not a loss to report
        if self._ray.is_initialized():
            self._ray.shutdown()
        self._send_watchdog({"token": None})  # removed below, once Ray no longer reads it
        self._stop_watchdog()
        if self._saved_env is not None:
            for name, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            self._saved_env = None
            reload_ray_auth()  # before the token goes: Ray would re-read it while its config said "token"
        if self.token_path is not None:
            self._remove_token()
            self.token_path = None

    def publish(self, policy_blob: bytes) -> str:
        """Put the round's policy in the object store once; tasks in flight keep the old one alive."""
        self.publishes += 1
        if self.publishes == 1:
            self._tell_watchdog()  # processes the cluster started since (its agents, if they were late)
        self._check_head()
        try:
            self._policy_ref = self._ray.put(policy_blob)
        except Exception:
            self._check_head()  # a head lost is the error to report, not the put's
            raise
        return f"ray:{self._policy_ref.hex()}"

    def _start(self, payloads: list[bytes]) -> list[Any]:
        self._check_raylet()  # a task sent to a dead raylet waits for ever
        return [self._task.remote(p, [self._policy_ref], self.key) for p in payloads]

    def _check_head(self) -> None:
        """Raise :class:`ClusterLost` (one line) if the head's GCS no longer accepts a TCP connection, or this
        machine's raylet is gone (:meth:`_check_raylet`)."""
        if self.lost is None:
            self.lost = self._head_lost()
        self._check_raylet()

    def _head_lost(self) -> str | None:
        """Why the head is gone (the one line to stop with), if its GCS does not accept a TCP connection."""
        if self._gcs is None:
            return None
        try:
            with socket.create_connection(self._gcs, timeout=PROBE_TIMEOUT_S):
                return None
        except OSError as exc:
            why = ("connection refused" if isinstance(exc, ConnectionRefusedError) else
                   f"no answer within {PROBE_TIMEOUT_S:g} s" if isinstance(exc, TimeoutError) else
                   exc.strerror or type(exc).__name__)
        # a private cluster is this run's own: --resume starts a new one (there is nothing for the user to start)
        again = ("a new private cluster starts with the run: continue with --resume" if self.token_path is not None
                 else "start the cluster again, then continue with --resume")
        return (f"the Ray cluster's head ({self._address}) is gone: its GCS at {self._gcs[0]}:{self._gcs[1]}: "
                f"{why}; the run stopped at its last checkpoint: {again}")

    def _check_raylet(self) -> None:
        """Raise :class:`ClusterLost` (one line) if something of the cluster was found gone, or this machine's
        raylet has ended: Ray's driver would end the process at its next call that reaches the raylet's object
        store (``ray.put``, ``ray.get`` of an object held there). A raylet that went with its head (the GCS gone
        too, or going within ``HEAD_GONE_WITHIN_S``) is a lost head."""
        if self.lost is None and self._raylet is not None and not _running(self._raylet):
            self.lost = self._head_lost()
            deadline = time.perf_counter() + HEAD_GONE_WITHIN_S
            while self.lost is None and time.perf_counter() < deadline:
                time.sleep(0.05)
                self.lost = self._head_lost()
            if self.lost is None:
                self.lost, self._raylet_lost = self._raylet_message(), True
        if self.lost is not None:
            self._send_watchdog({"quiet": 1})  # the learner says so itself
            raise ClusterLost(self.lost)

    def _raylet_message(self) -> str:
        pid = self._raylet.pid if self._raylet is not None else "?"
        again = "" if self.token_path is not None else "start Ray on this machine again, then "
        return (f"the Ray cluster's raylet on this machine ({self._address}) is gone: its process {pid} ended "
                f"(killed, or crashed); the run stopped at its last checkpoint: {again}continue with --resume")

    def _poll(self, handles: list[Any], timeout: float | None) -> list[tuple[Any, bytes | None, str]]:
        ray = self._ray
        self._check_raylet()
        now = time.perf_counter()
        end = None if timeout is None else now + timeout
        head_checked = now
        while True:  # in slices, checking the raylet between them, and the head every HEAD_CHECK_S
            left = RAYLET_CHECK_S if end is None else max(0.0, min(end - time.perf_counter(), RAYLET_CHECK_S))
            ready, _ = ray.wait(handles, num_returns=1, timeout=left)
            if ready:
                break
            now = time.perf_counter()
            if now - head_checked >= HEAD_CHECK_S:
                head_checked = now
                self._check_head()
            else:
                self._check_raylet()
            if end is not None and now >= end:
                return []
        ready, _ = ray.wait(handles, num_returns=len(handles), timeout=0)  # and all others already done
        self._check_raylet()  # a large reply is read from the raylet's object store
        try:
            return [(ref, data if isinstance(data, bytes) else None, "") for ref, data in zip(
                ready, ray.get(ready), strict=True)]  # one call for all: the common case
        except ray.exceptions.RayError:
            return [self._get_one(ref) for ref in ready]

    def _get_one(self, ref: Any) -> tuple[Any, bytes | None, str]:
        """One task's result, or the platform's error (the worker died, or the task was cancelled)."""
        ray = self._ray
        try:
            data = ray.get(ref)
            return ref, data if isinstance(data, bytes) else None, ""
        except ray.exceptions.RayError as exc:
            return ref, None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    def _stop(self, handles: list[Any]) -> None:
        for ref in handles:
            self._ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._raylet_lost:  # the head answers: Ray's driver disconnects from it, and the cluster stops
            self._pending.clear()
            self._refusals.take()
            self._policy_ref = None
            if self.token_path is not None:
                self._stop_private()
            elif self._owns_connection and self._ray.is_initialized():
                self._ray.shutdown()
            return
        if self.lost is not None:  # nothing to cancel or stop: what would try to reach the head waits for it
            self._pending.clear()
            self._refusals.take()
            self._policy_ref = None
            self._owns_connection = False
            return
        self.cancel()
        self._policy_ref = None
        if self.token_path is not None:
            self._stop_private()
        elif self._owns_connection and self._ray.is_initialized():
            self._ray.shutdown()


def local_raylet() -> Any:
    """The raylet process (``psutil.Process``) that this driver talks to, where it runs on this machine: the one
    serving the driver's raylet socket; None through Ray Client, or where it cannot be seen."""
    import psutil
    from ray._private import worker

    socket_name = getattr(getattr(worker, "_global_node", None), "raylet_socket_name", None)
    if not socket_name:
        return None
    wanted = f"--raylet_socket_name={socket_name}"
    for proc in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["name"] == "raylet" and wanted in (proc.info["cmdline"] or ()):
                return proc
    return None


def _running(proc: Any) -> bool:
    """Whether ``proc`` (a ``psutil.Process``) still runs: not ended, not a zombie (the private cluster's raylet
    is this process's child, which nobody reaps while the driver runs), and, where Linux says, not exiting: a
    killed raylet takes some 10 ms to end (its memory is torn down before its sockets close), and a call that
    reaches it meanwhile still takes the driver with it."""
    import psutil

    try:
        if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    try:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return not int(fields[6]) & _PF_EXITING
    except FileNotFoundError:
        return False
    except (OSError, ValueError, IndexError):  # not Linux: what psutil said
        return True


_PF_EXITING = 0x4  # Linux's flag of a process that has begun to exit (field 9 of /proc/PID/stat)


RAYLET_DIED_REPORT = "Raylet is terminated"  # how the report Ray's agents publish when their raylet dies begins


def _quiet_raylet_death_reports() -> None:
    """Keep Ray's report of a dead raylet off the terminal: its agents publish it to every driver, which prints it
    (the raylet log's last 20 lines) on stdout; the run says what happened in its own one line. Other messages
    Ray's driver prints are left alone. Installed once per process, in Ray's driver module."""
    from ray._private import worker

    shown = getattr(worker, "print_to_stdstream", None)
    if shown is None or getattr(shown, "minionsrl_quiet", False):
        return

    def print_to_stdstream(data: dict[str, Any], ignore_prefix: bool) -> None:
        if any(str(line).startswith(RAYLET_DIED_REPORT) for line in data.get("lines", ())):
            return
        shown(data, ignore_prefix)

    print_to_stdstream.minionsrl_quiet = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_to_stdstream


def probe_cluster(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail at once, with one line, where nothing accepts a TCP connection at the address ``ray.init`` would
    connect to for ``address`` (``HOST:PORT``, ``ray://HOST[:PORT]`` or ``auto``); an address it cannot work
    out is left to ``ray.init`` to judge."""
    target = _bootstrap_target(address)
    if target is None:
        return
    host, port = target
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as exc:
        if isinstance(exc, ConnectionRefusedError):
            why = "connection refused: nothing listens there"
        elif isinstance(exc, TimeoutError):
            why = f"no answer within {timeout_s:g} s"
        elif isinstance(exc, socket.gaierror):
            why = f"cannot resolve {host!r}"
        else:
            why = exc.strerror or type(exc).__name__
        how = ("`ray start --head` there (Ray Client listens on port 10001)" if address.startswith("ray://") else
               f"`ray start --head --port={port}` on that machine")
        resolved = "" if host in address else " (Ray's address for it: this node's for a local one)"
        raise ConfigError(f"ray_address: no Ray cluster at {address!r}: tried a TCP connection to {host}:{port}"
                          f"{resolved} ({why}); start one with {how}, or leave --ray-address empty for a private "
                          "one") from None


def _bootstrap_target(address: str) -> tuple[str, int] | None:
    """(host, port) that Ray connects to for ``address``: its own resolution (``auto`` read from the
    environment, ``localhost`` as the node's address), or None where it cannot say (Ray will)."""
    from ray._private import services

    try:
        if address.startswith("ray://"):
            hostport = address.removeprefix("ray://").split("/", 1)[0]
            parsed = services.parse_address(hostport) or (hostport, CLIENT_PORT)
        else:
            canonical = services.canonicalize_bootstrap_address(address)
            parsed = services.parse_address(canonical) if canonical else None
        return (parsed[0], int(parsed[1])) if parsed and parsed[0] else None
    except Exception:  # malformed, or "auto" with no cluster recorded: ray.init says so at once
        return None


def reload_ray_auth() -> None:
    """Make this process's Ray see the authentication settings now in the environment (it caches them)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _token_auth_enabled() -> bool:
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    return bool(is_token_auth_enabled())


def _is_auth_error(exc: BaseException | None) -> bool:
    """Whether Ray refused to connect for want of the right token: an ``AuthenticationError`` somewhere in the
    exception's chain, or quoted in one's text (Ray wraps the GCS client's error as text in some paths)."""
    from ray.exceptions import AuthenticationError

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, AuthenticationError) or "AuthenticationError" in str(exc) or "InvalidAuthToken" in str(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
