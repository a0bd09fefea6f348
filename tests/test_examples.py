"""The scripts in ``examples/`` run as a user runs them (``python examples/NAME.py`` from a folder of their own), so
that CI keeps them working: a custom env as ``module:Class``, a seed sweep, callbacks and resume, W&B offline,
a Ray run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(name: str, cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out.stdout


def test_every_example_is_run_here():
    tested = {"custom_env.py", "seed_sweep.py", "callbacks.py", "track_offline.py", "ray_run.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested | {"my_envs.py"}  # my_envs: the custom env's module


@pytest.mark.slow
def test_custom_env(tmp_path, subprocess_env):
    out = _run("custom_env.py", tmp_path, subprocess_env)
    assert "stopped by" in out and "best policy:" in out
    assert (tmp_path / "runs/examples/corridor-v0/summary.json").exists()


@pytest.mark.slow
def test_seed_sweep(tmp_path, subprocess_env):
    out = _run("seed_sweep.py", tmp_path, subprocess_env)
    assert "over 3 seeds" in out and "serverless bill $" in out


@pytest.mark.slow
def test_callbacks(tmp_path, subprocess_env):
    out = _run("callbacks.py", tmp_path, subprocess_env)
    assert "stopped by" in out and "resumed to round" in out


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="the wandb extra is not installed")
def test_track_offline(tmp_path, subprocess_env):
    home = tmp_path / "wandb-home"
    env = {**subprocess_env, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_ERROR_REPORTING": "false",
           "WANDB_CONFIG_DIR": str(home / "config"), "WANDB_CACHE_DIR": str(home / "cache"),
           "WANDB_DATA_DIR": str(home / "data")}
    env.pop("WANDB_API_KEY", None)
    out = _run("track_offline.py", tmp_path, env)
    assert "offline-run-" in out


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the ray extra is not installed")
def test_ray_run(tmp_path, subprocess_env):
    out = _run("ray_run.py", tmp_path, subprocess_env, timeout=400)
    assert "ray: 512 steps" in out  # 4 rounds of 4 actors × 32 steps (CartPole's preset)
