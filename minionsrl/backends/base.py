"""The backend interface: publish a policy once per round, invoke many rollout functions, get replies.

A backend moves bytes and measures; it knows nothing of PPO. Every invocation yields an
:class:`InvocationRecord` whatever happened to it, and replies come back in request order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from minionsrl import wire


@dataclass
class InvocationRecord:
    """One row of ``invocations.csv``: what the platform did for one invocation."""

    invocation_id: str
    kind: str
    instance_id: str = ""
    cold: bool = False
    init_s: float = 0.0  # instance cold start (if cold) + the function's own init
    run_s: float = 0.0  # the function's stepping time
    cpu_s: float = 0.0  # CPU seconds the function used
    duration_s: float = 0.0  # dispatch to reply, as the caller saw it
    bytes_in: int = 0  # request + policy bytes the function fetched
    bytes_out: int = 0  # reply bytes
    status: str = "ok"  # "ok" | "error"
    error: str = ""

    def row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reply:
    """A decoded reply and its record. ``arrays``/``meta`` are empty when the invocation failed."""

    record: InvocationRecord
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.record.status == "ok"


def make_reply(record: InvocationRecord, data: bytes | None, key: bytes, cold_start_s: float = 0.0) -> Reply:
    """Decode a function's reply bytes into a :class:`Reply`, filling the record from its timings."""
    if data is None:
        record.status = "error"
        return Reply(record)
    record.bytes_out = len(data)
    try:
        arrays, meta = wire.decode(data, key)
    except wire.WireError as exc:
        record.status, record.error = "error", f"bad reply: {exc}"
        return Reply(record)
    if meta.get("type") == "error":
        record.status, record.error = "error", str(meta.get("error", "function failed"))
        return Reply(record, meta=meta)
    timings = meta.get("timings", {})
    record.init_s = cold_start_s + float(timings.get("init_s", 0.0))
    record.run_s = float(timings.get("run_s", 0.0))
    record.cpu_s = float(timings.get("cpu_s", 0.0))
    record.bytes_in += int(meta.get("policy_bytes", 0))
    return Reply(record, arrays, meta)


class Backend(ABC):
    """Runs rollout functions. Implementations: ``local`` (embedded FaaS runtime)."""

    name: str = "base"

    @abstractmethod
    def publish(self, policy_blob: bytes) -> str:
        """Make this round's policy available to functions once; return the reference they fetch."""

    @abstractmethod
    def invoke(self, requests: list[dict[str, Any]]) -> list[Reply]:
        """Run one function per request (each has a unique ``id``); replies in request order."""

    @abstractmethod
    def close(self) -> None:
        """Release every instance and resource."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
