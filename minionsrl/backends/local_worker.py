"""A ``local`` backend instance: ``python -m minionsrl.backends.local_worker``, one per instance.

A fresh interpreter that imports only what a function needs (NumPy, Gymnasium, the rollout
function; never the learner's framework, never the learner's ``__main__``), so its cold start is what a function's
would be. It talks over its stdin/stdout pipes in length-prefixed frames (8-byte little-endian size,
then the bytes): first it reads the run's HMAC key, then announces readiness with the monotonic time
it was reached, then answers each request frame with a reply frame until told to stop or until its
stdin closes. Nothing on the pipes is pickled.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import time
from pathlib import Path
from typing import BinaryIO

READY = b"ready"
STOP = b"stop"
_HEADER = struct.Struct("<Q")


def write_frame(stream: BinaryIO, data: bytes) -> None:
    """Write ``data`` to ``stream`` as one length-prefixed frame, and flush it."""
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


class FrameTooLarge(ValueError):
    """A frame announced more bytes than the reader allows; its body was not read (the stream is out of step)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a frame of {size} bytes, over the {limit}-byte limit")
        self.size, self.limit = size, limit


def read_frame(stream: BinaryIO, limit: int | None = None) -> bytes | None:
    """The next frame, or None at end of stream (the other side is gone). A frame that announces more than
    ``limit`` bytes raises :class:`FrameTooLarge` before its body is read."""
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    size = _HEADER.unpack(header)[0]
    if limit is not None and size > limit:
        raise FrameTooLarge(size, limit)
    return _read_exactly(stream, size)


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    chunks, remaining = [], size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_policy(ref: str) -> bytes:
    return Path(ref).read_bytes()


def main() -> None:
    """Serve invocations on stdin/stdout until stopped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle
    # frames get a private copy of stdout; fd 1 goes to stderr, so a print() in an env cannot corrupt them
    frames_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    frames_in = os.fdopen(os.dup(0), "rb", buffering=0)
    key = read_frame(frames_in)
    if key is None:
        return
    from minionsrl.function import rollout  # imported after the pipes are set up: import output goes to stderr

    try:
        write_frame(frames_out, READY + b" " + repr(time.monotonic()).encode())
        while True:
            request = read_frame(frames_in)
            if request is None or request == STOP:
                return
            write_frame(frames_out, rollout.handle(request, _read_policy, key))
    except (BrokenPipeError, OSError):  # the learner closed this instance (or died)
        return


if __name__ == "__main__":
    sys.exit(main())
