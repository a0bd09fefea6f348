"""The learner interface (DESIGN §3): a round's fragments in, one update of the policy out.

A learner owns the policy, its optimiser and the normalisers, and nothing of how fragments were
sampled: :class:`PPOLearner` for synchronous rounds, :class:`APPOLearner` and :class:`IMPALALearner`
for the asynchronous ones, whose fragments lag behind the policy and are corrected with V-trace.
"""

from __future__ import annotations

import dataclasses
import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from minionsrl.config import LearnerConfig
from minionsrl.errors import Diverged
from minionsrl.function.fragment import Fragment, PolicySnapshot
from minionsrl.function.normalization import RunningMeanStd
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner.batch import Batch
from minionsrl.learner.detectors import Detected, DetectorPlan, detect
from minionsrl.learner.engine import SGDEngine, lr_factor, score
from minionsrl.learner.impala import impala_loss, vtrace_batch
from minionsrl.learner.networks import init_params, snapshot_of
from minionsrl.learner.ppo import LossFn, gae_batch, ppo_loss

LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl")  # an update's statistics that must be finite


@dataclass(frozen=True)
class UpdateStats:
    """An update's statistics under CleanRL's names: the last minibatch's losses and KL, the clipped share over the
    whole update, the value function's explained variance on the batch, and the rate the update started with."""

    policy_loss: float
    value_loss: float
    entropy: float
    approx_kl: float
    clipfrac: float
    explained_variance: float
    learning_rate: float


@dataclass
class Learned:
    """One update's outcome: the batch it learned on, CleanRL's statistics, and what the detectors read on the
    batch (before or after the update) with the seconds they took (apart from the update's)."""

    batch: Batch
    stats: UpdateStats
    detected: Detected = field(default_factory=Detected)
    detector_s: float = 0.0


class Learner(ABC):
    """Owns the policy, its optimiser and the normalisers; learns from a round's fragments. Its :attr:`engine`
    (the compiled SGD update, :class:`~minionsrl.learner.engine.SGDEngine`) holds the weights and the optimiser
    state and trains them on ``loss``: PPO's clipped surrogate unless the algorithm passes its own."""

    synchronous = True  # its rounds' fragments are all sampled with the current policy (a synchronous sampler)

    def __init__(self, arch: PolicyArch, lc: LearnerConfig, device: str = "cpu", seed: int = 0,
                 reference_batch: int | None = None, loss: LossFn = ppo_loss) -> None:
        self.arch, self.config = arch, lc
        self.device = jax.devices("cpu" if device == "cpu" else "gpu")[0]
        self.engine = SGDEngine(arch, init_params(arch, seed), lc, loss, self.device, reference_batch)
        self.lr = lc.learning_rate
        self.obs_rms = RunningMeanStd((arch.obs_dim,)) if lc.normalize_obs else None
        self.ret_rms = RunningMeanStd(()) if lc.normalize_reward else None

    def set_remaining(self, fraction: float) -> None:
        """The fraction of the run left (1 to 0 over whichever limit is nearest its end, kept across resumes:
        :class:`~minionsrl.loop.state.Remaining`), which sets the round's learning rate and clipping coefficient: the
        configured ones, times ``fraction`` where ``lr_schedule`` is ``anneal`` / ``anneal_clip`` asks. The rate is
        then scaled with the batch (:func:`lr_factor`); the adaptive rate (``desired_kl``) ignores it: the
        update steers its own, kept across rounds. The clip is a traced value of the compiled update: a new one
        compiles nothing."""
        lc = self.config
        self.lr = lc.learning_rate * (fraction if lc.lr_schedule == "anneal" else 1.0)
        self.engine.set_clip_coef(lc.clip_coef * (fraction if lc.anneal_clip else 1.0))

    def snapshot(self, version: int) -> PolicySnapshot:
        """The policy as rollout functions receive it."""
        return snapshot_of(self.arch, self.engine.weights, self.obs_rms, version, self.config.clip_obs)

    def learn(self, fragments: list[Fragment], rng: np.random.Generator, plan: DetectorPlan | None = None) -> Learned:
        """Merge the fragments' normaliser statistics (in the given order), build the round's batch, then update
        the policy with the round's learning rate (scaled with the batch where asked); the rate the update started
        with is in the statistics (the adaptive rate moves after each epoch from there). The detectors ``plan``
        asks for run on the batch before the update or after it."""
        for frag in fragments:
            if self.obs_rms is not None:
                self.obs_rms.update(frag.obs_moments)
            if self.ret_rms is not None:
                self.ret_rms.update(frag.ret_moments)
        if self.config.desired_kl is None:
            rows = sum(len(f.rewards) for f in fragments)
            self.engine.set_learning_rate(self.lr * lr_factor(rows, self.config, self.engine.reference_batch))
        lr = self.engine.learning_rate  # adaptive: where the previous rounds' epochs left it
        batch = self._batch(fragments)  # advantages from the weights the fragments were sampled with
        detected, detector_s = self.detect(batch, plan) if plan and plan.placement == "before" else (Detected(), 0.0)
        stats = UpdateStats(**self._update(batch, fragments, rng), learning_rate=lr)
        self._check_finite(stats)
        if plan and plan.placement == "after":
            detected, detector_s = self.detect(self._rescored(batch, fragments), plan)
        return Learned(batch, stats, detected, detector_s)

    def detect(self, batch: Batch, plan: DetectorPlan) -> tuple[Detected, float]:
        """The detectors ``plan`` asks for on ``batch`` at the current weights (the model left as it was), and the
        seconds they took."""
        started = time.perf_counter()
        detected = detect(plan, self.arch, self.engine.weights, batch, self.engine.constants,
                          kl_coef=self.engine.kl_coef)
        return detected, time.perf_counter() - started

    def _check_finite(self, stats: UpdateStats) -> None:
        """Raise :class:`Diverged` if the update's losses, weights or optimiser state are not finite: a NaN policy
        must not reach a checkpoint or the functions (which would then be blamed for non-finite replies)."""
        values = dataclasses.asdict(stats)
        bad = [f"{name} {values[name]:g}" for name in LOSS_STATS if not math.isfinite(values[name])]
        if not self.engine.finite:
            bad.append("weights or optimiser state non-finite")
        if bad:
            raise Diverged(f"the update diverged ({', '.join(bad)}) with learning rate {stats.learning_rate:g}: the "
                           "learning rate is likely too large, or the rewards too large in scale (normalize_reward); "
                           "nothing of this update was checkpointed or published: start again with a smaller "
                           "--learning-rate, or --resume from a kept checkpoint")

    @abstractmethod
    def _batch(self, fragments: list[Fragment]) -> Batch:
        """The round's batch (advantages and value targets) under the current weights and normalisers."""

    def _update(self, batch: Batch, fragments: list[Fragment], rng: np.random.Generator) -> dict[str, float]:
        """The algorithm's update on the round's batch (or its fragments); its statistics. Epochs of minibatch SGD
        on the batch unless the algorithm says otherwise."""
        return self.engine.update(batch, rng)

    def _rescored(self, batch: Batch, fragments: list[Fragment]) -> Batch:
        """The batch the detectors read after the update: the one learned on, unless the update re-scores it."""
        return batch

    def state_dict(self) -> dict[str, Any]:
        """Weights, optimiser state and normalisers, as NumPy arrays and numbers."""
        return {**self.engine.state_dict(),
                "obs_rms": self.obs_rms.state_dict() if self.obs_rms else None,
                "ret_rms": self.ret_rms.state_dict() if self.ret_rms else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.engine.load_state_dict(state)
        for rms, saved in ((self.obs_rms, state["obs_rms"]), (self.ret_rms, state["ret_rms"])):
            if rms is not None:
                rms.load_state_dict(saved)


class PPOLearner(Learner):
    """PPO on the round's batch: GAE, then epochs of minibatch SGD on the clipped surrogate.

    Pipelined (``pipeline``), fragments lag the learner by an update, so the clip is anchored at the
    policy being updated rather than the one that sampled them, and each row weighs π_anchor/π_behaviour — the
    decoupled PPO objective of Hilton et al. 2021 ("Batch size-invariance for policy optimization"). Anchored at a
    behaviour policy one update old, the ratio starts off 1 and the clip spends its trust region on the lag
    (docs/archive/RESULTS-2026-11.md: pipelined Hopper learned less per round that way)."""

    def _batch(self, fragments: list[Fragment]) -> Batch:
        lc = self.config
        batch = gae_batch(fragments, lc.gamma, lc.gae_lambda, self.ret_rms, lc.clip_reward)
        if not self.config.pipeline:
            return batch
        anchor, _ = score(self.arch, self.engine.weights, batch.obs, batch.actions)
        weights = np.exp(anchor.astype(np.float64) - batch.logprobs).astype(np.float32)
        return dataclasses.replace(batch, logprobs=anchor.astype(batch.logprobs.dtype), behaviour_weights=weights)


class VTraceLearner(Learner):
    """Learners on V-trace-corrected batches of lagging fragments (Espeholt et al. 2018)."""

    synchronous = False  # fragments arrive as they finish, sampled by policies up to a few updates old


    def _batch(self, fragments: list[Fragment]) -> Batch:
        return self.vtrace(fragments)

    def vtrace(self, fragments: list[Fragment]) -> Batch:
        """The fragments scored by the current policy, with V-trace targets and advantages."""
        lc = self.config
        return vtrace_batch(fragments, self.arch, self.engine.weights, lc.gamma, lc.gae_lambda, self.ret_rms,
                            lc.clip_reward, lc.vtrace_rho_bar, lc.vtrace_c_bar)


class APPOLearner(VTraceLearner):
    """APPO: PPO's clipped surrogate, epochs and minibatches on a V-trace batch scored once."""


class IMPALALearner(VTraceLearner):
    """IMPALA: one SGD step per learner batch of whole fragments (``minibatch_size // T`` of them, at least
    one, or ``num_minibatches`` batches per pass, split evenly), each scored with V-trace under the policy as
    it is at that step — its loss has no trust region, so a correction computed before earlier steps would be
    stale (Espeholt et al. 2018)."""

    def __init__(self, arch: PolicyArch, lc: LearnerConfig, device: str = "cpu", seed: int = 0,
                 reference_batch: int | None = None) -> None:
        super().__init__(arch, lc, device, seed, reference_batch, loss=impala_loss)

    def _update(self, batch: Batch, fragments: list[Fragment], rng: np.random.Generator) -> dict[str, float]:
        p, count = self.config, len(fragments)
        if p.num_minibatches is not None:  # that many learner batches per pass, whatever the fragment count
            groups = min(p.num_minibatches, count)
        else:
            longest = max(len(f.rewards) for f in fragments)  # a batch size makes them differ by a step
            groups = math.ceil(count / max(1, p.minibatch_size // longest))
        stats: dict[str, float] = {}
        for _ in range(p.update_epochs):
            for chunk in np.array_split(rng.permutation(count), groups):
                stats = self.engine.update(self.vtrace([fragments[i] for i in chunk]), rng, whole_batch=True)
        return stats

    def _rescored(self, batch: Batch, fragments: list[Fragment]) -> Batch:
        """The whole batch scored again under the updated policy (IMPALA scores each step's batch afresh)."""
        return self.vtrace(fragments)


# every learner by its config name (config.ALGOS, --algo): each is built from the resolved learner config alone
LEARNERS: dict[str, type[Learner]] = {"ppo": PPOLearner, "appo": APPOLearner, "impala": IMPALALearner}
