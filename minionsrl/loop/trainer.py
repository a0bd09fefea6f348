"""The round loop of SPEC §1: scaler → backend → rollout functions → learner → logger/checkpoint.

Read :meth:`Trainer.run_round` top to bottom: it is one round.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from minionsrl import config
from minionsrl.backends.base import Backend, Reply
from minionsrl.config import TrainConfig
from minionsrl.cost import CostLedger, load_prices
from minionsrl.errors import ConfigError
from minionsrl.function import wire
from minionsrl.function.envs import EnvInfo, EnvSpec, check_env_id, env_info
from minionsrl.function.faults import DuplicatingBackend
from minionsrl.function.fragment import Fragment
from minionsrl.function.normalization import RunningMeanStd
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner.detectors import gradient_noise_scale, hessian_curvature
from minionsrl.learner.networks import make_policy, snapshot_of
from minionsrl.learner.ppo import PPO, Batch
from minionsrl.loop import checkpoint, gather
from minionsrl.loop.metrics import RunLog
from minionsrl.redact import redact_text
from minionsrl.scaling.rules import Scaler, make_scaler

_KIND_TRAIN, _KIND_EVAL, _KIND_DETECT = 0, 1, 2


def invocation_seed(run_seed: int, round_idx: int, slot: int, kind: int) -> int:
    """Seed of one invocation: a function of (run seed, round, slot, kind) only, so a fragment never
    depends on which instance or backend ran it, nor on arrival order."""
    return int(np.random.SeedSequence([run_seed, round_idx, slot, kind]).generate_state(1)[0])


def prepare_config(cfg: TrainConfig) -> tuple[TrainConfig, EnvInfo]:
    """Check the env id, inspect its spaces and resolve the presets: all before any work starts."""
    config.validate(cfg, require_stop=False)  # the preset may still supply total_timesteps
    prices = load_prices(cfg.prices)  # a bad catalogue fails here, before any work
    if cfg.budget_usd is not None:
        first = {"fixed": cfg.actors, "minions": 1}.get(cfg.scaler, cfg.n_min)  # fewest actors round 1 can have
        least = CostLedger(prices, cfg.platform, cfg.function_memory_mb).least_round_usd(first)
        if cfg.budget_usd < least:
            raise ConfigError(f"budget_usd: ${cfg.budget_usd:g} is less than the least one round of {first} "
                              f"function{'s' if first > 1 else ''} can cost (${least:.3g}); raise budget_usd")
    check_env_id(cfg.env_id)
    if cfg.backend == "lithops":
        from minionsrl.backends.lithops_backend import lithops_config

        lithops_config(cfg.lithops_config)  # a missing or broken Lithops config fails here
    try:
        info = env_info(EnvSpec(cfg.env_id, cfg.env_kwargs))
    except ConfigError:
        raise
    except Exception as exc:  # bad kwargs, a missing optional dependency, a broken custom env
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"env_id {cfg.env_id!r} with env_kwargs {cfg.env_kwargs!r} cannot be built ({first}); "
                          "check env_kwargs against the environment's constructor") from exc
    cfg = config.resolve(cfg, info.family)
    if cfg.normalize_obs and len(info.obs_shape) == 3:
        raise ConfigError(f"normalize_obs: {cfg.env_id!r} has image observations (scaled by 1/255 in the "
                          "network); use --no-normalize-obs")
    return cfg, info


def make_backend(cfg: TrainConfig, key: bytes) -> Backend:
    """Build the backend named by ``cfg.backend``."""
    if cfg.backend == "local":
        from minionsrl.backends.local import LocalBackend

        return LocalBackend(key, max_concurrency=cfg.max_concurrency, idle_timeout_s=cfg.idle_timeout_s,
                            invocation_timeout_s=cfg.invocation_timeout_s)
    if cfg.backend == "server":
        from minionsrl.backends.server import ServerBackend

        servers = load_prices(cfg.prices)["servers"]
        return ServerBackend(key, max_concurrency=cfg.max_concurrency, vcpus_per_host=servers["actor_host"]["vcpus"],
                             startup_s=servers["startup_s"], wait_for_startup=cfg.server_wait_startup,
                             invocation_timeout_s=cfg.invocation_timeout_s)
    if cfg.backend == "ray":
        from minionsrl.backends.ray_backend import RayBackend

        return RayBackend(key, address=cfg.ray_address, num_cpus=cfg.ray_num_cpus,
                          max_concurrency=cfg.max_concurrency, invocation_timeout_s=cfg.invocation_timeout_s)
    if cfg.backend == "lithops":
        from minionsrl.backends.lithops_backend import LithopsBackend, lithops_config

        return LithopsBackend(key, lithops_config(cfg.lithops_config), memory_mb=int(cfg.function_memory_mb),
                              invocation_timeout_s=cfg.invocation_timeout_s, max_concurrency=cfg.max_concurrency)
    raise ConfigError(f"backend: {cfg.backend!r} is not available")


def make_trainer(cfg: TrainConfig, resume: bool = False, backend: Backend | None = None,
                 scaler: Scaler | None = None) -> Trainer:
    """The trainer for ``cfg.algo``: synchronous PPO rounds, or the asynchronous APPO/IMPALA learner."""
    if cfg.algo == "ppo":
        return Trainer(cfg, resume=resume, backend=backend, scaler=scaler)
    from minionsrl.loop.async_trainer import AsyncTrainer

    return AsyncTrainer(cfg, resume=resume, backend=backend, scaler=scaler)


def fragment_digest(fragment: Fragment) -> str:
    """A short digest of a fragment's step arrays: equal digests, equal training data."""
    h = hashlib.sha256()
    for name in Fragment._STEP_ARRAYS:
        h.update(np.ascontiguousarray(getattr(fragment, name)).tobytes())
    h.update(np.float32(fragment.last_value).tobytes())
    return h.hexdigest()[:16]


def _eval_returns(reply: Reply, episodes: int) -> np.ndarray:
    """The episode returns of an evaluation reply, checked against the request."""
    returns = reply.arrays.get("episode_returns")
    lengths = reply.arrays.get("episode_lengths")
    if returns is None or returns.shape != (episodes,) or returns.dtype != np.float64 \
            or lengths is None or lengths.shape != (episodes,):
        raise wire.WireError(f"evaluation reply does not hold {episodes} episode returns and lengths")
    if not np.isfinite(returns).all():
        raise wire.WireError("evaluation returns hold non-finite numbers")
    return returns


class Trainer:
    """Owns the learner state and runs rounds until a stop condition holds."""

    def __init__(self, cfg: TrainConfig, resume: bool = False, backend: Backend | None = None,
                 scaler: Scaler | None = None) -> None:
        self.cfg, self.info = prepare_config(cfg)
        self.run_dir = Path(self.cfg.run_dir)
        ckpt = self._open_run_dir(resume)
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        torch.set_num_threads(cfg.torch_threads)
        self.spec = EnvSpec(cfg.env_id, cfg.env_kwargs)
        self.arch = PolicyArch.of(self.info, cfg.hidden_sizes)
        self.policy = make_policy(self.arch)
        self.ppo = PPO(self.policy, cfg.ppo_params())
        self.obs_rms = RunningMeanStd((self.arch.obs_dim,)) if cfg.normalize_obs else None
        self.ret_rms = RunningMeanStd(()) if cfg.normalize_reward else None
        self.scaler: Scaler = scaler or make_scaler(cfg)
        self.ledger = CostLedger(load_prices(cfg.prices), cfg.platform, cfg.function_memory_mb, cfg.cold_start_s)
        self._t0 = time.perf_counter()
        self.round = 0
        self.env_steps = 0
        self.wall_offset = 0.0
        self.best_eval = float("-inf")
        self.last_eval = float("nan")
        self.recent_returns: deque[float] = deque(maxlen=100)
        self.last_row: dict[str, Any] | None = None
        self.recent_costs: deque[float] = deque(maxlen=10)  # serverless cost of the last rounds, for the budget
        self.carries: dict[int, dict[str, Any]] = {}  # slot -> episode in progress, sent with the next request
        if ckpt is not None:
            self._restore(ckpt)
        self.log = RunLog(self.run_dir, self.round if resume else None, self.env_steps, cfg.tensorboard)
        self.faults = cfg.fault_plan()
        self.retry = gather.RetryPolicy(cfg.max_retries, cfg.round_deadline_s, cfg.min_reply_fraction)
        self.backend = backend or make_backend(cfg, wire.new_key())
        if cfg.fault_duplicate > 0:  # the platform's own fault: a wrapper delivers those replies twice
            self.backend = DuplicatingBackend(self.backend)
        self.key = self.backend.key  # policies and replies are authenticated with this per-run key
        self._published: tuple[int, str] | None = None  # (policy version, reference)

    # -- the loop --------------------------------------------------------------------------------
    def run(self, on_round: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Train until a stop condition holds; return the summary (also written to summary.json)."""
        self._t0 = time.perf_counter()
        try:
            while not self._done():
                row = self.run_round()
                if on_round is not None:
                    on_round(row)
            return self._write_summary()
        finally:
            self.log.close()
            self.backend.close()

    def run_round(self) -> dict[str, Any]:
        """One round: choose n, publish, invoke, learn, evaluate, log, checkpoint."""
        cfg, t_round = self.cfg, time.perf_counter()
        self.round += 1
        n = self.scaler.next_actors(self.last_row)
        lr = self._learning_rate()
        self.ppo.set_learning_rate(lr)

        ref = self._publish(version=self.round - 1)  # the policy after the previous round's update
        got = self._gather(n, lambda slot, attempt: self._request(
            "train", ref, slot, attempt, steps=cfg.fragment_length, carry=self.carries.get(slot)),
            lambda slot, r: Fragment.from_wire(r.arrays, r.meta, cfg.fragment_length, self.arch, self.round - 1))
        fragments = [got.results[slot] for slot in sorted(got.results)]  # slot order: independent of arrival
        if cfg.carry_episodes:  # a lost slot's episode is lost with it: the slot starts a new one
            self.carries = {slot: f.meta["carry"] for slot, f in got.results.items() if f.meta.get("carry")}
        t_sampled = time.perf_counter()

        self._absorb(fragments)
        batch = Batch.from_fragments(fragments, self.ppo.params, self.ret_rms, cfg.clip_reward)
        stats = self.ppo.update(batch, np.random.default_rng([cfg.seed, self.round]))
        self.env_steps += len(batch)
        t_learned = time.perf_counter()
        return self._finish_round(n, lr, fragments, batch, stats, [got], t_round, t_sampled, t_learned)

    def _finish_round(self, n: int, lr: float, fragments: list[Fragment], batch: Batch, stats: dict[str, float],
                      gathered: list[gather.Gathered], t_round: float, t_sampled: float, t_learned: float,
                      extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The round after the update: detectors, evaluation, billing, the metrics row, the checkpoint.
        ``gathered``: the round's training invocations (one or more gathers)."""
        cfg = self.cfg
        detected = self._detect(batch, len(fragments))
        t_detected = time.perf_counter()

        eval_mean, gathered = None, list(gathered)
        if (cfg.eval_every and self.round % cfg.eval_every == 0) or self._done():  # the last round always
            eval_mean, evaluated = self._evaluate(n, gathered[0])
            self.last_eval, self.best_eval = eval_mean, max(self.best_eval, eval_mean)
            gathered.append(evaluated)
        attempts, lost = [a for g in gathered for a in g.attempts], sum(len(g.lost) for g in gathered)
        t_end = time.perf_counter()
        # every attempt is billed: failed ones, retries, duplicates and cancelled stragglers too
        bill = self.ledger.bill_round(t_end - t_round, t_sampled - t_round, [a.reply.record for a in attempts], n)

        round_episodes = [r for f in fragments for r in f.episode_returns.tolist()]
        row = {
            "round": self.round, "env_steps": self.env_steps, "n_actors": n, "wall_s": self._wall(),
            "round_s": t_end - t_round, "sample_s": t_sampled - t_round, "learn_s": t_learned - t_sampled,
            "detector_s": t_detected - t_learned, "eval_s": t_end - t_detected, "eval_return_mean": eval_mean,
            "train_return_mean": float(np.mean(round_episodes)) if round_episodes else None,
            "episodes": len(round_episodes), "learning_rate": lr, "sps": len(batch) / (t_end - t_round), **stats,
            "cost_serverless_usd": bill.cost_serverless_usd, "cost_server_usd": bill.cost_server_usd,
            "cum_cost_serverless_usd": self.ledger.total_serverless_usd,
            "cum_cost_server_usd": self.ledger.total_server_usd, "projected_round_s": bill.projected_round_s,
            "scaler_score": self.scaler.score, **detected, **gather.fault_counts(attempts, lost), **(extra or {}),
        }
        self.recent_costs.append(bill.cost_serverless_usd)
        self.log.log_round(row, self._invocation_rows(gathered))
        self.last_row = row
        if self.round % cfg.checkpoint_every == 0 or self._done():
            self._checkpoint()
        return row

    def _absorb(self, fragments: list[Fragment]) -> None:
        """Merge the fragments' normaliser statistics and finished episodes, in the given order."""
        for frag in fragments:
            if self.obs_rms is not None:
                self.obs_rms.update(frag.obs_moments)
            if self.ret_rms is not None:
                self.ret_rms.update(frag.ret_moments)
            self.recent_returns.extend(frag.episode_returns.tolist())

    # -- pieces of a round -----------------------------------------------------------------------
    def _detect(self, batch: Batch, n: int) -> dict[str, float]:
        """Curvature and noise scale of the PPO loss on this round's batch, after the update: what the
        scaler reads (``detectors=auto``), everything (``on``) or nothing (``off``)."""
        mode = self.cfg.detectors
        wanted = {"curvature", "gns"} if mode == "on" else set() if mode == "off" else self.scaler.needs
        out: dict[str, float] = {}
        if "gns" in wanted:
            out["gns"] = gradient_noise_scale(self.policy, batch, self.ppo.params, n)
        if "curvature" not in wanted:
            return out
        seed = invocation_seed(self.cfg.seed, self.round, 0, _KIND_DETECT)
        sample = batch
        if 0 < self.cfg.detector_samples < len(batch):  # Hessian-vector products cost O(batch) each
            idx = np.random.default_rng(seed).choice(len(batch), self.cfg.detector_samples, replace=False)
            sample = batch.select(torch.from_numpy(np.sort(idx)))
        curvature = hessian_curvature(self.policy, sample, self.ppo.params, self.cfg.lanczos_iterations, seed=seed)
        return {**out, "convexity_ratio": curvature.convexity_ratio, "lambda_min": curvature.lambda_min,
                "lambda_max": curvature.lambda_max}

    def _request(self, kind: str, ref: str, slot: int, attempt: int, index: int | None = None,
                 **extra: Any) -> dict[str, Any]:
        """One attempt of one slot. Every attempt of a slot has the slot's seed (a retry samples what the first
        attempt would have), and its own id; an injected fault, if one is drawn, travels with it. ``index``
        replaces the round in the seed and id (asynchronous learners: the slot's invocation count)."""
        code = _KIND_TRAIN if kind == "train" else _KIND_EVAL
        index = self.round if index is None else index
        request = {"id": f"r{index}-{kind}-{slot}" + (f"-a{attempt}" if attempt else ""), "kind": kind,
                   "attempt": attempt, "policy": ref, "env": self.spec.to_json(),
                   "seed": invocation_seed(self.cfg.seed, index, slot, code), "gamma": self.cfg.gamma, **extra}
        fault = self.faults.draw(index, slot, attempt, kind)
        return {**request, "fault": fault} if fault else request

    def _gather(self, slots: int, make_request: Callable[[int, int], dict[str, Any]],
                validate: Callable[[int, Reply], Any], earlier: gather.Gathered | None = None) -> gather.Gathered:
        """:func:`gather.gather` under the run's retry policy; a round that fails still lists its attempts (and
        those of ``earlier`` in the same round) in invocations.csv before the error ends the run."""
        kind = "training" if earlier is None else "evaluation"
        try:
            return gather.gather(self.backend, slots, make_request, validate, self.retry,
                                 what=f"round {self.round} {kind}")
        except gather.TooFewReplies as exc:
            self.log.log_invocations(self._invocation_rows([*([earlier] if earlier else []), exc.gathered]))
            raise

    def _evaluate(self, n_actors: int, train: gather.Gathered) -> tuple[float, gather.Gathered]:
        """Evaluate the current policy with deterministic actions, as up to ``n_actors`` rollout functions
        (the mean is over the episodes of the slots that came back)."""
        per_slot = self._eval_split(n_actors)
        ref = self._publish(version=self.round)  # evaluation runs after this round's update
        got = self._gather(len(per_slot), lambda slot, attempt: self._request(
            "eval", ref, slot, attempt, episodes=per_slot[slot]), lambda slot, r: _eval_returns(r, per_slot[slot]),
            earlier=train)
        return float(np.concatenate([got.results[slot] for slot in sorted(got.results)]).mean()), got  # slot order

    def _eval_split(self, n_actors: int) -> list[int]:
        """Evaluation episodes per function: ``eval_episodes`` spread over up to ``n_actors`` functions."""
        episodes = self.cfg.eval_episodes
        slots = min(episodes, n_actors)
        return [episodes // slots + (1 if i < episodes % slots else 0) for i in range(slots)]

    def _invocation_rows(self, gathered: list[gather.Gathered]) -> list[dict[str, Any]]:
        """The round's rows of invocations.csv: training before evaluation, by slot and attempt (then arrival)."""
        pairs = sorted(((a, g) for g in gathered for a in g.attempts),
                       key=lambda p: (p[0].request["kind"] != "train", p[0].slot, p[0].attempt))
        return [self._invocation_row(a, g) for a, g in pairs]

    def _invocation_row(self, attempt: gather.Attempt, got: gather.Gathered) -> dict[str, Any]:
        """A row of invocations.csv: the record, the slot's seed and attempt, the gather status and, for an
        accepted fragment, a digest of its arrays (a fault-free run of the same seed must show the same)."""
        req, record = attempt.request, attempt.reply.record
        accepted = attempt.status == gather.OK and req["kind"] == "train"
        return {"round": self.round, **record.row(), "error": redact_text(record.error), "status": attempt.status,
                "slot": attempt.slot,
                "attempt": attempt.attempt, "seed": req["seed"], "fault": (req.get("fault") or {}).get("kind", ""),
                "digest": fragment_digest(got.results[attempt.slot]) if accepted else ""}

    def _publish(self, version: int) -> str:
        """Publish the policy once per version (updates applied); evaluation and the next round share it."""
        if self._published is None or self._published[0] != version:
            blob = snapshot_of(self.policy, self.obs_rms, version, self.cfg.clip_obs).encode(self.key)
            self._published = (version, self.backend.publish(blob))
        return self._published[1]

    def _learning_rate(self) -> float:
        cfg = self.cfg
        if not cfg.anneal_lr or cfg.total_timesteps is None:
            return cfg.learning_rate
        return cfg.learning_rate * max(1.0 - self.env_steps / cfg.total_timesteps, 0.0)

    def _done(self) -> bool:
        cfg = self.cfg
        return bool(
            (cfg.total_timesteps is not None and self.env_steps >= cfg.total_timesteps)
            or (cfg.max_rounds is not None and self.round >= cfg.max_rounds)
            or (cfg.target_return is not None and np.isfinite(self.last_eval) and self.last_eval >= cfg.target_return)
            or self._over_budget()
        )

    def _over_budget(self) -> bool:
        """Whether the next round would exceed the budget, estimating its cost as the dearest of the last
        10 rounds (evaluation rounds and cold starts cost more than the rest)."""
        if self.cfg.budget_usd is None or not self.recent_costs:
            return False
        return not self.ledger.affordable(self.cfg.budget_usd, max(self.recent_costs))

    def _wall(self) -> float:
        return self.wall_offset + time.perf_counter() - self._t0

    # -- run directory, checkpoint, summary ------------------------------------------------------
    def _open_run_dir(self, resume: bool) -> dict[str, Any] | None:
        cfg_path = self.run_dir / "config.yaml"
        if not resume:
            if (self.run_dir / "metrics.csv").exists():
                raise ConfigError(f"run_dir {str(self.run_dir)!r} already holds a run; use --resume to continue "
                                  "it or choose another --run-dir")
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                config.dump(self.cfg, cfg_path)
            except OSError as exc:
                raise ConfigError(f"run_dir: {str(self.run_dir)!r} cannot be written ({exc.strerror or exc}); "
                                  "choose a writable directory") from exc
            return None
        if not cfg_path.exists():
            raise ConfigError(f"--resume: {str(self.run_dir)!r} holds no run (no config.yaml); check --run-dir")
        saved = config.build(config.load_yaml(cfg_path))
        changed = [k for k, v in self.cfg.learning_fields().items() if saved.learning_fields()[k] != v]
        if changed:
            raise ConfigError(f"--resume: run_dir belongs to another config ({', '.join(changed)} differ); "
                              "resume with the same settings or choose another --run-dir")
        config.dump(self.cfg, cfg_path)
        return checkpoint.load(self.run_dir / "checkpoints")

    def _checkpoint(self) -> None:
        state = self._state()
        checkpoint.save(self.run_dir / "checkpoints", state)
        if self.cfg.keep_checkpoints_every and self.round % self.cfg.keep_checkpoints_every == 0:
            checkpoint.save(self.run_dir / "checkpoints", state, name=f"round-{self.round:05d}.pt")

    def _state(self) -> dict[str, Any]:
        """Everything a resumed run needs (weights-only loadable)."""
        return {
            "round": self.round, "env_steps": self.env_steps, "wall_s": self._wall(),
            "best_eval": self.best_eval, "last_eval": self.last_eval,
            "recent_returns": list(self.recent_returns), "policy": self.policy.state_dict(),
            "optimizer": self.ppo.optimizer.state_dict(), "scaler": self.scaler.state_dict(),
            "torch_rng": torch.get_rng_state(), "last_row": json.dumps(self.last_row),
            "carries": json.dumps({str(k): v for k, v in self.carries.items()}), "ledger": self.ledger.state_dict(),
            "recent_costs": list(self.recent_costs),
            "obs_rms": checkpoint.to_tensors(self.obs_rms.state_dict()) if self.obs_rms else None,
            "ret_rms": checkpoint.to_tensors(self.ret_rms.state_dict()) if self.ret_rms else None,
        }

    def _restore(self, state: dict[str, Any]) -> None:
        self.round, self.env_steps, self.wall_offset = int(state["round"]), int(state["env_steps"]), state["wall_s"]
        self.best_eval, self.last_eval = float(state["best_eval"]), float(state["last_eval"])
        self.recent_returns.extend(state["recent_returns"])
        self.policy.load_state_dict(state["policy"])
        self.ppo.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.ledger.load_state_dict(state["ledger"])
        self.recent_costs.extend(state["recent_costs"])
        torch.set_rng_state(state["torch_rng"])
        self.last_row = json.loads(state["last_row"])
        self.carries = {int(k): v for k, v in json.loads(state["carries"]).items()}
        for rms, saved in ((self.obs_rms, state["obs_rms"]), (self.ret_rms, state["ret_rms"])):
            if rms is not None:
                rms.load_state_dict(checkpoint.to_arrays(saved))

    def _write_summary(self) -> dict[str, Any]:
        recent = list(self.recent_returns)
        summary = {
            "env_id": self.cfg.env_id, "seed": self.cfg.seed, "scaler": self.cfg.scaler,
            "backend": self.cfg.backend, "rounds": self.round, "env_steps": self.env_steps,
            "wall_s": round(self._wall(), 3), "final_eval_return": self.last_eval,
            "best_eval_return": self.best_eval if np.isfinite(self.best_eval) else None,
            "train_return_last100": float(np.mean(recent)) if recent else None,
            "cost_usd": {"serverless": self.ledger.total_serverless_usd, "server": self.ledger.total_server_usd},
            "projected_cloud_s": self.ledger.total_projected_s,
            "config": dataclasses.asdict(self.cfg),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary
