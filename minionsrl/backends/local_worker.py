"""A ``local`` backend instance: ``python -m minionsrl.backends.local_worker``, one per instance.

A fresh interpreter that imports only what a function needs (NumPy, Gymnasium, the rollout
function; never the learner's framework, never the learner's ``__main__``), so its cold start is what a function's
would be. It talks over its stdin/stdout pipes in length-prefixed frames (8-byte little-endian size,
then the bytes): first it reads the run's HMAC key, then announces readiness with the monotonic time
it was reached, then answers each request frame with a reply frame until told to stop or until its
stdin closes; then it closes its envs. Nothing on the pipes is pickled. What the env prints reaches the learner's
stderr, capped per invocation (:class:`CappedOutput`).

It never outlives its learner: a thread watches the learner's pid (:data:`LEARNER_ENV`) and, once the learner is
gone (however it died), kills the worker's process group: the worker, and any process its env started. On SIGUSR1
it writes its stack to :data:`STACK_ENV`'s file (``faulthandler``, from a C signal handler: it works inside a
hung ``step``), so a timed-out invocation's error can say where it hung (:func:`where_hung`).
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import re
import select
import signal
import struct
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from minionsrl.function.fragment import HungAt

READY = b"ready"
STOP = b"stop"
_HEADER = struct.Struct("<Q")
LEARNER_ENV = "MINIONSRL_LEARNER_PID"  # the pid of the learner that started this worker
STACK_ENV = "MINIONSRL_STACK_FILE"  # where the worker writes its stack on SIGUSR1
WATCH_S = 0.5  # how often the worker looks for its learner
OUTPUT_HEAD_BYTES = 64 << 10  # of what an env prints during one invocation, this much passes to the learner ...
OUTPUT_TAIL_BYTES = 16 << 10  # ... and then only the last this much, once the invocation ends


class CappedOutput:
    """The worker's stdout and stderr (the env's prints, a simulator's logs) passed on to the learner's stderr
    capped per invocation: the first :data:`OUTPUT_HEAD_BYTES` as they come, then only the last
    :data:`OUTPUT_TAIL_BYTES`, written at :meth:`end` after a line saying how much was left out. An env that prints
    hundreds of megabytes cannot flood the learner's terminal or log."""

    def __init__(self) -> None:
        self._to = os.dup(2)  # the learner's stderr
        self._from, write_end = os.pipe()
        os.set_blocking(self._from, False)
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._lock = threading.Lock()
        self._passed, self._cut, self._tail = 0, 0, bytearray()
        threading.Thread(target=self._pump, name="minionsrl-output", daemon=True).start()
        atexit.register(self.end)  # what the worker wrote last (a traceback) before it exits

    def _pump(self) -> None:
        while True:
            select.select([self._from], [], [])
            with self._lock:
                if not self._drain():
                    return

    def _drain(self) -> bool:
        """Pass on or keep what is in the pipe now; False once it is closed."""
        while True:
            try:
                data = os.read(self._from, 1 << 16)
            except BlockingIOError:
                return True
            if not data:
                return False
            room = max(0, OUTPUT_HEAD_BYTES - self._passed)
            if room:
                os.write(self._to, data[:room])
                self._passed += min(room, len(data))
            self._tail += data[room:]
            if len(self._tail) > OUTPUT_TAIL_BYTES:
                self._cut += len(self._tail) - OUTPUT_TAIL_BYTES
                del self._tail[:-OUTPUT_TAIL_BYTES]

    def end(self) -> None:
        """An invocation ended: write what was kept of its output's end, and start counting again."""
        sys.stdout.flush()
        sys.stderr.flush()
        with self._lock:
            self._drain()
            if self._cut:
                os.write(self._to, f"\n[minionsrl: {self._cut} bytes of this function's output left out]\n".encode())
            if self._tail:
                os.write(self._to, bytes(self._tail))
            self._passed, self._cut, self._tail = 0, 0, bytearray()


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


def _watch_learner(learner: int) -> None:
    """Kill this worker's process group once its learner is gone: this process is then another's child."""
    while os.getppid() == learner:
        time.sleep(WATCH_S)
    os.killpg(os.getpgrp(), signal.SIGKILL)


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)')
SERVING = re.compile(r'local_worker\.py", line \d+ in main')  # the frame of the thread that serves invocations


def where_hung(stack: str) -> HungAt | None:
    """What a stack dumped by ``faulthandler`` (most recent call first) says a worker was doing: the phase of the
    rollout function it was in (building the env, reset, step) and its innermost frame, e.g. ``in the env's step()
    (at my_env.py:12 in step)``; None if the dump holds no frame."""
    from minionsrl.function.fragment import PHASES, HungAt  # here, not at the top: a worker starts as lean as before
    threads = [block for block in stack.split("\n\n") if _FRAME.search(block)]
    if not threads:
        return None
    serving = next((b for b in threads if SERVING.search(b)), threads[0])
    frames = [m.groupdict() for m in _FRAME.finditer(serving)]
    phase = next((PHASES[f["name"]] for f in frames if f["name"] in PHASES), "")
    top = frames[0]
    return HungAt(phase, f"{os.path.basename(top['file'])}:{top['line']} in {top['name']}")


def main() -> None:
    """Serve invocations on stdin/stdout until stopped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle
    if os.environ.get(LEARNER_ENV):
        threading.Thread(target=_watch_learner, args=(int(os.environ[LEARNER_ENV]),), daemon=True).start()
    if os.environ.get(STACK_ENV):
        stack_out = open(os.environ[STACK_ENV], "w")  # noqa: SIM115 - open for the worker's life
        faulthandler.register(signal.SIGUSR1, file=stack_out, all_threads=True)
    # frames get a private copy of stdout; fd 1 and 2 go to the learner's stderr through a cap, so a print() in an
    # env can neither corrupt them nor flood the learner
    frames_out = os.fdopen(os.dup(1), "wb", buffering=0)
    output = CappedOutput()
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
                break
            reply = rollout.handle(request, _read_policy, key)
            output.end()
            write_frame(frames_out, reply)
    except (BrokenPipeError, OSError):  # the learner closed this instance (or died)
        pass
    rollout.close_envs()


if __name__ == "__main__":
    sys.exit(main())
