"""The run configuration: one flat dataclass, reachable from the CLI (``--kebab-case``) and YAML.

Resolution order: field defaults ← YAML file (``--config``) ← command-line flags ← preset (fills
whatever is still unset, chosen from the environment's family; under ``--preset auto`` the env's own
``ENV_PRESETS`` row, where it has one, over the family's). ``config.yaml`` in the run
directory holds the fully resolved result. Every field is validated before any work starts; a bad
one raises a one-line :class:`~minionsrl.errors.ConfigError` naming the field and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from minionsrl.backends.base import NAMES as BACKENDS
from minionsrl.cost import PLATFORMS
from minionsrl.errors import ConfigError
from minionsrl.function.faults import KINDS as fault_kinds
from minionsrl.redact import check_config_secrets

SCALERS = ("fixed", "minions", "nitro", "critical", "hydrozoa", "kungfu", "gns-boost", "min", "max", "random")
PRESET_NAMES = ("auto", "classic", "mujoco", "atari", "nitro")
OBJECTIVES = ("cost", "time")  # what the critical scaler minimises per unit of progress
DETECTOR_PLACEMENTS = ("before", "after")  # where the detectors read a round's batch (learner/detectors.py)
ALGOS = ("ppo", "appo", "impala")
DEVICES = ("auto", "cpu", "cuda")
LEARNER_BUDGETS = ("per-sample", "per-round", "fixed-compute")
LR_SCHEDULES = ("anneal", "constant", "adaptive")
DEFAULT_DESIRED_KL = 0.01  # rsl_rl's default desired_kl
_MAX_HIDDEN = 16384
FAULT_FIELDS = {kind: f"fault_{kind}" for kind in fault_kinds}

# CleanRL's defaults: ppo.py (classic control) and ppo_continuous_action.py (MuJoCo). Fragment
# length and evaluation cadence are ours (DESIGN §1: T = 128 for classic control, 512 for MuJoCo).
PRESETS: dict[str, dict[str, Any]] = {
    "classic": dict(total_timesteps=500_000, fragment_length=128, eval_every=5, learning_rate=2.5e-4,
                    anneal_lr=True, gamma=0.99, gae_lambda=0.95, update_epochs=4, minibatch_size=128,
                    norm_adv=True, clip_coef=0.2, clip_vloss=True, ent_coef=0.01, vf_coef=0.5,
                    max_grad_norm=0.5, normalize_obs=False, normalize_reward=False, kl_coef=0.0),
    "mujoco": dict(total_timesteps=1_000_000, fragment_length=512, eval_every=10, learning_rate=3e-4,
                   anneal_lr=True, gamma=0.99, gae_lambda=0.95, update_epochs=10, minibatch_size=64,
                   norm_adv=True, clip_coef=0.2, clip_vloss=True, ent_coef=0.0, vf_coef=0.5,
                   max_grad_norm=0.5, normalize_obs=True, normalize_reward=True, kl_coef=0.0),
    # ppo_atari.py: 8 envs x 128 steps in 4 minibatches (256), clip 0.1, 10M steps.
    "atari": dict(total_timesteps=10_000_000, fragment_length=128, eval_every=50, learning_rate=2.5e-4,
                  anneal_lr=True, gamma=0.99, gae_lambda=0.95, update_epochs=4, minibatch_size=256,
                  norm_adv=True, clip_coef=0.1, clip_vloss=True, ent_coef=0.01, vf_coef=0.5,
                  max_grad_norm=0.5, normalize_obs=False, normalize_reward=False, kl_coef=0.0),
}
# The papers' learner (--preset nitro), applied over the family preset: PPO as the published Nitro code ran it
# on RLlib — one full-batch minibatch per epoch (so the SGD steps per round do not depend on n), 30 epochs,
# lr 5e-5, GAE lambda 1.0, clip 0.3, the squared value error clipped at 10, value coefficient 1.0, no entropy
# bonus, no gradient clipping, no observation filter, and the adaptive KL penalty (0.2, target 0.01).
NITRO_PRESET: dict[str, Any] = dict(num_minibatches=1, update_epochs=30, learning_rate=5e-5, anneal_lr=False,
                                    gae_lambda=1.0, clip_coef=0.3, vf_clip=10.0, vf_coef=1.0, ent_coef=0.0,
                                    max_grad_norm=0.0, kl_coef=0.2, kl_target=0.01, normalize_obs=False,
                                    normalize_reward=False)
# Per-env settings over the family preset, for the classic-control envs whose family preset does not learn them
# within rl-baselines3-zoo's PPO step budget (bench/classic_control.py, docs/BENCHMARKS.md). ``--preset auto``
# applies the env's row on top of its family's preset; naming a preset (``--preset classic``) gives the bare
# family values. Keyed by the exact Gymnasium id. Adapted from the zoo's tuned hyperparams/ppo.yml: its
# n_envs x n_steps is our actors (8 by default) x fragment_length, so that a round's batch matches the zoo's;
# "normalize" is our normalize_obs and normalize_reward; budgets are the zoo's or fewer steps, as far as our
# probes needed. The zoo's state-dependent exploration (gSDE, on Pendulum and MountainCarContinuous) has no
# counterpart here: Pendulum adds reward scaling instead (without it, a probe ended at -1,137 after 100k steps).
# LunarLander's returns are in the hundreds and unscaled, so the value loss is not clipped (the zoo's SB3 does
# not clip it either): clipped at 0.2 per update, a probe's value function lagged and ended at 102 after 1M steps.
# CartPole-v1 takes the zoo's tuned row (32 steps x 8 actors, 20 epochs of one 256-sample minibatch): the bare
# classic preset ended at 437.6 +- 64.1 at the zoo's 100k steps (349, 463, 500 on seeds 1-3), this row at 500 in
# probes; an evaluation every 10 of its short rounds, so that evaluating (up to 5,000 steps) does not dwarf them.
ENV_PRESETS: dict[str, dict[str, Any]] = {
    "CartPole-v1": dict(total_timesteps=100_000, fragment_length=32, eval_every=10, learning_rate=1e-3, gamma=0.98,
                        gae_lambda=0.8, update_epochs=20, minibatch_size=256, ent_coef=0.0),
    "Acrobot-v1": dict(total_timesteps=200_000, fragment_length=512, learning_rate=3e-4, anneal_lr=False,
                       gae_lambda=0.94, minibatch_size=64, ent_coef=0.0, normalize_obs=True, normalize_reward=True),
    "MountainCar-v0": dict(total_timesteps=300_000, fragment_length=256, eval_every=10, learning_rate=3e-4,
                           anneal_lr=False, gae_lambda=0.98, minibatch_size=64, ent_coef=0.0, normalize_obs=True,
                           normalize_reward=True),
    "MountainCarContinuous-v0": dict(total_timesteps=20_000, fragment_length=8, eval_every=20, learning_rate=7.77e-5,
                                     gamma=0.9999, gae_lambda=0.9, update_epochs=10, minibatch_size=256,
                                     clip_coef=0.1, ent_coef=0.00429, vf_coef=0.19, max_grad_norm=5.0,
                                     normalize_obs=True, normalize_reward=True),
    "Pendulum-v1": dict(total_timesteps=100_000, fragment_length=512, learning_rate=1e-3, anneal_lr=False,
                        gamma=0.9, update_epochs=10, minibatch_size=64, ent_coef=0.0, normalize_reward=True),
    "LunarLander-v3": dict(total_timesteps=1_000_000, fragment_length=2048, learning_rate=3e-4, anneal_lr=False,
                           gamma=0.999, gae_lambda=0.98, minibatch_size=64, clip_vloss=False),
}
# Applied over the family preset. IMPALA takes one pass, one SGD step per group of whole fragments
# (Espeholt et al. 2018); APPO keeps PPO's epochs, minibatches and clipping.
ALGO_PRESETS: dict[str, dict[str, Any]] = {"ppo": {}, "appo": {}, "impala": dict(update_epochs=1)}


# How many steps each rollout function of a round takes: the one rule (DESIGN §1). With a fragment length T
# every function steps T steps in each of its E environments, so a round of n functions learns on n·E·T samples:
# more actors, a larger batch. With a batch size B the round's batch is B whatever n: each function steps about
# B / (n·E), the remainder spread one step each over the first functions, so a round's fragments differ by one
# step at most and add up to exactly B; more actors then buy a shorter round, not a larger batch (the way
# massively parallel PPO, rsl_rl, Brax or Isaac Gym, gets its speed).
@dataclass(frozen=True)
class StepPlan:
    """The steps per rollout function of a round of ``n`` functions: ``fragment_length`` each, or
    ``batch_size`` in all (exactly one of the two is set), with ``envs`` environments per function."""

    fragment_length: int | None = None
    batch_size: int | None = None
    envs: int = 1

    def __post_init__(self) -> None:
        if (self.fragment_length is None) == (self.batch_size is None):
            raise ConfigError("batch_size: set exactly one of batch_size and fragment_length")

    @property
    def constant_batch(self) -> bool:
        """Whether the round's batch stays ``batch_size`` whatever the actor count."""
        return self.batch_size is not None

    def steps(self, n: int) -> list[int]:
        """The steps of each of ``n`` functions (per environment), in slot order: the first ones take the
        remainder of ``batch_size / (n·envs)``, one step each."""
        if self.batch_size is None:
            assert self.fragment_length is not None
            return [self.fragment_length] * n
        base, extra = divmod(self.batch_size // self.envs, n)
        return [base + (slot < extra) for slot in range(n)]

    def slot_steps(self, slot: int, n: int) -> int:
        """The steps of function ``slot`` of a round of ``n`` (per environment)."""
        return self.steps(n)[slot]

    def round_batch(self, n: int) -> int:
        """The samples of a round of ``n`` functions."""
        return sum(self.steps(n)) * self.envs

    def check(self, most_actors: int) -> None:
        """Raise a one-line :class:`ConfigError` if a round of up to ``most_actors`` functions cannot split
        ``batch_size`` into whole steps, at least one per environment."""
        if self.batch_size is None:
            return
        if self.batch_size % self.envs:
            raise ConfigError(f"batch_size: {self.batch_size} is not a multiple of envs_per_function {self.envs} "
                              "(a function steps its environments together); make it one")
        if self.batch_size < most_actors * self.envs:
            raise ConfigError(f"batch_size: {self.batch_size} steps cannot be split over up to {most_actors} "
                              f"functions x {self.envs} environment(s), one step each at least; raise batch_size "
                              f"to >= {most_actors * self.envs} or allow fewer actors (--actors / --n-max)")


GROUPS = ("env", "run", "eval", "learner", "actors", "scaler", "backend", "faults", "cost")


def _f(default: Any = None, help: str = "", *, group: str, learning: bool = True, **rules: Any) -> Any:
    """A config field: its help text, its section (``group``: which subcommands take it as a flag), whether
    it changes what is learned (a resumed run must keep it), and its validation rules (min, max, choices,
    positive)."""
    assert group in GROUPS, group
    metadata = {"help": help, "group": group, "learning": learning, **rules}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainConfig:
    """Everything that defines a training run. ``None`` means "from the preset" where one applies."""

    env_id: str = _f("CartPole-v1", "Gymnasium id or custom entry point package.module:ClassName", group="env")
    env_kwargs: dict = _f({}, "keyword arguments for the environment constructor (JSON on the CLI)", group="env")
    preset: str = _f("auto", "hyper-parameter preset: auto picks by env family, then applies the env's own row of "
                     f"ENV_PRESETS where it has one ({', '.join(ENV_PRESETS)}; README)",
                     choices=PRESET_NAMES, group="run")
    total_timesteps: int | None = _f(None, "stop after this many environment steps", min=1, group="run", learning=False)
    max_rounds: int | None = _f(None, "stop after this many rounds", min=1, group="run", learning=False)
    target_return: float | None = _f(None, "stop once the mean evaluation return reaches this",
                                     group="run", learning=False)
    seed: int = _f(1, "seed of the run (weights, actor seeds, minibatch order)", min=0, max=2**32 - 1, group="run")
    algo: str = _f("ppo", "learner: ppo (synchronous rounds) or appo/impala (asynchronous, V-trace)",
                   choices=ALGOS, group="learner")
    pipeline: bool = _f(False, "ppo: send the next round's functions before this round's update, so they sample "
                        "with the policy one update older (a policy lag of one, which PPO's ratio corrects) while "
                        "the learner works: the update leaves the round's critical path", group="learner")
    async_fragments: int | None = _f(None, "appo/impala: update once this many fragments have arrived "
                                     "(default: half of those in flight, at least 1)", min=1, group="learner")
    vtrace_rho_bar: float = _f(1.0, "appo/impala: V-trace clipping of the importance weight rho", positive=True,
                               group="learner")
    vtrace_c_bar: float = _f(1.0, "appo/impala: V-trace clipping of the trace coefficient c", positive=True,
                             group="learner")
    scaler: str = _f("fixed", "how many actors each round gets", choices=SCALERS, group="scaler")
    actors: int = _f(8, "number of actors per round (fixed scaler)", min=1, max=4096, group="actors")
    n_min: int = _f(8, "fewest actors a scaler may choose", min=1, max=4096, group="actors")
    n_max: int = _f(64, "most actors a scaler may choose", min=1, max=4096, group="actors")
    initial_actors: int = _f(16, "actors in round 1 for nitro and critical (n_0)", min=1, max=4096, group="scaler")
    objective: str = _f("cost", "critical: minimise dollars (cost) or projected seconds (time) per unit of progress",
                        choices=OBJECTIVES, group="scaler")
    nitro_window: int = _f(6, "nitro: window W of decayed convexity ratios", min=1, group="scaler")
    nitro_decay: float = _f(0.96, "nitro: decay delta of the metric and the floor", positive=True, max=1.0,
                            group="scaler")
    nitro_floor: str = _f("r2", "nitro: floor n_max*delta^(r*r) ('r2', published) or delta^r ('r')",
                          choices=("r2", "r"), group="scaler")
    nitro_window_mode: str = _f("decayed", "nitro: window holds decayed ratios, or also the raw ones (published code)",
                                choices=("decayed", "decayed+raw"), group="scaler")
    scheduler: str | None = _f(None, "minions: scheduler artefact (default: the one shipped for the env's family, "
                               "trained on CartPole or on Hopper)", group="scaler")
    detectors: str = _f("auto", "compute convexity ratio and noise scale: auto (when the scaler needs them), on, off",
                        choices=("auto", "on", "off"), group="scaler")
    detector_placement: str = _f("before", "where the detectors read the round's batch: before the update, at the "
                                 "policy that sampled it (McCandlish et al.'s noise scale), or after it (Nitro's "
                                 "published placement)", choices=DETECTOR_PLACEMENTS, group="scaler")
    lanczos_iterations: int = _f(100, "Lanczos iterations of the curvature detector, at most", min=2, group="scaler")
    lanczos_tol: float = _f(1e-2, "the curvature detector stops once two iterations in a row moved neither extreme "
                            "eigenvalue by more than this fraction of the larger (0: all --lanczos-iterations)",
                            min=0.0, group="scaler")
    # 1,024 rows keep the detector under 10% of a projected round; Nitro's n from them agrees with a 4,096-row
    # estimate about as often as a second 4,096-row draw does (docs/BENCHMARKS.md §11)
    detector_samples: int = _f(1024, "curvature detector: random subsample of the round batch (0: all of it)", min=0,
                               group="scaler")
    backend: str = _f("local", "where rollout functions run", choices=BACKENDS, group="backend", learning=False)
    fragment_length: int | None = _f(None, "steps per rollout function (T): a round's batch grows with the actors; "
                                     "exclusive with batch_size", min=1, max=1_000_000, group="env")
    batch_size: int | None = _f(None, "samples per round whatever the actor count: each function steps about "
                                "batch_size / (actors x envs_per_function), so more actors buy a shorter round, not "
                                "a larger batch; exclusive with fragment_length", min=1, max=100_000_000, group="env")
    env_step_latency_ms: float = _f(0.0, "wait this long in every env step (a remote simulator, game server or "
                                    "model-judged reward), sleeping, not burning CPU; training and in-run "
                                    "evaluation (0: off)", min=0.0, max=10_000.0, group="env", learning=False)
    envs_per_function: int = _f(1, "environments one rollout function steps together, its policy run once per step "
                                "on all of them (RLlib's num_envs_per_env_runner); fragments stay one per "
                                "environment", min=1, max=256, group="env")
    carry_episodes: bool = _f(True, "continue episodes across rounds by sending the env state with the "
                              "request (MuJoCo, classic control); off: every fragment starts an episode", group="env")
    eval_every: int | None = _f(None, "evaluate every this many rounds (0: only at the end)", min=0,
                                group="eval", learning=False)
    eval_episodes: int = _f(10, "episodes per evaluation (deterministic policy)", min=1, group="eval", learning=False)
    eval_overlap: bool = _f(True, "run a round's evaluation beside the next round's functions (they use the same "
                            "policy), its row written once it returns; off: after the update, as the round's last "
                            "step. The last round always evaluates after its update", group="eval", learning=False)
    run_dir: str | None = _f(None, "output directory (default runs/<env>__<seed>__<time>)", group="run", learning=False)
    # at most what the learner's float32 holds (beyond, it would be infinite)
    learning_rate: float | None = _f(None, "Adam learning rate", positive=True, max=3.4e38, group="learner")
    anneal_lr: bool | None = _f(None, "anneal the learning rate linearly to 0 over total_timesteps", group="learner")
    lr_schedule: str | None = _f(None, "learning rate per round: anneal (--anneal-lr), constant (--no-anneal-lr) or "
                                 "adaptive (steered by the KL, towards --desired-kl; rsl_rl's and rl_games' rule) "
                                 "(default: the preset's --anneal-lr)",
                                 choices=LR_SCHEDULES, group="learner")
    desired_kl: float | None = _f(None, "adaptive learning rate: after each epoch, the rate /1.5 when the epoch's mean "
                                  "KL is above 2x this, x1.5 below half of it (default 0.01)", positive=True,
                                  group="learner")
    lr_min: float = _f(1e-5, "adaptive learning rate: lower bound", positive=True, group="learner")
    lr_max: float = _f(1e-2, "adaptive learning rate: upper bound", positive=True, group="learner")
    gamma: float | None = _f(None, "discount factor", min=0.0, max=1.0, group="learner")
    gae_lambda: float | None = _f(None, "GAE lambda", min=0.0, max=1.0, group="learner")
    update_epochs: int | None = _f(None, "epochs over each round's batch", min=1, group="learner")
    minibatch_size: int | None = _f(None, "minibatch size (the count follows the round's batch); exclusive with "
                                    "num_minibatches", min=1, group="learner")
    num_minibatches: int | None = _f(None, "minibatches per epoch (minibatch = batch / K: the SGD steps per round "
                                     "stay fixed as actors grow); exclusive with minibatch_size", min=1,
                                     group="learner")
    learner_budget: str = _f("per-sample", "how the update's work follows the actor count: per-sample (minibatches "
                             "of a fixed size: SGD steps grow with n), per-round (a fixed number of minibatches) or "
                             "fixed-compute (a fixed number of steps of a fixed size: fewer epochs as n grows); the "
                             "reference is a batch of --reference-actors functions", choices=LEARNER_BUDGETS,
                             group="learner")
    reference_actors: int | None = _f(None, "the actor count whose batch the learner budget and the learning-rate "
                                      "rule are relative to (default: --actors); a comparison gives every arm the "
                                      "same one", min=1, group="learner")
    lr_batch_scaling: str = _f("none", "learning rate for larger batches: none, or sqrt (times sqrt(batch / reference "
                               "batch))", choices=("none", "sqrt"), group="learner")
    norm_adv: bool | None = _f(None, "normalise advantages per minibatch", group="learner")
    clip_coef: float | None = _f(None, "surrogate clipping coefficient", positive=True, group="learner")
    clip_vloss: bool | None = _f(None, "clip the value loss", group="learner")
    ent_coef: float | None = _f(None, "entropy bonus coefficient", min=0.0, group="learner")
    vf_coef: float | None = _f(None, "value loss coefficient", min=0.0, group="learner")
    max_grad_norm: float | None = _f(None, "gradient clipping norm (0: no clipping)", min=0.0, group="learner")
    vf_clip: float | None = _f(None, "clip the squared value error at this (RLlib's vf_clip_param; replaces "
                               "clip_vloss)", positive=True, group="learner")
    kl_coef: float | None = _f(None, "initial coefficient of an adaptive KL penalty (0: none)", min=0.0,
                               group="learner")
    kl_target: float | None = _f(None, "target KL of the adaptive penalty: its coefficient x1.5 above 2x the "
                                 "target, halved below half of it", positive=True, group="learner")
    target_kl: float | None = _f(None, "stop the epochs early above this approx KL", positive=True, group="learner")
    normalize_obs: bool | None = _f(None, "normalise observations with running statistics", group="learner")
    normalize_reward: bool | None = _f(None, "scale rewards by the std of discounted returns", group="learner")
    clip_obs: float = _f(10.0, "clip normalised observations to +-this", positive=True, group="learner")
    clip_reward: float = _f(10.0, "clip scaled rewards to +-this", positive=True, group="learner")
    hidden_sizes: list = _f([64, 64], "hidden layer sizes of actor and critic", group="learner")
    max_concurrency: int | None = _f(None, "local backend: concurrent instances (default: CPU count)", min=1,
                                     group="backend", learning=False)
    idle_timeout_s: float = _f(300.0, "local backend: reap instances idle this long", positive=True,
                               group="backend", learning=False)
    server_wait_startup: bool = _f(False, "server backend: really wait the start-up delay of added hosts",
                                   group="backend", learning=False)
    invocation_timeout_s: float | None = _f(None, "fail an invocation running longer than this", positive=True,
                                            group="backend", learning=False)
    max_retries: int = _f(3, "retry a failed invocation (raised, timed out, died, malformed) up to this many times",
                          min=0, max=100, group="faults", learning=False)
    round_deadline_s: float | None = _f(None, "after this long a round proceeds with the fragments that arrived "
                                        "(stragglers are cancelled and billed)", positive=True,
                                        group="faults", learning=False)
    min_reply_fraction: float = _f(0.5, "fewest fragments a round may proceed with, as a fraction of its actors; "
                                   "fewer fail the run", positive=True, max=1.0, group="faults", learning=False)
    fault_raise: float = _f(0.0, "fault injection: probability that an invocation raises", min=0.0, max=1.0,
                            group="faults", learning=False)
    fault_hang: float = _f(0.0, "fault injection: probability that an invocation hangs past its deadline",
                           min=0.0, max=1.0, group="faults", learning=False)
    fault_kill: float = _f(0.0, "fault injection: probability that an invocation's instance is SIGKILLed",
                           min=0.0, max=1.0, group="faults", learning=False)
    fault_duplicate: float = _f(0.0, "fault injection: probability that an invocation's reply arrives twice",
                                min=0.0, max=1.0, group="faults", learning=False)
    fault_malformed: float = _f(0.0, "fault injection: probability that an invocation returns corrupted bytes",
                                min=0.0, max=1.0, group="faults", learning=False)
    fault_seed: int = _f(0, "fault injection: seed of the draws (which attempt of which slot gets which fault)",
                         min=0, group="faults", learning=False)
    ray_address: str | None = _f(None, "ray backend: join the Ray cluster at this address (default: start a local one)",
                                 group="backend", learning=False)
    ray_num_cpus: float = _f(1.0, "ray backend: CPUs reserved by each invocation", positive=True,
                             group="backend", learning=False)
    lithops_config: str | None = _f(None, "lithops backend: Lithops config file (default: Lithops' own lookup)",
                                    group="backend", learning=False)
    prices: str | None = _f(None, "price catalogue YAML for the cost ledger (default: the shipped one)", group="cost")
    platform: str = _f("aws_lambda_x86", "function platform the ledger bills", choices=PLATFORMS, group="cost")
    function_memory_mb: float = _f(1769.0, "memory of one function (1769 MB = 1 vCPU on Lambda); the local backend "
                                   "stops an instance that holds more, as the platform would (status oom)", min=128,
                                   max=10240, group="cost")
    cold_start_s: float = _f(1.0, "modelled cold start of a cloud function, for the projected cloud time", min=0.0,
                             group="cost")
    budget_usd: float | None = _f(None, "stop before a round that would take the serverless cost past this",
                                  positive=True, group="cost", learning=False)
    time_budget_s: float | None = _f(None, "stop before a round that would take the projected cloud time (seconds) "
                                     "past this", positive=True, group="cost", learning=False)
    learner_threads: int = _f(1, "CPU threads of the learner's compiled update (XLA); 1 leaves the other cores to the "
                              "rollout functions", min=1, group="run")
    device: str = _f("auto", "where the learner runs (update, detectors, V-trace): auto (a GPU when there is one), "
                     "cpu or cuda; rollout functions never need one", choices=DEVICES, group="learner",
                     learning=False)
    checkpoint_every: int = _f(1, "write a checkpoint every this many rounds", min=1, group="run", learning=False)
    keep_checkpoints_every: int = _f(0, "also keep checkpoints/round-NNNNN.safetensors every this many rounds "
                                     "(0: never)", min=0, group="run", learning=False)
    tensorboard: bool = _f(True, "write TensorBoard event files", group="run", learning=False)
    track: bool = _f(False, "log the run to Weights & Biases: the TensorBoard scalars, the config and the plots "
                     "(the wandb extra; WANDB_MODE=offline keeps it in RUN_DIR/wandb)", group="run", learning=False)
    wandb_project_name: str = _f("minionsrl", "W&B project of --track", group="run", learning=False)
    wandb_entity: str | None = _f(None, "W&B team or user of --track (default: your W&B default entity)",
                                  group="run", learning=False)
    progress: bool = _f(True, "show a live progress display", group="run", learning=False)
    fault_throttle: float = _f(0.0, "fault injection: probability that the platform refuses an invocation (throttled: "
                               "backed off and retried)", min=0.0, max=1.0, group="faults", learning=False)
    fault_oom: float = _f(0.0, "fault injection: probability that an invocation allocates past its function's memory",
                          min=0.0, max=1.0, group="faults", learning=False)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def learning_fields(self) -> dict[str, Any]:
        """Fields that change what is learned (a resumed run must keep them); stop conditions, outputs, where
        functions run and how faults are handled do not (the same learning on every backend)."""
        return {k: v for k, v in self.to_dict().items() if FIELDS[k].metadata["learning"]}


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def field_kind(name: str) -> str:
    """A field's value type, the one dispatch the CLI and YAML share: bool, int, float, str, list or dict
    (``X | None`` is X)."""
    return str(FIELDS[name].type).split(" |")[0]


def fields_of(groups: tuple[str, ...] = GROUPS) -> list[str]:
    """The fields of the given sections, in declaration order."""
    return [name for name, f in FIELDS.items() if f.metadata["group"] in groups]


def help_text(name: str) -> str:
    """A field's ``--help`` line: its help and its default, or, where a preset decides it, the preset's values
    (per family, then where ``--preset nitro`` or an algo changes them, then the envs whose ``ENV_PRESETS`` row
    sets it under ``--preset auto``), as CleanRL's tyro help shows defaults."""
    f = FIELDS[name]
    text = f.metadata["help"]
    default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
    if default is not None:
        return f"{text} (default: {_cli_value(default)})"
    families, overlays = preset_values(name)
    per_env = ", ".join(f"{env_id} {_cli_value(row[name])}" for env_id, row in ENV_PRESETS.items() if name in row)
    per_env = f" (auto, per env: {per_env})" if per_env else ""
    if families:
        return f"{text} (default: from the preset: {'; '.join(filter(None, (families, overlays)))}){per_env}"
    if overlays:
        return f"{text} (default: unset; from the preset: {overlays}){per_env}"
    return text if "default" in text else f"{text} (default: unset)"


def preset_values(name: str) -> tuple[str, str]:
    """What the presets set a field to: per family (``classic 0.00025, mujoco 0.0003, atari 0.00025``, or one
    value where all agree), and where ``--preset nitro`` or an algo changes it (``nitro 5e-05``); "" for none."""
    families = {family: values[name] for family, values in PRESETS.items() if name in values}
    distinct = {_cli_value(v) for v in families.values()}
    per_family = (next(iter(distinct)) if len(distinct) == 1 and len(families) == len(PRESETS) else
                  ", ".join(f"{family} {_cli_value(v)}" for family, v in families.items()))
    overlays = {"nitro": NITRO_PRESET, **{f"algo {algo}": values for algo, values in ALGO_PRESETS.items()}}
    changed = [f"{label} {_cli_value(values[name])}" for label, values in overlays.items() if name in values]
    # a preset's minibatch count replaces the family's minibatch size (resolve)
    changed += [f"{label} unset" for label, values in overlays.items()
                if name == "minibatch_size" and "num_minibatches" in values]
    return per_family, ", ".join(changed)


def preset_flags(values: dict[str, Any]) -> str:
    """Preset values as the command-line flags that set them (``--fragment-length 512 --no-anneal-lr``): an
    ``ENV_PRESETS`` row is ``--preset classic`` plus these flags."""
    return " ".join((f"--{name}" if value else f"--no-{name}") if isinstance(value, bool) else
                    f"--{name} {_cli_value(value)}" for name, value in
                    ((k.replace("_", "-"), v) for k, v in values.items()))


def _cli_value(value: Any) -> str:
    """A value as it is written on the command line (``--hidden-sizes 64 64``, ``--env-kwargs '{}'``)."""
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a dict of field values (unknown keys are an error), with the limits of
    :func:`minionsrl.files.read_yaml` (size, nesting, aliases, duplicate keys)."""
    from minionsrl import files

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} does not exist; pass an existing YAML file to --config")
    data = files.read_yaml(path, "config file") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of field: value")
    return {k.replace("-", "_") if isinstance(k, str) else k: v for k, v in data.items()}


def build(overrides: dict[str, Any]) -> TrainConfig:
    """Make a config from field values, checking names and types (presets are applied later)."""
    values: dict[str, Any] = {}
    for name, value in overrides.items():
        if name not in FIELDS:
            close = difflib.get_close_matches(str(name), list(FIELDS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown config field {name!r}{hint}")
        values[name] = _coerce(name, value)
    return TrainConfig(**values)


def resolve(cfg: TrainConfig, family: str) -> TrainConfig:
    """Fill unset fields from the preset (``auto``: by env family, with the env's ``ENV_PRESETS`` row over it) and
    a default run dir; validate."""
    family = family if family in PRESETS else "classic"
    name = family if cfg.preset in ("auto", "nitro") else cfg.preset
    preset = {**PRESETS[name], **env_preset(cfg), **(NITRO_PRESET if cfg.preset == "nitro" else {}),
              **ALGO_PRESETS[cfg.algo]}
    if "num_minibatches" in preset:  # a preset's minibatch count replaces the family's minibatch size
        preset.pop("minibatch_size", None)
    if cfg.minibatch_size is not None and cfg.num_minibatches is not None:
        raise ConfigError("num_minibatches: set either num_minibatches or minibatch_size, not both")
    # a minibatch size or count given by the user replaces the preset's way of splitting the batch, and a batch
    # size the preset's fragment length
    user_split = {"minibatch_size", "num_minibatches"} if {cfg.minibatch_size, cfg.num_minibatches} != {None} else set()
    if cfg.batch_size is not None:
        user_split.add("fragment_length")
    cfg = _lr_schedule_as_anneal(cfg)
    filled = {k: v for k, v in preset.items() if getattr(cfg, k) is None and k not in user_split}
    cfg = _adaptive_lr(dataclasses.replace(cfg, **filled))
    if cfg.kl_target is not None and not cfg.kl_coef:
        raise ConfigError("kl_target: the adaptive KL penalty needs a starting coefficient; set kl_coef > 0 "
                          "(RLlib's is 0.2)")
    if cfg.algo == "impala" and cfg.kl_coef:
        raise ConfigError("kl_coef: IMPALA's loss has no KL penalty; use --algo ppo or appo, or kl_coef 0")
    if cfg.run_dir is None:
        safe_env = cfg.env_id.replace("/", "_").replace(":", "_")
        cfg = dataclasses.replace(cfg, run_dir=f"runs/{safe_env}__{cfg.seed}__{time.strftime('%Y%m%d-%H%M%S')}")
    validate(cfg)
    return cfg


def _lr_schedule_as_anneal(cfg: TrainConfig) -> TrainConfig:
    """``--lr-schedule`` over ``--anneal-lr/--no-anneal-lr`` (which keep working): anneal is ``anneal_lr``, constant
    and adaptive are not; the two flags given in contradiction are bad input."""
    if cfg.lr_schedule is None:
        return cfg
    anneal = cfg.lr_schedule == "anneal"
    if cfg.anneal_lr is not None and cfg.anneal_lr != anneal:
        flag = "--anneal-lr" if cfg.anneal_lr else "--no-anneal-lr"
        raise ConfigError(f"lr_schedule: {cfg.lr_schedule!r} contradicts {flag}; give one of the two")
    return dataclasses.replace(cfg, anneal_lr=anneal)


def _adaptive_lr(cfg: TrainConfig) -> TrainConfig:
    """The adaptive rate's target KL, and the combinations it cannot take. The other schedules are ``anneal_lr``
    alone in the resolved config (``lr_schedule`` unset), so a run directory written before ``lr_schedule``
    existed resumes."""
    if cfg.lr_schedule != "adaptive":
        if cfg.desired_kl is not None:
            raise ConfigError("desired_kl: only the adaptive learning rate reads it; add --lr-schedule adaptive")
        return dataclasses.replace(cfg, lr_schedule=None)
    if cfg.algo == "impala":  # each of its steps re-scores the batch first: the KL it could read is always 0
        raise ConfigError("lr_schedule: IMPALA takes one step per scored batch, so there is no KL to adapt the rate "
                          "to; use --algo ppo or appo, or --lr-schedule anneal/constant")
    if cfg.lr_batch_scaling != "none":
        raise ConfigError("lr_batch_scaling: the adaptive learning rate finds its own step size for the batch; use "
                          "--lr-batch-scaling none with --lr-schedule adaptive")
    return dataclasses.replace(cfg, desired_kl=cfg.desired_kl or DEFAULT_DESIRED_KL)


def most_actors(cfg: TrainConfig) -> int:
    """The most actors a round of this run can have: the fixed count, or the scaler's ``n_max``."""
    return cfg.actors if cfg.scaler == "fixed" else cfg.n_max


def step_plan(cfg: TrainConfig) -> StepPlan:
    """The steps each rollout function takes (:class:`StepPlan`), of a resolved config."""
    return StepPlan(None if cfg.batch_size is not None else cfg.fragment_length, cfg.batch_size,
                    cfg.envs_per_function)


def env_preset(cfg: TrainConfig) -> dict[str, Any]:
    """The env's own settings over its family preset (:data:`ENV_PRESETS`): only under ``--preset auto`` and for
    PPO (the rows are the zoo's PPO settings; APPO and IMPALA keep the family's)."""
    return dict(ENV_PRESETS.get(cfg.env_id, {})) if cfg.preset == "auto" and cfg.algo == "ppo" else {}


STOPS = ("total_timesteps", "max_rounds", "target_return", "budget_usd", "time_budget_s")


def validate(cfg: TrainConfig, require_stop: bool = True) -> None:
    """Check every field against its rules; raise a one-line ConfigError for the first bad one."""
    for name, f in FIELDS.items():
        value = getattr(cfg, name)
        if value is None:
            continue
        rules = f.metadata
        if "choices" in rules and value not in rules["choices"]:
            raise ConfigError(f"{name}: {value!r} is not one of {', '.join(rules['choices'])}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{name}: {value!r} must be a finite number")
            if "min" in rules and value < rules["min"]:
                raise ConfigError(f"{name}: {value!r} is too small; use a value >= {rules['min']}")
            if "max" in rules and value > rules["max"]:
                raise ConfigError(f"{name}: {value!r} is too large; use a value <= {rules['max']}")
            if rules.get("positive") and value <= 0:
                raise ConfigError(f"{name}: {value!r} must be > 0")
    if not cfg.hidden_sizes or any(not isinstance(h, int) or isinstance(h, bool) or not 1 <= h <= _MAX_HIDDEN
                                   for h in cfg.hidden_sizes):
        raise ConfigError(f"hidden_sizes: {cfg.hidden_sizes!r} must be a non-empty list of integers in "
                          f"1..{_MAX_HIDDEN}")
    if cfg.run_dir is not None:
        check_path("run_dir", cfg.run_dir)
    try:
        json.dumps(cfg.env_kwargs, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env_kwargs: {cfg.env_kwargs!r} must hold only JSON values (numbers, strings, lists, "
                          "mappings): they travel to every function") from exc
    check_config_secrets(cfg.to_dict())
    if cfg.backend in ("ray", "lithops") and importlib.util.find_spec(cfg.backend) is None:
        raise ConfigError(f"backend: {cfg.backend!r} is not installed; pip install 'minionsrl[{cfg.backend}]'")
    if cfg.n_min > cfg.n_max:
        raise ConfigError(f"n_min: {cfg.n_min} is larger than n_max {cfg.n_max}; make n_min <= n_max")
    if cfg.lr_min >= cfg.lr_max:
        raise ConfigError(f"lr_min: {cfg.lr_min:g} is not below lr_max {cfg.lr_max:g}; make lr_min < lr_max")
    if cfg.batch_size is not None:
        if cfg.fragment_length is not None:
            raise ConfigError("batch_size: set either batch_size or fragment_length, not both")
        step_plan(cfg).check(most_actors(cfg))
    rates = sum(getattr(cfg, name) for name in FAULT_FIELDS.values())
    if rates > 1.0:
        raise ConfigError(f"fault_*: the fault rates add up to {rates:g}; make their sum <= 1")
    if cfg.fault_hang > 0 and cfg.invocation_timeout_s is None and cfg.round_deadline_s is None:
        raise ConfigError("fault_hang: injected hangs need a deadline; set invocation_timeout_s or round_deadline_s")
    if cfg.algo != "ppo" and cfg.pipeline:
        raise ConfigError(f"pipeline: {cfg.algo} keeps its functions in flight already (asynchronous); pipeline is "
                          "for ppo's synchronous rounds")
    if cfg.algo != "ppo" and cfg.round_deadline_s is not None:
        raise ConfigError(f"round_deadline_s: {cfg.algo} has no round barrier (it updates once async_fragments "
                          "have arrived); unset it, or bound each function with invocation_timeout_s")
    if cfg.algo != "ppo" and cfg.fault_hang > 0 and cfg.invocation_timeout_s is None:
        raise ConfigError("fault_hang: injected hangs need invocation_timeout_s with an asynchronous algo")
    if require_stop and all(getattr(cfg, name) is None for name in STOPS):
        raise ConfigError(f"set {', '.join(STOPS[:-1])} or {STOPS[-1]} so that the run can end")


_NAME_MAX, _PATH_MAX = 255, 4096  # Linux's limits on a file name and a path (ENAMETOOLONG past them)


def check_path(name: str, value: str) -> None:
    """A path the run writes under: not empty (which would be the current folder) and within the limits of
    the file system's names, so that it fails here with one line rather than at the first write."""
    if not value.strip():
        raise ConfigError(f"{name}: an empty path would write into the current folder; name a directory "
                          "(e.g. runs/my-run)")
    parts = Path(value).parts
    if len(value.encode()) > _PATH_MAX or any(len(p.encode()) > _NAME_MAX for p in parts):
        raise ConfigError(f"{name}: the path is too long (names of at most {_NAME_MAX} bytes, "
                          f"{_PATH_MAX} in all); choose a shorter one")


def _coerce(name: str, value: Any) -> Any:
    """Check a YAML/CLI value against the field's type; convert ints to floats where due."""
    if value is None:
        return None
    kind = field_kind(name)
    if kind == "float" and isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    accepted, what = _ACCEPTS[kind]
    if not isinstance(value, accepted) or (kind in ("int", "float") and isinstance(value, bool)):
        raise ConfigError(f"{name}: {value!r} must be {what}")
    return value


_ACCEPTS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "bool": (bool, "true or false"), "int": (int, "an integer"), "float": ((int, float), "a number"),
    "str": (str, "a string"), "list": (list, "a list"), "dict": (dict, "a mapping"),
}


def dump(cfg: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (readable back with ``--config``)."""
    from minionsrl import files

    # a learner killed while writing it leaves the previous one; a link planted in the run dir is not followed
    files.write_text(Path(path), yaml.safe_dump(cfg.to_dict(), sort_keys=False))
