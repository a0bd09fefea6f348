"""RLlib PPO on Hopper-v5: the child process of bench/rllib_hopper.py, run by bench/out/.venv-rllib's python only.

    bench/out/.venv-rllib/bin/python bench/rllib_worker.py JSON

JSON holds ``seed``, ``steps`` (stop once this many env steps are sampled), ``out`` (a JSON-lines file the run
appends to as it goes), ``work`` (a scratch folder: episode logs, checkpoint), ``ckpt_every`` (iterations
between checkpoints, 0: none), ``lr_horizon`` (env steps over which the learning rate anneals to 0) and the
hyper-parameters ``hp`` (see bench/rllib_hopper.py, which maps our mujoco preset onto RLlib's names).

Records written to ``out`` (one JSON object per line, flushed at once): ``start`` (a process segment:
set-up time, where it resumed), ``iter`` (one per ``algo.train()``: env steps sampled so far, the
cumulative wall time of the training loop, the raw returns and lengths of the training episodes that
finished in it), ``ckpt`` (a checkpoint was written after that iteration) and ``done``. A rerun with a
``done`` record does nothing; without one it resumes from the last checkpoint (records after it are
dropped and re-run) or, with none, starts again. Nothing here is unpickled by the caller: it only
reads this JSON.

Raw (unnormalised) returns: the rewards RLlib sees are scaled (gymnasium's ``NormalizeReward``, as our
``normalize_reward`` and CleanRL do), so RLlib's own ``episode_return_mean`` is not the Hopper return.
A wrapper under the scaling writes each finished episode's true return to a per-process file in ``work``;
after each iteration the driver of this process collects the new lines into the ``iter`` record.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

T_PROCESS = time.perf_counter()


# bench/common.py's jsonl helpers are not imported: this script runs in RLlib's own virtual environment, which
# has neither minionsrl nor the bench's dependencies
def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill mid-write
            break
    return out


def make_env(cfg: dict[str, Any]):
    """Hopper-v5, a raw-episode logger, then (optionally) CleanRL's reward scaling and clipping."""
    import gymnasium as gym
    import numpy as np

    class EpisodeLog(gym.Wrapper):
        """Appends ``{"r": return, "l": length, "t": time}`` of each finished episode to a per-process file."""

        def __init__(self, env: gym.Env, folder: str) -> None:
            super().__init__(env)
            Path(folder).mkdir(parents=True, exist_ok=True)
            self._path = Path(folder) / f"episodes-{os.getpid()}-{id(self)}.jsonl"
            self._ret, self._len = 0.0, 0

        def reset(self, **kwargs):
            self._ret, self._len = 0.0, 0
            return self.env.reset(**kwargs)

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            self._ret += float(reward)
            self._len += 1
            if terminated or truncated:
                with self._path.open("a") as f:
                    f.write(json.dumps({"r": self._ret, "l": self._len, "t": time.time()}) + "\n")
                self._ret, self._len = 0.0, 0
            return obs, reward, terminated, truncated, info

    env = EpisodeLog(gym.make(cfg["env_id"]), cfg["episodes_dir"])
    if cfg["normalize_reward"]:
        env = gym.wrappers.NormalizeReward(env, gamma=cfg["gamma"])
        clip = cfg["clip_reward"]
        env = gym.wrappers.TransformReward(env, lambda r: float(np.clip(r, -clip, clip)))
    return env


class EpisodeFiles:
    """Reads the lines the env runners' loggers appended since the last call."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.offsets = folder, {}

    def new(self) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.folder.glob("episodes-*.jsonl")):
            with path.open() as f:
                f.seek(self.offsets.get(path, 0))
                chunk = f.read()
            complete = chunk[: chunk.rfind("\n") + 1]  # a line being written stays for the next call
            self.offsets[path] = self.offsets.get(path, 0) + len(complete)
            found += [json.loads(line) for line in complete.splitlines() if line.strip()]
        return sorted(found, key=lambda e: e["t"])


def build_config(args: dict[str, Any], episodes_dir: str):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    hp = args["hp"]
    register_env("hopper-minionsrl-bench", make_env)
    lr: Any = hp["lr"]
    if hp["anneal_lr"]:  # linear to 0 over the run's env steps, as our lr_schedule anneal (RLlib: piecewise)
        lr = [[0, hp["lr"]], [args["lr_horizon"], 0.0]]
    env_config = {"env_id": args["env_id"], "episodes_dir": episodes_dir, "normalize_reward": hp["normalize_reward"],
                  "gamma": hp["gamma"], "clip_reward": hp["clip_reward"]}
    obs_filter = None
    if hp["normalize_obs"]:
        clip_obs = hp["clip_obs"]

        def obs_filter(env=None, spaces=None, device=None):  # RLlib calls it with (env, spaces, device)
            return MeanStdFilter(clip_by_value=clip_obs)

    model = DefaultModelConfig(fcnet_hiddens=hp["hidden_sizes"], fcnet_activation="tanh",
                               fcnet_kernel_initializer="orthogonal_",
                               fcnet_kernel_initializer_kwargs={"gain": 2 ** 0.5},
                               fcnet_bias_initializer="zeros_", vf_share_layers=False, free_log_std=True)
    return (
        PPOConfig()
        .environment("hopper-minionsrl-bench", env_config=env_config)
        .env_runners(num_env_runners=hp["num_env_runners"], num_envs_per_env_runner=hp["num_envs_per_env_runner"],
                     rollout_fragment_length=hp["rollout_fragment_length"], env_to_module_connector=obs_filter,
                     num_cpus_per_env_runner=1)
        .learners(num_learners=0)
        .training(lr=lr, gamma=hp["gamma"], lambda_=hp["lambda_"], clip_param=hp["clip_param"],
                  num_epochs=hp["num_epochs"], minibatch_size=hp["minibatch_size"],
                  train_batch_size_per_learner=hp["train_batch_size_per_learner"],
                  entropy_coeff=hp["entropy_coeff"], vf_loss_coeff=hp["vf_loss_coeff"],
                  vf_clip_param=hp["vf_clip_param"], grad_clip=hp["grad_clip"], grad_clip_by="global_norm",
                  use_kl_loss=False, kl_coeff=0.0)
        .rl_module(model_config=model)
        .debugging(seed=args["seed"])
        .reporting(metrics_num_episodes_for_smoothing=100)
    )


def _get(result: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(result, dict) or k not in result:
            return None
        result = result[k]
    return result


def main() -> None:
    args = json.loads(sys.argv[1])
    out, work = Path(args["out"]), Path(args["work"])
    ckpt = work / "checkpoint"
    records = _records(out)
    if any(r["kind"] == "done" for r in records):
        print(json.dumps({"status": "already done", **[r for r in records if r["kind"] == "done"][-1]}), flush=True)
        return
    # resume: keep what the last checkpoint covers, drop (and re-run) what came after it
    last_ckpt = max((i for i, r in enumerate(records) if r["kind"] == "ckpt"), default=None)
    resume = last_ckpt is not None and (ckpt / "ok").exists()
    kept = records[: last_ckpt + 1] if resume else []
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    tmp.replace(out)
    episodes_dir = work / f"episodes-{int(time.time())}"
    shutil.rmtree(work / "episodes", ignore_errors=True)
    for old in work.glob("episodes-*"):
        shutil.rmtree(old, ignore_errors=True)
    episodes_dir.mkdir(parents=True, exist_ok=True)

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # Ray renices its worker processes (the env runners) by +15 by default; here they keep this process's
    # niceness, as the processes of our Trainer and SB3 do, so that on a shared machine none is handicapped
    os.environ.setdefault("RAY_worker_niceness", "0")
    import torch

    torch.set_num_threads(args["threads"])  # the learner's torch threads (env runners: Ray sets one per actor)
    import ray

    hp = args["hp"]
    ray.init(address="local", num_cpus=hp["num_env_runners"] + 1, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 1024 * 1024, _temp_dir=args.get("ray_tmp") or None)
    algo = build_config(args, str(episodes_dir)).build_algo()
    wall0, steps0, it0 = 0.0, 0, 0
    if resume:
        algo.restore_from_path(str(ckpt / "algo"))
        c = kept[-1]
        wall0, steps0, it0 = c["wall_s"], c["env_steps"], c["iter"]
    setup_s = time.perf_counter() - T_PROCESS
    _append(out, {"kind": "start", "seed": args["seed"], "t": time.time(), "setup_s": setup_s,
                  "resumed_from_steps": steps0, "hp": hp, "steps_target": args["steps"]})
    files = EpisodeFiles(episodes_dir)
    files.new()  # anything written while building (none expected)
    t_loop, it, steps = time.perf_counter(), it0, steps0
    while steps < args["steps"]:
        result = algo.train()
        it += 1
        sampled = _get(result, "env_runners", "num_env_steps_sampled") or 0
        lifetime = _get(result, "env_runners", "num_env_steps_sampled_lifetime")
        steps = int(lifetime) if lifetime else steps + int(sampled)
        eps = files.new()
        rec = {"kind": "iter", "seed": args["seed"], "iter": it, "env_steps": steps, "iter_steps": int(sampled),
               "wall_s": wall0 + time.perf_counter() - t_loop, "t": time.time(),
               "returns": [e["r"] for e in eps], "lengths": [e["l"] for e in eps],
               "sample_s": _get(result, "timers", "env_runner_sampling_timer"),
               "learn_s": _get(result, "timers", "learner_update_timer"),
               "rllib_return_mean": _get(result, "env_runners", "episode_return_mean")}
        _append(out, rec)
        if args["ckpt_every"] and it % args["ckpt_every"] == 0 and steps < args["steps"]:
            staging = work / "checkpoint.new"
            shutil.rmtree(staging, ignore_errors=True)
            algo.save_to_path(str(staging / "algo"))
            (staging / "ok").write_text(str(steps))
            shutil.rmtree(ckpt, ignore_errors=True)
            staging.rename(ckpt)
            _append(out, {"kind": "ckpt", "iter": it, "env_steps": steps, "wall_s": rec["wall_s"], "t": time.time()})
    done = {"kind": "done", "seed": args["seed"], "env_steps": steps, "wall_s": wall0 + time.perf_counter() - t_loop,
            "setup_s": setup_s, "t": time.time()}
    _append(out, done)
    algo.stop()
    ray.shutdown()
    shutil.rmtree(ckpt, ignore_errors=True)
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
