"""Shared fixtures for the minionsrl test suite.

``tests/`` is put on ``sys.path`` (and on ``PYTHONPATH`` for subprocesses and the local backend's
worker processes) so that ``custom_env:ClassName`` entry points resolve everywhere.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(TESTS_DIR), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
)
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

# no example database: the suite must not write into the repository
settings.register_profile("minionsrl", database=None, deadline=None)
settings.load_profile("minionsrl")
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "minionsrl-tests-hypothesis"))


@pytest.fixture
def key() -> bytes:
    return b"k" * 32


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for child Python processes: the package and tests/ importable, no display."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join((str(TESTS_DIR), str(REPO_ROOT)))
    env["SDL_VIDEODRIVER"] = "dummy"
    env["SDL_AUDIODRIVER"] = "dummy"
    return env
