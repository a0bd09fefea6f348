"""Body of a ``local`` backend instance: a process that serves invocations one at a time.

Kept apart from :mod:`minionsrl.backends.local` so that the fork server preloads only what a
function needs (NumPy, Gymnasium, the rollout function) and never torch.
"""

from __future__ import annotations

import signal
import time
from multiprocessing.connection import Connection
from pathlib import Path

from minionsrl import rollout

READY = b"ready"
STOP = b"stop"


def _read_policy(ref: str) -> bytes:
    return Path(ref).read_bytes()


def serve(conn: Connection, key: bytes) -> None:
    """Announce readiness (with the monotonic time it was reached), then answer request bytes with
    reply bytes until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle
    try:
        conn.send_bytes(READY + b" " + repr(time.monotonic()).encode())
        while True:
            request = conn.recv_bytes()
            if request == STOP:
                return
            conn.send_bytes(rollout.handle(request, _read_policy, key))
    except (EOFError, OSError):  # the learner closed this instance (or died): nothing left to serve
        return
