"""Custom envs as Gymnasium entry points (``--env-id mymodule:MyEnv``): a module in the current folder trains on
every backend's rollout workers without PYTHONPATH set by hand; one that cannot be found fails in one line
that says what to set."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from minionsrl import cli
from minionsrl.errors import ConfigError
from minionsrl.function.envs import check_env_id, entry_point_class

ENV_SOURCE = '''"""A user's own env, in a folder of their own."""
import gymnasium as gym
import numpy as np


class WalkEnv(gym.Env):
    """Reward 1 per step, 10 steps an episode."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 2.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t / 10, float(action)], dtype=np.float32), 1.0, self.t >= 10, False, {}
'''
TRAIN = ["--max-rounds", "2", "--actors", "2", "--fragment-length", "32", "--eval-episodes", "1",
         "--hidden-sizes", "8", "--no-progress", "--no-tensorboard"]


@pytest.fixture
def env_folder(tmp_path, monkeypatch) -> tuple[Path, str]:
    """A folder holding a fresh env module (a new name each time), made the current folder, and a ``sys.path``
    without it (restored afterwards, as is ``sys.modules``)."""
    name = f"user_env_{uuid.uuid4().hex[:10]}"
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / f"{name}.py").write_text(ENV_SOURCE)
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    yield folder, name
    sys.modules.pop(name, None)


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.integration
def test_module_in_the_current_folder_trains_on_local_workers(env_folder, tmp_path):
    """As ``minionsrl train`` runs it: the current folder is not on ``sys.path`` (the command's own folder is);
    the learner imports the module from there and the local backend's worker processes do too."""
    folder, name = env_folder
    assert importlib.util.find_spec(name) is None  # not importable as things stand
    run_dir = tmp_path / "run"
    rc = cli.main(["train", "--env-id", f"{name}:WalkEnv", "--backend", "local", *TRAIN, "--run-dir", str(run_dir)])
    assert rc == 0
    summary = _summary(run_dir)
    assert summary["rounds"] == 2 and summary["env_steps"] == 2 * 2 * 32
    assert str(folder) in sys.path  # what the workers were given


def test_module_found_through_a_relative_path_entry_is_passed_on_absolute(env_folder, monkeypatch):
    """Found through ``""`` (``python -c``, a notebook), which the backends cannot pass on: its folder goes on
    ``sys.path`` as an absolute path, so workers that start elsewhere find it."""
    folder, name = env_folder
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    assert entry_point_class(f"{name}:WalkEnv").__name__ == "WalkEnv"
    assert str(folder.resolve()) in sys.path


def test_module_nowhere_is_one_line_naming_pythonpath(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        check_env_id("nowhere_env_module_xyz:MyEnv")
    message = str(info.value)
    assert "\n" not in message
    assert "PYTHONPATH=" in message and "nowhere_env_module_xyz" in message and str(tmp_path) in message
    rc = cli.main(["train", "--env-id", "nowhere_env_module_xyz:MyEnv", *TRAIN, "--run-dir", str(tmp_path / "r")])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "PYTHONPATH=" in err[0]


def test_module_whose_own_import_fails_says_so(env_folder):
    folder, name = env_folder
    (folder / f"{name}.py").write_text("import no_such_dependency_xyz\n")
    with pytest.raises(ConfigError) as info:
        check_env_id(f"{name}:WalkEnv")
    message = str(info.value)
    assert "no_such_dependency_xyz" in message and "fix the module" in message and "\n" not in message


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["ray", "lithops"])
def test_module_in_the_current_folder_trains_with_the_minionsrl_command(backend, env_folder, tmp_path,
                                                                       subprocess_env):
    """The ``minionsrl`` command itself, run from the module's folder with PYTHONPATH not naming it: a private
    Ray cluster's workers, and Lithops localhost's job runners, import the module too."""
    pytest.importorskip(backend)
    folder, name = env_folder
    command = shutil.which("minionsrl", path=os.path.dirname(sys.executable))
    if command is None:
        pytest.skip("the minionsrl command is not installed next to this interpreter")
    assert str(folder) not in subprocess_env["PYTHONPATH"]
    run_dir = tmp_path / "run"
    out = subprocess.run([command, "train", "--env-id", f"{name}:WalkEnv", "--backend", backend, *TRAIN,
                          "--run-dir", str(run_dir)], cwd=folder, env=subprocess_env, capture_output=True,
                         text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    assert _summary(run_dir)["rounds"] == 2
