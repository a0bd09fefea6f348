"""``minionsrl scheduler train``: train the learned scheduler (DESIGN §2.2) over whole training jobs.

Each job is one ordinary run of the base config whose scaler is a sampling
:class:`~minionsrl.scaling.minions.MinionsScaler`; after it, the agent takes one PPO update on the
job's trajectory, in JAX with optax's Adam. The artefact is written with
:func:`~minionsrl.scaling.minions.save_agent`, beside its learning curve (CSV and PNG).
"""

from __future__ import annotations

import csv
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from minionsrl.config import TrainConfig
from minionsrl.experiments.plots import line_plot
from minionsrl.learner.engine import bucket, pad_rows
from minionsrl.learner.networks import mlp
from minionsrl.learner.ppo import clipped_surrogate, normalize_advantages_np, weighted_mean
from minionsrl.scaling.minions import Episode, MinionsScaler, SchedulerAgent, SchedulerHyper, load_agent, save_agent

CURVE_COLUMNS = ["job", "episode_return", "rounds", "reached", "best_eval_return", "projected_cloud_s", "wall_s",
                 "mean_action", "cost_serverless_usd"]
MAX_GRAD_NORM = 0.5


class SchedulerOptimizer:
    """Adam on the agent's weights after clipping the gradient's global norm at 0.5, and its moments."""

    def __init__(self, agent: SchedulerAgent, hyper: SchedulerHyper) -> None:
        self.tx = optax.chain(optax.clip_by_global_norm(MAX_GRAD_NORM), optax.adam(hyper.learning_rate))
        self.state = self.tx.init({k: jnp.asarray(v) for k, v in agent.params.items()})


def _loss(params: dict[str, jax.Array], batch: dict[str, jax.Array], hyper: SchedulerHyper) -> tuple[jax.Array, ...]:
    """Clipped surrogate + 0.5 · value loss − entropy bonus, as means over the steps the mask keeps."""
    mask = batch["mask"]
    log_probs = jax.nn.log_softmax(mlp(params, "actor", batch["states"]), axis=-1)
    logp = jnp.take_along_axis(log_probs, batch["actions"][:, None], axis=-1)[:, 0]
    entropy = weighted_mean(-(jnp.exp(log_probs) * log_probs).sum(-1), mask)
    pg = clipped_surrogate(batch["adv"], jnp.exp(logp - batch["old_logp"]), hyper.clip_coef, mask)
    v_loss = 0.5 * weighted_mean((mlp(params, "critic", batch["states"])[:, 0] - batch["returns"]) ** 2, mask)
    return pg - hyper.ent_coef * entropy + 0.5 * v_loss, (pg, v_loss)


@partial(jax.jit, static_argnums=(0, 1))
def _update(tx: optax.GradientTransformation, hyper: SchedulerHyper, params: dict[str, jax.Array],
            opt_state: optax.OptState, batch: dict[str, jax.Array]) -> tuple[Any, ...]:
    """``hyper.epochs`` full-batch steps; returns the new weights and moments and the last step's losses."""

    def epoch(_: int, carry: tuple[Any, ...]) -> tuple[Any, ...]:
        params, opt_state, _, _ = carry
        grads, (pg, v_loss) = jax.grad(_loss, has_aux=True)(params, batch, hyper)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, pg, v_loss

    zero = jnp.zeros((), jnp.float32)
    return jax.lax.fori_loop(0, hyper.epochs, epoch, (params, opt_state, zero, zero))


def ppo_update(agent: SchedulerAgent, optimizer: SchedulerOptimizer, episode: Episode,
               hyper: SchedulerHyper) -> dict[str, float]:
    """PPO on one job's trajectory with Monte-Carlo returns (updates ``agent`` and ``optimizer`` in place)."""
    steps = episode.transitions
    returns, g = [], 0.0
    for t in reversed(steps):
        g = t.reward + hyper.gamma * g
        returns.append(g)
    returns_np = np.array(returns[::-1], dtype=np.float32)
    states = np.stack([t.state for t in steps]).astype(np.float32)
    adv = normalize_advantages_np(returns_np - agent.value(states))
    # padded to a power of two (masked out of every mean), so jobs of different lengths share compilations
    size = max(8, bucket(len(steps), fine=False))

    def pad(x: np.ndarray) -> jax.Array:
        return jnp.asarray(pad_rows(x, size))

    batch = {"states": pad(states), "actions": pad(np.array([t.action for t in steps], dtype=np.int32)),
             "old_logp": pad(np.array([t.logprob for t in steps], dtype=np.float32)),
             "adv": pad(adv.astype(np.float32)), "returns": pad(returns_np),
             "mask": pad(np.ones(len(steps), dtype=np.float32))}
    params = {k: jnp.asarray(v) for k, v in agent.params.items()}
    params, optimizer.state, pg, v_loss = _update(optimizer.tx, hyper, params, optimizer.state, batch)
    agent.params = {k: np.array(v, dtype=np.float32) for k, v in params.items()}
    return {"episode_return": float(returns[-1]), "policy_loss": float(pg), "value_loss": float(v_loss)}


def train_scheduler(base: TrainConfig, jobs: int, target: float, out: str | Path, n_max: int = 64,
                    hyper: SchedulerHyper | None = None,
                    on_job: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """Train the scheduler over ``jobs`` complete training jobs of ``base``; save it and its curve."""
    from minionsrl.build import make_trainer
    from minionsrl.learner import runtime
    from minionsrl.prepare import learner_device

    # before the agent's optimiser makes JAX's CPU client: the jobs' learners need it as every run sets it up (one
    # compute thread), or their wait for a CPU is counted on two threads at once and their own time comes out 0
    runtime.configure(base.learner.learner_threads, gpu=learner_device(base.learner) == "cuda")
    hyper = SchedulerHyper() if hyper is None else hyper
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    agent = SchedulerAgent(n_max, seed=base.run.seed)
    curve_path = out.with_suffix(".curve.csv")
    done = _jobs_done(curve_path) if out.exists() else 0
    if done:  # a training cut short goes on from its last saved agent (the optimiser's moments start afresh)
        agent, _ = load_agent(out)
    optimizer = SchedulerOptimizer(agent, hyper)
    meta = {"env_id": base.env.env_id, "target_return": target, "max_rounds": base.run.max_rounds,
            "batch_size": base.env.train_batch_size, "fragment_length": base.env.fragment_length,
            "hyper": dataclasses.asdict(hyper), "curve": curve_path.name}
    with open(curve_path, "a" if done else "w", newline="") as fh:
        writer = csv.DictWriter(fh, CURVE_COLUMNS)
        if not done:
            writer.writeheader()
        for job in range(done + 1, jobs + 1):
            cfg = base.replace(seed=base.run.seed * 100_000 + job, target_return=target, progress=False,
                               tensorboard=False, run_dir=tempfile.mkdtemp(prefix=f"minionsrl-job{job}-"))
            scaler = MinionsScaler(agent, cfg.scaling.n_min, cfg.scaling.n_max, target_return=target,
                                   horizon=cfg.run.max_rounds, budget_usd=cfg.cost.budget_usd, explore=True,
                                   hyper=hyper, seed=job)
            trainer = make_trainer(cfg, scaler=scaler)
            started = time.perf_counter()
            summary = trainer.run()
            episode = scaler.episode
            episode.transitions[-1].reward = scaler.round_reward(trainer.last_round)
            best = summary["best_eval_return"] if summary["best_eval_return"] is not None else 0.0
            reached = best >= target
            episode.transitions[-1].reward += scaler.miss_reward(best, target)
            stats = ppo_update(agent, optimizer, episode, hyper)
            row = {"job": job, "episode_return": stats["episode_return"], "rounds": summary["rounds"],
                   "reached": reached, "best_eval_return": best, "projected_cloud_s": summary["projected_cloud_s"],
                   "wall_s": time.perf_counter() - started,
                   # the actors the agent asked for, before the run clips them to n_min..n_max
                   "mean_action": float(np.mean([t.action + 1 for t in episode.transitions])),
                   "cost_serverless_usd": summary["cost_usd"]["serverless"]}
            writer.writerow(row)
            fh.flush()
            save_agent(agent, out, {**meta, "jobs": job})  # after every job: a cut training loses at most one
            shutil.rmtree(cfg.run.run_dir, ignore_errors=True)
            if on_job is not None:
                on_job(row)
    plot_curve(curve_path, out.with_suffix(".curve.png"))
    return out


def _jobs_done(curve_csv: Path) -> int:
    """Jobs already in a learning curve (0 when there is none)."""
    if not curve_csv.exists():
        return 0
    with open(curve_csv, newline="") as fh:
        return sum(1 for _ in csv.DictReader(fh))


def plot_curve(curve_csv: str | Path, png: str | Path, window: int = 10) -> Path:
    """The scheduler's learning curve: MDP return and projected job time per job (moving averages)."""
    with open(curve_csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    jobs = [int(r["job"]) for r in rows]

    def smooth(key: str) -> np.ndarray:
        values = np.array([float(r[key]) for r in rows])
        return np.array([values[max(0, i - window + 1) : i + 1].mean() for i in range(len(values))])

    return line_plot({"MDP return (per job)": (jobs, smooth("episode_return")),
                      "projected job time / 10 s": (jobs, smooth("projected_cloud_s") / 10.0),
                      "actors asked for (before the n_min clip) / 10": (jobs, smooth("mean_action") / 10.0)},
                     "job", f"moving average over {window} jobs", "MinionsRL scheduler training", png)
