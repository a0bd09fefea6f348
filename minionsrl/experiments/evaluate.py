"""``minionsrl eval``: run a trained run's policy for some episodes, optionally recording MP4 video."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym

from minionsrl import files
from minionsrl.errors import ConfigError
from minionsrl.experiments.policy import WorseThanBest, load_policy
from minionsrl.function.envs import EnvSpec, make_env
from minionsrl.function.extras import require_extra
from minionsrl.function.rollout import evaluate


def evaluate_run(run_dir: str | Path, episodes: int = 10, seed: int = 10_000,
                 capture_video: bool = False, trust_run_code: bool = False, which: str = "latest") -> dict[str, Any]:
    """Load ``which`` policy of ``run_dir`` (``"latest"``, the last round's, or ``"best"``, the best evaluated) and
    evaluate it, deterministic (``trust_run_code``, ``which``: see :func:`~minionsrl.experiments.policy.load_policy`).
    When the last round's policy evaluated well below the best, one line on stderr says so and names ``--which
    best``; the result holds it as ``warning``."""
    run_dir = Path(run_dir)
    if episodes < 1:
        raise ConfigError(f"--episodes: {episodes} must be >= 1")
    if not 0 <= seed <= 2**32 - episodes:  # the episodes' seeds seed, seed + 1, ... must be valid seeds
        raise ConfigError(f"--seed: {seed} must be in 0..{2**32 - episodes} (episode seeds are seed, seed + 1, …)")
    files.config_path(run_dir, "--run-dir")
    if capture_video:  # MP4s need moviepy; classic-control and Box2D frames need pygame (pygame-ce)
        require_extra("--capture-video", "video")
    # the run dir checked as training checks its input
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", WorseThanBest)
        policy = load_policy(run_dir, what="--run-dir", trust_run_code=trust_run_code, which=which)
    warning = None
    for w in caught:  # this command's user reads a line, not a warning's source location
        if issubclass(w.category, WorseThanBest):
            warning = str(w.message)
            print(f"minionsrl: eval: {warning}", file=sys.stderr, flush=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    snapshot = policy.snapshot

    env = make_env(EnvSpec(policy.config.env.env_id, policy.config.env.env_kwargs),
                   render_mode="rgb_array" if capture_video else None)
    video_dir = run_dir / "videos"
    if capture_video:
        env = gym.wrappers.RecordVideo(env, str(video_dir), episode_trigger=lambda _: True,
                                       name_prefix=f"eval-round{policy.round}", disable_logger=True)
    try:
        returns, lengths = evaluate(env, snapshot, snapshot.numpy_policy(), episodes, seed)
    finally:
        env.close()
    result: dict[str, Any] = {
        "run_dir": str(run_dir), "which": which, "round": policy.round, "episodes": episodes,
        "return_mean": float(returns.mean()), "return_std": float(returns.std()),
        "length_mean": float(lengths.mean()), "returns": returns.tolist(),
    }
    if warning:
        result["warning"] = warning
    if capture_video:
        result["videos"] = sorted(str(p) for p in video_dir.glob("*.mp4"))
    return result

