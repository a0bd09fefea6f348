"""``minionsrl eval``: run a trained run's policy for some episodes, optionally recording MP4 video."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym

from minionsrl import config
from minionsrl.build import make_learner, prepare_config
from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.function.envs import EnvInfo, EnvSpec, make_env
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.rollout import evaluate
from minionsrl.loop import checkpoint


def evaluate_run(run_dir: str | Path, episodes: int = 10, seed: int = 10_000,
                 capture_video: bool = False) -> dict[str, Any]:
    """Load the latest checkpoint of ``run_dir`` and evaluate its deterministic policy."""
    run_dir = Path(run_dir)
    if episodes < 1:
        raise ConfigError(f"--episodes: {episodes} must be >= 1")
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.exists():
        raise ConfigError(f"--run-dir: {str(run_dir)!r} holds no run (no config.yaml)")
    cfg, info = run_config(cfg_path)
    state = checkpoint.load(run_dir / "checkpoints")
    if state is None:
        raise ConfigError(f"--run-dir: {str(run_dir)!r} has no checkpoint yet")
    spec = EnvSpec(cfg.env_id, cfg.env_kwargs)
    learner = make_learner(cfg, PolicyArch.of(info, cfg.hidden_sizes))
    learner.load_state_dict(state)
    snapshot = learner.snapshot(int(state["round"]))

    env = make_env(spec, render_mode="rgb_array" if capture_video else None)
    video_dir = run_dir / "videos"
    if capture_video:
        env = gym.wrappers.RecordVideo(env, str(video_dir), episode_trigger=lambda _: True,
                                       name_prefix=f"eval-round{state['round']}", disable_logger=True)
    try:
        returns, lengths = evaluate(env, snapshot, snapshot.numpy_policy(), episodes, seed)
    finally:
        env.close()
    result: dict[str, Any] = {
        "run_dir": str(run_dir), "round": int(state["round"]), "episodes": episodes,
        "return_mean": float(returns.mean()), "return_std": float(returns.std()),
        "length_mean": float(lengths.mean()), "returns": returns.tolist(),
    }
    if capture_video:
        result["videos"] = sorted(str(p) for p in video_dir.glob("*.mp4"))
    return result


def run_config(cfg_path: Path) -> tuple[TrainConfig, EnvInfo]:
    """A run directory's ``config.yaml``, checked exactly as ``minionsrl train`` checks its input (field types
    and rules, the env id — a custom entry point must name a ``gymnasium.Env`` subclass — and its spaces)
    before anything it names is built. Evaluation runs in this process, so where the run's functions ran
    (backend, Ray address, Lithops config) is neither used nor checked: it is reset to the local backend."""
    try:
        cfg = config.build(config.load_yaml(cfg_path))
        local = dataclasses.replace(cfg, backend="local", ray_address=None, lithops_config=None)
        return prepare_config(local)
    except ConfigError as exc:
        raise ConfigError(f"--run-dir: {str(cfg_path)!r} is refused: {exc}") from exc
