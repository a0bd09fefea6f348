"""Run ``minionsrl`` with the checkpoint of one round stopped half-written, so that a test can kill the learner
there: ``python tests/pause_in_checkpoint.py ROUND MARKER ARGS...`` runs ``minionsrl ARGS...``; when round ROUND's
latest checkpoint has half its bytes written it touches MARKER and waits (to be killed). The pause lives here, not
in the checkpoint module: production code carries no test hooks."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from minionsrl import cli, files
from minionsrl.loop import checkpoint


class _HalfThenPause:
    """A file whose first write stops half-way: it writes half the bytes, touches the marker and waits."""

    def __init__(self, fh: Any, marker: Path) -> None:
        self._fh, self._marker = fh, marker

    def write(self, data: bytes) -> int:
        self._fh.write(data[: len(data) // 2])
        self._fh.flush()
        self._marker.touch()
        time.sleep(600)
        raise AssertionError("the paused checkpoint was not killed")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def main(round_idx: int, marker: Path, argv: list[str]) -> int:
    save, replacing, armed = checkpoint.save, files.replacing, []

    def pausing_save(directory: Any, state: dict[str, Any], name: str = checkpoint.LATEST) -> Path:
        armed[:] = [name == checkpoint.LATEST and int(state.get("round", -1)) == round_idx]
        try:
            return save(directory, state, name)
        finally:
            armed.clear()

    @contextlib.contextmanager
    def pausing_replacing(path: Any, mode: str = "w", durable: bool = False, **kwargs: Any) -> Iterator[Any]:
        with replacing(path, mode, durable=durable, **kwargs) as fh:
            yield _HalfThenPause(fh, marker) if any(armed) else fh

    checkpoint.save, files.replacing = pausing_save, pausing_replacing
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]))
