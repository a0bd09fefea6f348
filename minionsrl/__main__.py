"""``python -m minionsrl`` and the ``minionsrl`` command."""

import os
import signal
import sys

from minionsrl.errors import TERMINATED, TERMINATED_CODE


def _terminated(signum: int, frame: object) -> None:
    print(f"minionsrl: {TERMINATED}", file=sys.stderr, flush=True)
    os._exit(TERMINATED_CODE)


def run() -> int:
    """The ``minionsrl`` command. A SIGTERM while its modules import (a second or more) ends it with the line it
    ends every command with; nothing has started then, so nothing is left to close. Each command then handles
    SIGTERM itself (:func:`minionsrl.cli.main`)."""
    signal.signal(signal.SIGTERM, _terminated)
    from minionsrl.cli import main

    return main()


if __name__ == "__main__":
    sys.exit(run())
