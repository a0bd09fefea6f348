"""Helpers that start a training process, read or tamper with a run directory's files, shared by the tests and
``bench/robustness.py hostile``."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def train_process(args: list[str], env: dict[str, str], stdout: int = subprocess.DEVNULL) -> subprocess.Popen:
    """``minionsrl train ARGS`` in a session of its own (so that a test can signal its group), its stderr piped
    (and its stdout where a test reads it: ``stdout=subprocess.PIPE``)."""
    return subprocess.Popen([sys.executable, "-m", "minionsrl.cli", "train", *args], env=env, stdout=stdout,
                            stderr=subprocess.PIPE, start_new_session=True)


def wait_rounds(run_dir: Path, n: int, proc: subprocess.Popen, timeout_s: float = 180) -> None:
    """Wait until the run has written ``n`` metrics rows; fail with its stderr if it ended first (``timeout_s``: a
    run that hangs fails the test rather than holding the suite)."""
    from minionsrl.loop.metrics import read_rows

    deadline = time.monotonic() + timeout_s
    while len(read_rows(run_dir / "metrics.csv", missing_ok=True)) < n:
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, f"no round {n} within {timeout_s} s"
        time.sleep(0.05)


def alive(process: Any, started: float | None = None) -> bool:
    """Whether a ``psutil.Process`` still runs (not a zombie; the same process, where its start time ``started`` is
    given): a process that ends while it is asked is gone, not an error."""
    import psutil

    try:
        return (process.is_running() and process.status() != psutil.STATUS_ZOMBIE
                and (started is None or process.create_time() == started))
    except psutil.Error:
        return False


def command_line(process: Any) -> str:
    """A ``psutil.Process``'s name and command line, "" if it has ended meanwhile."""
    import psutil

    try:
        return f"{process.name()} {' '.join(process.cmdline())}"
    except psutil.Error:
        return ""


def set_at(path: str, value: Any) -> Callable[[dict], None]:
    """A change of a checkpoint's state at ``path`` (``a/b/c``): ``value``, ``value(old)`` if callable, or the key
    deleted if ``value`` is ``KeyError``."""
    def change(state: dict) -> None:
        *parents, last = path.split("/")
        node = state
        for key in parents:
            node = node[key]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value(node[last]) if callable(value) else value
    return change


def tensorboard_events(run_dir: Path) -> list:
    """The events of a run's one TensorBoard file, in order (TFRecord framing: length, its CRC, data, its CRC)."""
    from tensorboardX.proto.event_pb2 import Event

    (path,) = (Path(run_dir) / "tensorboard").iterdir()
    data, events = path.read_bytes(), []
    while data:
        size = int.from_bytes(data[:8], "little")
        events.append(Event.FromString(data[12 : 12 + size]))
        data = data[16 + size :]
    return events
