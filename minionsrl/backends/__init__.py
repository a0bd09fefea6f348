"""Backends run rollout functions: ``local`` is the embedded default."""

from __future__ import annotations

from minionsrl.backends.base import Backend, InvocationRecord, Reply

__all__ = ["Backend", "InvocationRecord", "Reply"]
