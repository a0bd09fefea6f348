"""Helpers that read or tamper with a run directory's files, shared by the tests and ``bench/hostile.py``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


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
