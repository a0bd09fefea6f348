"""Folders a learner owns in the system's temporary folder, owned by a lock rather than by a process id.

The local backend's published policies, a private Ray cluster's token and the Lithops run key each live in a
folder of the temporary folder. A learner killed with SIGKILL cannot remove its folder, so the next one to
start sweeps them. Process ids cannot say which are abandoned: a learner in another PID namespace (a container
or ``unshare`` sharing ``/tmp``, a pod's shared volume) has a pid that means nothing here, or another process's.
So each folder holds a lock file that its learner keeps locked (``flock``) for its life; the kernel drops the
lock when the learner dies, however it dies, and a sweep removes only the folders whose lock it can take.
``flock`` works across PID namespaces on one file system.

The lock file is created under a temporary name, locked, then renamed into place, so a sweep never finds an
unlocked lock file in a live folder. A folder with no lock file is one being made right now, or one left by a
version of minionsrl before these locks: it is removed only once it has been untouched for ``UNLOCKED_GRACE_S``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

LOCK_NAME = ".owner.lock"
UNLOCKED_GRACE_S = 24 * 3600.0  # a folder without a lock file is removed once untouched this long


class OwnedFolder:
    """A new folder ``<tmp>/<prefix><pid>-<random>`` (mode 0700) locked by this process until :meth:`remove`.

    Making one first sweeps the folders of ``prefix`` whose owner is gone (:func:`sweep`). The pid in the name is
    for people reading ``/tmp``; ownership is the lock alone."""

    def __init__(self, prefix: str) -> None:
        sweep(prefix)
        self.path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))  # mode 0700, a fresh name
        staging = self.path / f"{LOCK_NAME}.new"
        # os.open's descriptors are not inherited by the workers this learner starts: only it holds the lock
        self._fd: int | None = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        staging.rename(self.path / LOCK_NAME)

    def remove(self) -> None:
        """Remove the folder and its contents, then let go of the lock (idempotent)."""
        if self._fd is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._fd)
        self._fd = None


def sweep(prefix: str) -> list[Path]:
    """Remove this user's folders of ``prefix`` in the temporary folder whose owner has let go of its lock (it
    died), and those without a lock file untouched for ``UNLOCKED_GRACE_S``; return what was removed."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        with contextlib.suppress(OSError):
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            if _abandoned(folder):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


def _abandoned(folder: Path) -> bool:
    try:
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return time.time() - folder.stat().st_mtime > UNLOCKED_GRACE_S
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its learner is alive, here or in another PID namespace
    finally:
        os.close(fd)  # our lock, if we took it, goes with the descriptor; its owner is gone for good
    return True
