"""``lithops``: invocations through Lithops' ``FunctionExecutor`` on any of its compute backends.

Compute and storage come from the user's Lithops config (``--lithops-config``, else Lithops' own
lookup: ``LITHOPS_CONFIG_FILE`` or ``~/.lithops/config``, else its localhost backend): AWS Lambda,
Azure Functions / Container Apps, GCP, Kubernetes, Knative, OpenWhisk... The policy is written to
Lithops storage once per round and functions read it by key; each function writes its reply (HMAC-
authenticated safetensors) to storage and returns nothing. The learner reads the JSON call status
and those reply objects itself — it never asks Lithops for results or exceptions, which Lithops
would unpickle. ``runtime_memory`` and ``timeout`` are the function's memory and deadline, the same
numbers the cost ledger bills with.

On the localhost backend, functions run with this interpreter (Lithops would otherwise pick the
first ``python`` on PATH) under Lithops' ``version: 1`` runner (its ``version: 2`` left jobs hanging
here); runs there are cold on every round, because each round is a new Lithops job.

The run key never goes through Lithops (whose job payloads and call arguments land in storage, or in
job files on localhost): on localhost it is in a file only this user can read (0600), whose *path* is
in the call; on a cloud platform each function derives it from a secret in its own environment
(``MINIONSRL_FUNCTION_KEY``, set on the deployed function, never in the Lithops config) and a random
per-run nonce that is in the call. Replies are signed with the invocation's own key
(:func:`minionsrl.function.wire.invocation_key`), so one cannot stand in for another.

Throttling: Lithops retries a refused invocation itself on OpenWhisk and Azure (their HTTP 429), and on AWS
Lambda its invoker raises ``Error 429: ...`` in a thread of its own, which only logs it, so such a call shows up
here as a time-out; an injected ``throttle`` fault is refused at submission
(:class:`~minionsrl.backends.base.Refusals`) and counted ``throttled``. Out of memory: a function whose process
Lithops saw SIGKILLed (its handler reports a ``MemoryError``: "what the out-of-memory killer does"), or whose
own allocation failed (``MemoryError`` in its error reply), is recorded ``oom``; functions learn their memory
(``runtime_memory``) from ``MINIONSRL_FUNCTION_MEMORY_MB``.

A policy object that storage lost or mangled (deleted, overwritten: anyone who can write the bucket can) would
fail every retry of the round the same way. So a function checks the policy it reads (its HMAC, with the run
key) and reports one it cannot read or verify as :class:`PolicyUnavailable`; the learner then writes that
policy to its key again, once per publish, before the failed calls are retried. A storage that loses it again
ends the run with the round's one line. Closing the backend stops Lithops' job monitor, whose thread would
otherwise go on polling while the interpreter exits and print a traceback each time.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sys
import time
import uuid
import weakref
from pathlib import Path
from typing import Any

import yaml

from minionsrl.backends.base import Reply, concurrency, learner_path, retire_policies
from minionsrl.backends.remote import RemoteBackend, private_file, remove_private_file
from minionsrl.errors import ConfigError
from minionsrl.function import rollout, wire
from minionsrl.function.extras import missing_extra_error
from minionsrl.function.faults import DEFAULT_MEMORY_MB, MEMORY_ENV
from minionsrl.redact import redact_text

_SYS_PATH_VAR = "MINIONSRL_SYS_PATH"
_DONE = ".done"
FUNCTION_KEY_ENV = "MINIONSRL_FUNCTION_KEY"  # cloud: the secret a deployed function derives run keys from
CONFIG_FILE = "minionsrl_config_file"  # lithops_config's note of the file it read (None: none)
KEY_PREFIX = "minionsrl-lithops-key-"  # localhost: the run key's private folder under the system's temp folder


def lithops_rollout(request: str, reply_key: str, run_key: dict[str, str], storage: Any) -> None:
    """The Lithops function (``storage`` is injected by Lithops): run the rollout function, fetching the
    policy from storage only when this worker does not hold it, and write the reply to ``reply_key``.
    ``run_key`` says where the run key is (:func:`function_run_key`); it is not the key."""
    for path in reversed(os.environ.get(_SYS_PATH_VAR, "").split(os.pathsep)):
        if path and path not in sys.path:  # localhost: see what the learner imports (custom env modules)
            sys.path.insert(0, path)
    bucket, key = storage.bucket, function_run_key(run_key)
    reply = rollout.handle(request.encode(), lambda ref: fetch_policy(storage, bucket, ref, key), key)
    storage.put_object(bucket, reply_key, reply)
    # then a marker: the learner lists markers, so it never reads a reply still being written (some
    # storages, Lithops' localhost one among them, make an object visible before it is complete)
    storage.put_object(bucket, reply_key + _DONE, b"")


class PolicyUnavailable(RuntimeError):
    """A function found the round's policy object missing from storage, or failing its check: lost or mangled by
    the storage (or by someone who can write it), not a fault of the function. The learner writes it again."""


def fetch_policy(storage: Any, bucket: str, ref: str, key: bytes) -> bytes:
    """The policy object ``ref``, checked with the run key (its HMAC); :class:`PolicyUnavailable` where it cannot
    be read or does not pass (the reply says so, and the learner re-publishes it)."""
    try:
        blob = storage.get_object(bucket, ref)
    except Exception as exc:  # Lithops storage raises its own NoSuchKey per provider
        raise PolicyUnavailable(f"the policy object {ref} cannot be read from storage ({type(exc).__name__})") from exc
    try:
        wire.decode(blob, key)
    except wire.WireError as exc:
        raise PolicyUnavailable(f"the policy object {ref} in storage fails its check ({exc})") from exc
    return blob


def policy_unavailable(error: str) -> bool:
    """Whether a failed invocation's error is a function's report of a policy it could not read or verify."""
    return error.startswith(f"{PolicyUnavailable.__name__}:")


def function_run_key(where: dict[str, str]) -> bytes:
    """The run key, as a function gets it: read from the file named in the call (localhost), or derived from
    the function's secret (``MINIONSRL_FUNCTION_KEY`` in its environment) and the run's nonce (cloud)."""
    if "file" in where:
        return Path(where["file"]).read_bytes()
    return run_key_from_secret(function_secret(os.environ.get(FUNCTION_KEY_ENV)), where["nonce"])


def run_key_from_secret(secret: bytes, nonce: str) -> bytes:
    """A cloud run's key: derived from the function secret and the run's random nonce."""
    return wire.derive_key(secret, f"run:{nonce}")


def function_secret(value: str | None) -> bytes:
    """``MINIONSRL_FUNCTION_KEY``: at least 32 random bytes, as hex; a one-line ConfigError otherwise."""
    fix = (f"set {FUNCTION_KEY_ENV} to 64 hex characters (python -c \"import secrets; print(secrets.token_hex(32))\") "
           "in the learner's environment and in the deployed function's (docs/DEPLOY.md)")
    if not value:
        raise ConfigError(f"lithops: cloud functions derive the run's key from {FUNCTION_KEY_ENV}, which is not "
                          f"set; {fix}")
    try:
        secret = bytes.fromhex(value.strip())
    except ValueError:
        secret = b""
    if len(secret) < wire.KEY_BYTES:
        raise ConfigError(f"lithops: {FUNCTION_KEY_ENV} is not at least 32 bytes of hex; {fix}")
    return secret


def lithops_config(path: str | None) -> dict[str, Any]:
    """The Lithops config to run with: ``path``, else Lithops' usual files, else its localhost backend;
    localhost gets this interpreter as runtime and the ``version: 1`` runner unless the file says otherwise."""
    candidates = [path] if path else [os.environ.get("LITHOPS_CONFIG_FILE"), str(Path.home() / ".lithops/config")]
    found = next((p for p in candidates if p and Path(p).is_file()), None)
    if path and found is None:
        raise ConfigError(f"lithops_config: {path!r} does not exist; give the path of a Lithops config file")
    try:
        config = yaml.safe_load(Path(found).read_text()) if found else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"lithops_config: {found!r} is not valid YAML ({str(exc).splitlines()[0]})") from exc
    config = config if isinstance(config, dict) else {}
    settings = config.setdefault("lithops", {})
    settings.setdefault("backend", "localhost")
    settings.setdefault("storage", "localhost")
    settings.setdefault("log_level", "WARNING")
    if settings["backend"] == "localhost":
        local = config.setdefault("localhost", {})
        local.setdefault("runtime", sys.executable)
        local.setdefault("version", 1)
    else:
        function_secret(os.environ.get(FUNCTION_KEY_ENV))  # missing or short: one line, before any work
    config[CONFIG_FILE] = found  # for the summary (LithopsBackend.where); taken out before Lithops sees the config
    return config


class LithopsBackend(RemoteBackend):
    """Rollout functions through a Lithops ``FunctionExecutor``."""

    name = "lithops"

    def __init__(self, key: bytes, config: dict[str, Any], memory_mb: int = int(DEFAULT_MEMORY_MB),
                 invocation_timeout_s: float | None = None, max_concurrency: int | None = None,
                 poll_interval_s: float | None = None) -> None:
        super().__init__(key, invocation_timeout_s)
        try:
            from lithops import FunctionExecutor, Storage
            from lithops.constants import JOBS_DIR, JOBS_PREFIX
        except ImportError as exc:
            raise missing_extra_error("--backend lithops", "lithops") from exc
        self.config_file: str | None = config.pop(CONFIG_FILE, None)  # the Lithops config file read, if any
        self.localhost = config["lithops"]["backend"] == "localhost"
        self._compute = str(config["lithops"]["backend"])
        self._jobs_dir = Path(JOBS_DIR)  # where Lithops' localhost runner marks finished jobs
        self._jobs_prefix = JOBS_PREFIX  # where Lithops keeps a job's data in storage
        if self.localhost and max_concurrency:
            config.setdefault("localhost", {})["worker_processes"] = max_concurrency
        self.max_concurrency = (config["localhost"].get("worker_processes", concurrency(None)) if self.localhost
                                else max_concurrency or config["lithops"].get("max_workers", 1000))
        self.memory_mb = memory_mb
        self.poll_interval_s = poll_interval_s or (0.02 if self.localhost else 0.25)
        self.status_interval_s = 0.5
        self._status_checked = 0.0
        # the run key stays out of Lithops: a 0600 file on this machine, or derived from the function's secret
        self._key_file: Path | None = None
        if self.localhost:
            self._key_file = private_file(KEY_PREFIX, "run.key", self.key)
            self._remove_key_file = weakref.finalize(self, remove_private_file, self._key_file)
            self._key_where = {"file": str(self._key_file)}
        else:
            nonce = uuid.uuid4().hex
            self.key = run_key_from_secret(function_secret(os.environ.get(FUNCTION_KEY_ENV)), nonce)
            self._key_where = {"nonce": nonce}
        _own_lithops_session()
        # the config holds credentials: it goes to Lithops and nowhere else (never logged, never saved)
        try:
            self._executor = FunctionExecutor(config=config)
            self._storage = Storage(config=config)
        except ImportError as exc:  # a cloud's SDK missing: boto3 for AWS
            raise ConfigError(f"--backend lithops: Lithops' {self._compute} backend needs the Python package "
                              f"{exc.name or 'its SDK'!r}, which is not installed here; install it where the learner "
                              "runs (docs/DEPLOY.md)") from exc
        except Exception as exc:  # Lithops' checks of the config, the cloud's of its credentials, as they start
            raise self._not_started(exc) from exc
        self._bucket = self._storage.bucket
        self._prefix = f"minionsrl/{self._executor.executor_id}"
        self._policies: list[str] = []  # policy keys in storage, oldest first
        self._blobs: dict[str, bytes] = {}  # what each of them holds, to write it again should storage lose it
        self._republished: set[str] = set()  # the keys written again already (once each)
        self.republishes = 0
        self._statuses = concurrent.futures.ThreadPoolExecutor(max_workers=16)  # a status read is a GET

    def _not_started(self, exc: Exception) -> ConfigError:
        """The one line for a Lithops executor or storage that would not start (a section missing, no credentials
        found): what it said, credentials redacted, and what to check (no ``Name: text`` in it, which the CLI's
        redaction would read as an assignment to a secret: ``NoCredentialsError: Unable …``)."""
        said = redact_text(str(exc).strip().splitlines()[0]) if str(exc).strip() else ""
        source = f"the Lithops config {self.config_file}" if self.config_file else "Lithops' default config"
        return ConfigError(f"--backend lithops: {source} did not start its {self._compute} executor "
                           f"({type(exc).__name__}{', ' + said if said else ''}); check its {self._compute} section "
                           "and the credentials it reads (docs/DEPLOY.md)")

    def where(self) -> str:
        """Lithops' compute backend and the config that chose it (``Lithops localhost (no Lithops config found)``)."""
        source = f"config {self.config_file}" if self.config_file else "no Lithops config found"
        return f"Lithops {self._compute} ({source})"

    def publish(self, policy_blob: bytes) -> str:
        """Write the round's policy to storage once; earlier ones are deleted once no call in flight uses them."""
        self.publishes += 1
        key = f"{self._prefix}/policy-{self.publishes}"
        self._storage.put_object(self._bucket, key, policy_blob)
        self._policies.append(key)
        self._blobs[key] = policy_blob
        self._retire_policies()
        return key

    def collect(self, timeout: float | None = None) -> list[Reply]:
        policies = {p.id: p.request.policy for p in self._pending.values()}
        replies = super().collect(timeout)
        for reply in replies:
            if not reply.ok and policy_unavailable(reply.record.error):
                self._republish(policies.get(reply.record.invocation_id, ""), reply)
        self._retire_policies()
        return replies

    def _republish(self, key: str, reply: Reply) -> None:
        """Write policy ``key`` to storage again, the first time a function reports it lost or mangled, so that
        the failed call's retry reads it; its error says so."""
        if key not in self._blobs or key in self._republished:
            return
        self._storage.put_object(self._bucket, key, self._blobs[key])
        self._republished.add(key)
        self.republishes += 1
        reply.record.error += "; the learner wrote the policy to storage again"

    def _retire_policies(self) -> None:
        retired = retire_policies(self._policies, {p.request.policy for p in self._pending.values()})
        for key in retired:
            self._blobs.pop(key, None)
            self._republished.discard(key)
        if retired:
            self._storage.delete_objects(self._bucket, retired)

    def _start(self, payloads: list[bytes]) -> list[Any]:
        reply_keys = [f"{self._prefix}/reply-{uuid.uuid4().hex}" for _ in payloads]
        args = [{"request": p.decode(), "reply_key": k, "run_key": self._key_where}
                for p, k in zip(payloads, reply_keys, strict=True)]
        extra_env = {MEMORY_ENV: str(self.memory_mb),
                     **({_SYS_PATH_VAR: learner_path()} if self.localhost else {})}
        timeout = None if self.invocation_timeout_s is None else max(1, int(self.invocation_timeout_s + 1))
        futures = self._executor.map(lithops_rollout, args, runtime_memory=self.memory_mb, timeout=timeout,
                                     extra_env=extra_env, include_modules=[])
        for future, reply_key in zip(futures, reply_keys, strict=True):
            future.minionsrl_reply_key = reply_key
        return list(futures)

    def _poll(self, handles: list[Any], timeout: float | None) -> list[tuple[Any, bytes | None, str]]:
        """Replies are found with one listing per poll; the calls' statuses, one read each, are checked
        only every ``status_interval_s``, to notice the calls that ended without a reply."""
        end = None if timeout is None else time.perf_counter() + timeout
        while True:
            present = set(self._storage.list_keys(self._bucket, f"{self._prefix}/reply-"))
            ended = [(f, "") for f in handles if f.minionsrl_reply_key + _DONE in present]
            now = time.perf_counter()
            if not ended and now - self._status_checked >= self.status_interval_s:
                self._status_checked = now
                ended = [(f, why) for f, why in zip(handles, self._statuses.map(self._why_ended, handles),
                                                    strict=True) if why is not None]
            if ended or (end is not None and now >= end):
                return [self._result(f, why) for f, why in ended]
            time.sleep(self.poll_interval_s if end is None else min(self.poll_interval_s, max(0.0, end - now)))

    def _why_ended(self, future: Any) -> str | None:
        """None while the call may still answer; else why it has no reply, should its reply be missing. Read
        from the JSON status Lithops' worker wrote; on localhost, a job whose runner has finished (its
        ``.done`` file) runs nothing more, so a call of it without a status was lost with a dead worker."""
        status = self._executor.internal_storage.get_call_status(future.executor_id, future.job_id, future.call_id)
        if status and status.get("type") == "__end__":
            died = "the function died" if status.get("exception") else "the function wrote no reply"
            if status.get("exception") and "MemoryError" in str(status.get("exc_info", "")):  # text, not unpickled
                died = ("out of memory: Lithops saw the function's process SIGKILLed, as the out-of-memory killer "
                        "does")
            return f"{died} (Lithops activation {status.get('activation_id', '?')})"
        if self.localhost and (self._jobs_dir / f"{future.job_key}.done").exists():
            return "the Lithops job ended without finishing this call (its worker process died)"
        return None

    def _result(self, future: Any, why: str) -> tuple[Any, bytes | None, str]:
        """The reply the function wrote, or ``why`` there is none."""
        try:
            data = self._storage.get_object(self._bucket, future.minionsrl_reply_key)
            self._storage.delete_objects(self._bucket, [future.minionsrl_reply_key, future.minionsrl_reply_key + _DONE])
        except Exception:  # Lithops storage raises its own NoSuchKey per provider
            data = None
        return (future, data, "") if data is not None else (future, None, why or "the function wrote no reply")

    def _stop(self, handles: list[Any]) -> None:
        """Lithops cannot stop one call of a job; a job whose calls are all abandoned is stopped (localhost
        kills its process; cloud platforms end it at its timeout)."""
        abandoned = {id(h) for h in handles}
        for job_key in {h.job_key for h in handles}:
            if all(id(p.handle) in abandoned for p in self._pending.values() if p.handle.job_key == job_key):
                self._executor.compute_handler.clear({job_key}, exception=RuntimeError("cancelled by minionsrl"))

    def close(self) -> None:
        try:
            self.cancel()
            self._statuses.shutdown(wait=False)
            self._stop_monitor()
            # our policies, and the executor's job data: Lithops' clean() hands the latter to a cleaner process
            # that outlives us (a minute and more on localhost), which then finds nothing left and ends at once
            for prefix in (self._prefix + "/", f"{self._jobs_prefix}/{self._executor.executor_id}-"):
                keys = self._storage.list_keys(self._bucket, prefix)
                if keys:
                    self._storage.delete_objects(self._bucket, keys)
            self._executor.clean(clean_cloudobjects=False)
        finally:
            if self._key_file is not None:
                self._remove_key_file()

    def _stop_monitor(self) -> None:
        """Stop Lithops' job monitor and wait for it (briefly). This backend reads call statuses itself and never
        waits on Lithops' futures, so nothing else stops it before the interpreter exits, and while it exits the
        monitor's thread pool refuses work: each poll then logs a warning with a traceback."""
        monitor = getattr(self._executor, "job_monitor", None)
        if monitor is None:
            return
        with contextlib.suppress(Exception):  # what is left of it goes with the process
            monitor.stop()
            monitor.cleanup()


def _own_lithops_session() -> None:
    """Make this process's executors a Lithops session of its own. Lithops exports its session id and executor
    count to the environment, and a process started from one that used Lithops adopts that session and counts on
    from the exported number, while its parent counts on in memory: the two then name executors alike, and with
    them jobs and storage keys (a stale ``.done`` of the parent's job made this process's calls look lost).
    A session inherited that way is dropped here, so Lithops starts a fresh one."""
    from lithops import constants
    from lithops import utils as lithops_utils

    inherited = os.environ.get(constants.SESSION_ID_ENV)
    if inherited and inherited != getattr(lithops_utils, "_SESSION_ID", None):
        os.environ.pop(constants.SESSION_ID_ENV, None)
        os.environ.pop(constants.TOTAL_EXECUTORS_ENV, None)
