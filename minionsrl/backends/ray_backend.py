"""``ray``: each invocation is a Ray task; the round's policy goes into Ray's object store once.

With ``address`` the learner joins a running cluster (``ray start --head`` on one machine, ``ray start
--address=HEAD:6379`` on the others); without it a local single-node cluster is started and stopped
with the backend. Ray reuses worker processes, so a warm worker keeps its environments and the last
policy in the rollout function's module globals, as a warm function instance does.

Tasks run with ``max_retries=0``: retrying is the learner's decision (it must be billed and counted),
not Ray's. What crosses the cluster is bytes — JSON requests, and HMAC-authenticated safetensors
policies and replies — which the learner verifies itself; Ray's own transport is trusted as part of
the cluster the user runs (see docs/DEPLOY.md).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from minionsrl.backends.remote import RemoteBackend
from minionsrl.errors import ConfigError
from minionsrl.function import rollout


def ray_rollout(payload: bytes, policy_refs: list[Any], key: bytes) -> bytes:
    """The Ray task: the rollout function, fetching the policy from the object store only when the
    worker does not hold this round's already. The ref travels in a list so Ray does not fetch it eagerly."""
    import ray

    return rollout.handle(payload, lambda _ref: ray.get(policy_refs[0]), key)


class RayBackend(RemoteBackend):
    """Rollout functions as Ray tasks on a local or existing Ray cluster."""

    name = "ray"

    def __init__(self, key: bytes, address: str | None = None, num_cpus: float = 1.0,
                 max_concurrency: int | None = None, invocation_timeout_s: float | None = None) -> None:
        super().__init__(key, invocation_timeout_s)
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("backend 'ray' needs Ray: pip install 'minionsrl[ray]'") from exc
        self._ray = ray
        self._owns_connection = not ray.is_initialized()  # a caller that connected keeps its connection
        if self._owns_connection:
            self._connect(address, max_concurrency)
        self.max_concurrency = max(1, int(ray.cluster_resources().get("CPU", 1) // num_cpus))  # tasks at once
        self._task = ray.remote(ray_rollout).options(num_cpus=num_cpus, max_retries=0)
        self._policy_ref: Any = None

    def _connect(self, address: str | None, max_concurrency: int | None) -> None:
        ray = self._ray
        if address:
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(f"ray_address: cannot join the Ray cluster at {address!r} ({exc}); start it "
                                  "with `ray start --head` or leave --ray-address empty for a local one") from exc
            return
        # A local cluster: its workers see what this interpreter imports (custom env modules included);
        # no auth token written to the home folder for a cluster that lives and dies with this run.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(address="local", num_cpus=max_concurrency or os.cpu_count() or 1, include_dashboard=False,
                 log_to_driver=False, configure_logging=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}})

    def publish(self, policy_blob: bytes) -> str:
        """Put the round's policy in the object store once; tasks in flight keep the old one alive."""
        self.publishes += 1
        self._policy_ref = self._ray.put(policy_blob)
        return f"ray:{self._policy_ref.hex()}"

    def _start(self, payloads: list[bytes]) -> list[Any]:
        return [self._task.remote(p, [self._policy_ref], self.key) for p in payloads]

    def _poll(self, handles: list[Any], timeout: float | None) -> list[tuple[Any, bytes | None, str]]:
        ray = self._ray
        ready, _ = ray.wait(handles, num_returns=1, timeout=timeout)
        if not ready:
            return []
        ready, _ = ray.wait(handles, num_returns=len(handles), timeout=0)  # and all others already done
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
        self.cancel()
        self._policy_ref = None
        if self._owns_connection and self._ray.is_initialized():
            self._ray.shutdown()
