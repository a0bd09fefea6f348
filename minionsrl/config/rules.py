"""Every rule between a run's fields, named and listed in one place (as RLlib's ``AlgorithmConfig.validate``).

A field's own rules (its type, range, choices) are declared with the field (:func:`~minionsrl.config.fields.setting`)
and checked first; :data:`RULES` holds the rest, in the order they are checked: those within one role, role by
role, then those between roles. Each is a :class:`Rule` whose ``check`` raises a one-line
:class:`~minionsrl.errors.ConfigError` naming the field and the fix. :func:`~minionsrl.config.validate` runs them,
before any work starts; what needs the environment itself (its spaces, its episodes) is checked once it is made
(:mod:`minionsrl.prepare`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from minionsrl.config.fields import check_path
from minionsrl.deployments import BACKENDS
from minionsrl.errors import ConfigError
from minionsrl.function.extras import require_extra
from minionsrl.redact import check_config_secrets

# a TrainConfig (config/train.py), named loosely: that module runs these rules, so this one cannot import it
TrainConfig = Any

STOPS = ("total_timesteps", "max_rounds", "target_return", "budget_usd", "time_budget_s")
_MAX_HIDDEN = 16384


@dataclass(frozen=True)
class Rule:
    """A rule a config must keep: its name (what holds when it is kept), the role whose fields it ties (``None``:
    fields of several), and ``check``, which raises the one-line :class:`ConfigError` where ``cfg`` breaks it."""

    name: str
    role: str | None
    check: Callable[[TrainConfig], None]
    after_presets: bool = False  # checked only once the presets have filled the config (they may keep it)


RULES: list[Rule] = []


def rule(name: str, role: str | None = None, after_presets: bool = False
         ) -> Callable[[Callable[[TrainConfig], None]], Callable[[TrainConfig], None]]:
    """Add the decorated check to :data:`RULES` as ``name``."""
    def add(check: Callable[[TrainConfig], None]) -> Callable[[TrainConfig], None]:
        RULES.append(Rule(name, role, check, after_presets))
        return check
    return add


# -- within a role ----------------------------------------------------------------------------------------------------

@rule("env_kwargs hold JSON values only", "env")
def _env_kwargs_json(cfg: TrainConfig) -> None:
    try:
        json.dumps(cfg.env.env_kwargs, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env_kwargs: {cfg.env.env_kwargs!r} must hold only JSON values (numbers, strings, lists, "
                          "mappings): they travel to every function") from exc


@rule("a round's size is a batch or a fragment length, not both", "env")
def _batch_or_fragment(cfg: TrainConfig) -> None:
    if cfg.env.train_batch_size is not None and cfg.env.fragment_length is not None:
        raise ConfigError("train_batch_size: set either train_batch_size or fragment_length, not both")


@rule("run_dir is a name the file system takes", "run")
def _run_dir_path(cfg: TrainConfig) -> None:
    if cfg.run.run_dir is not None:
        check_path("run_dir", cfg.run.run_dir)


@rule("--track names a W&B project", "run")
def _track_project(cfg: TrainConfig) -> None:
    if cfg.run.track and not cfg.run.wandb_project_name:
        raise ConfigError("wandb_project_name: --track needs a W&B project name")


@rule(f"hidden_sizes are integers in 1..{_MAX_HIDDEN}", "learner")
def _hidden_sizes(cfg: TrainConfig) -> None:
    sizes = cfg.learner.hidden_sizes
    if not sizes or any(not isinstance(h, int) or isinstance(h, bool) or not 1 <= h <= _MAX_HIDDEN for h in sizes):
        raise ConfigError(f"hidden_sizes: {sizes!r} must be a non-empty list of integers in 1..{_MAX_HIDDEN}")


@rule("lr_min < lr_max", "learner")
def _lr_bounds(cfg: TrainConfig) -> None:
    learner = cfg.learner
    if learner.lr_min >= learner.lr_max:
        raise ConfigError(f"lr_min: {learner.lr_min:g} is not below lr_max {learner.lr_max:g}; make lr_min < lr_max")


@rule("minibatches by count or by size, not both", "learner")
def _minibatches(cfg: TrainConfig) -> None:
    if cfg.learner.minibatch_size is not None and cfg.learner.num_minibatches is not None:
        raise ConfigError("num_minibatches: set either num_minibatches or minibatch_size, not both")


@rule("--pipeline only with ppo", "learner")
def _pipeline_ppo(cfg: TrainConfig) -> None:
    if cfg.learner.algo != "ppo" and cfg.learner.pipeline:
        raise ConfigError(f"pipeline: {cfg.learner.algo} keeps its functions in flight already (asynchronous); "
                          "pipeline is for ppo's synchronous rounds")


@rule("--lr-schedule agrees with --anneal-lr", "learner")
def _schedule_flags(cfg: TrainConfig) -> None:
    learner = cfg.learner
    if learner.lr_schedule is not None and learner.anneal_lr is not None and \
            learner.anneal_lr != (learner.lr_schedule == "anneal"):
        flag = "--anneal-lr" if learner.anneal_lr else "--no-anneal-lr"
        raise ConfigError(f"lr_schedule: {learner.lr_schedule!r} contradicts {flag}; give one of the two")


@rule("desired_kl only with the adaptive learning rate", "learner")
def _desired_kl(cfg: TrainConfig) -> None:
    if cfg.learner.lr_schedule != "adaptive" and cfg.learner.desired_kl is not None:
        raise ConfigError("desired_kl: only the adaptive learning rate reads it; add --lr-schedule adaptive")


@rule("the adaptive learning rate not with IMPALA", "learner")
def _adaptive_impala(cfg: TrainConfig) -> None:
    # each of IMPALA's steps re-scores the batch first: the KL it could read is always 0
    if cfg.learner.lr_schedule == "adaptive" and cfg.learner.algo == "impala":
        raise ConfigError("lr_schedule: IMPALA takes one step per scored batch, so there is no KL to adapt the "
                          "rate to; use --algo ppo or appo, or --lr-schedule anneal/constant")


@rule("the adaptive learning rate with no batch scaling", "learner")
def _adaptive_scaling(cfg: TrainConfig) -> None:
    if cfg.learner.lr_schedule == "adaptive" and cfg.learner.lr_batch_scaling != "none":
        raise ConfigError("lr_batch_scaling: the adaptive learning rate finds its own step size for the batch; "
                          "use --lr-batch-scaling none with --lr-schedule adaptive")


@rule("kl_target starts from kl_coef > 0", "learner")
def _kl_target(cfg: TrainConfig) -> None:
    if cfg.learner.kl_target is not None and cfg.learner.kl_coef == 0:
        raise ConfigError("kl_target: the adaptive KL penalty needs a starting coefficient; set kl_coef > 0 "
                          "(RLlib's is 0.2)")


@rule("no KL penalty with IMPALA", "learner")
def _impala_kl(cfg: TrainConfig) -> None:
    if cfg.learner.algo == "impala" and cfg.learner.kl_coef:
        raise ConfigError("kl_coef: IMPALA's loss has no KL penalty; use --algo ppo or appo, or kl_coef 0")


@rule("n_min <= n_max", "scaling")
def _actor_bounds(cfg: TrainConfig) -> None:
    n_min, n_max = cfg.scaling.n_min, cfg.scaling.n_max
    if n_max is not None and n_min > n_max:
        raise ConfigError(f"n_min: {n_min} is larger than n_max {n_max}; make n_min <= n_max")


@rule("the backend's extra is installed", "functions")
def _backend_extra(cfg: TrainConfig) -> None:
    extra = BACKENDS[cfg.functions.backend].extra
    if extra is not None:
        require_extra(f"--backend {cfg.functions.backend}", extra)


@rule("the injected fault rates add up to at most 1", "faults")
def _fault_rates(cfg: TrainConfig) -> None:
    total = sum(cfg.faults.rates.values())
    if total > 1.0:
        raise ConfigError(f"fault_*: the fault rates add up to {total:g}; make their sum <= 1")


# -- between roles ----------------------------------------------------------------------------------------------------

@rule("no secret in the config (it is written to config.yaml and sent to functions)")
def _no_secrets(cfg: TrainConfig) -> None:
    check_config_secrets(cfg.to_dict())


@rule("a round's batch splits into whole steps over its functions")
def _batch_splits(cfg: TrainConfig) -> None:
    if cfg.env.constant_batch:
        cfg.env.step_plan().check(cfg.scaling.most_actors)


@rule("injected hangs have a deadline")
def _hang_deadline(cfg: TrainConfig) -> None:
    if cfg.faults.fault_hang > 0 and cfg.functions.invocation_timeout_s is None and cfg.faults.round_deadline_s is None:
        if cfg.learner.algo != "ppo":  # no round barrier for round_deadline_s to bound
            raise ConfigError("fault_hang: injected hangs need invocation_timeout_s with an asynchronous algo")
        raise ConfigError("fault_hang: injected hangs need a deadline; set invocation_timeout_s or round_deadline_s")


@rule("--actors auto with ppo's synchronous round")
def _auto_synchronous(cfg: TrainConfig) -> None:
    if cfg.scaling.scaler == "auto" and (cfg.learner.algo != "ppo" or cfg.learner.pipeline):
        raise ConfigError("scaler: auto models a synchronous round (the update, then the functions); run it with "
                          "--algo ppo and without --pipeline")


@rule("round_deadline_s only with ppo's round barrier")
def _deadline_ppo(cfg: TrainConfig) -> None:
    algo = cfg.learner.algo
    if algo != "ppo" and cfg.faults.round_deadline_s is not None:
        raise ConfigError(f"round_deadline_s: {algo} has no round barrier (it updates once async_fragments "
                          "have arrived); unset it, or bound each function with invocation_timeout_s")


@rule("the run can end", after_presets=True)  # a preset may supply total_timesteps
def _run_ends(cfg: TrainConfig) -> None:
    if all(cfg.get(name) is None for name in STOPS):
        raise ConfigError(f"set {', '.join(STOPS[:-1])} or {STOPS[-1]} so that the run can end")
