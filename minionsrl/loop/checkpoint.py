"""Checkpoints: written atomically (temporary file, fsync, rename), read with weights-only loading.

Only tensors and plain containers of numbers and strings go in, so ``torch.load(weights_only=True)``
can read them back without unpickling arbitrary objects.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

from minionsrl.errors import ConfigError

LATEST = "latest.pt"
# Test hook: "ROUND:MARKER" makes the checkpoint of round ROUND stop half-written, touch MARKER and wait (to be
# killed there), so tests can kill a learner in the middle of writing a checkpoint.
PAUSE_ENV = "MINIONSRL_TEST_PAUSE_IN_CHECKPOINT"


def save(directory: str | Path, state: dict[str, Any], name: str = LATEST) -> Path:
    """Write ``state`` to ``directory/name`` so that a crash leaves the previous file intact."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    tmp = directory / f".{name}.tmp"
    buffer = io.BytesIO()
    import torch  # imported when first needed: a run's set-up starts its functions meanwhile

    torch.save(state, buffer)
    data = buffer.getvalue()
    with open(tmp, "wb") as fh:
        fh.write(data[: len(data) // 2])
        _test_pause(state)
        fh.write(data[len(data) // 2 :])
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)
    return path


def _test_pause(state: dict[str, Any]) -> None:
    hook = os.environ.get(PAUSE_ENV)
    if not hook:
        return
    round_idx, marker = hook.split(":", 1)
    if int(state.get("round", -1)) == int(round_idx):
        Path(marker).touch()
        time.sleep(600)


def load(directory: str | Path, name: str = LATEST) -> dict[str, Any] | None:
    """Read checkpoint ``name`` (default: the latest) in ``directory``, or None if there is none."""
    path = Path(directory) / name
    if not path.exists():
        return None
    try:
        import torch

        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated, corrupted, or holding objects weights-only loading refuses
        raise ConfigError(f"--resume: checkpoint {str(path)!r} cannot be read ({type(exc).__name__}); restore it "
                          "from a kept checkpoints/round-NNNNN.pt or start a new run") from exc
