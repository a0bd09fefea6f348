"""The one validation stage: a config in, checked before any work starts, resolved and out, with the env's facts.

Its order: the user's own values against their rules (:func:`~minionsrl.config.validate`: each field, each role,
the rules between roles), then what needs the machine or the env to answer — the learner's device, the detectors the
scaler reads, the price catalogue and the budget's least first round, the env id, the Lithops config, the env's
spaces (built once, stepped a little) — then the presets (:func:`~minionsrl.config.resolve`, which checks the
whole again) and the rules that need the env's facts. Each failure is one line (:class:`~minionsrl.errors.ConfigError`)
naming the setting and the fix. :mod:`minionsrl.build` then only constructs.
"""

from __future__ import annotations

import glob
import importlib.util
import itertools
import math
import warnings

from minionsrl import config
from minionsrl.backends.local import available_memory_bytes
from minionsrl.config import LearnerConfig, TrainConfig
from minionsrl.cost import CostLedger, Prices, load_prices
from minionsrl.deployments import deployment_of
from minionsrl.errors import ConfigError, EpisodesNotCarried
from minionsrl.function.envs import EnvInfo, EnvSpec, check_env_id, env_info, is_entry_point
from minionsrl.function.extras import install_hint
from minionsrl.scaling.registry import SCALERS, first_actors


def prepare_config(cfg: TrainConfig) -> tuple[TrainConfig, EnvInfo]:
    """Check the config, the env id and the env's spaces, and resolve the presets: all before any work starts."""
    cfg = config.auto_actors(cfg)  # --actors auto is the auto scaler: every check below reads the scaler
    config.validate(cfg, require_stop=False)  # the preset may still supply total_timesteps
    learner_device(cfg.learner)  # cuda where there is none fails here; the config keeps what was asked for
    check_detectors(cfg, cfg.scaling.scaler, SCALERS[cfg.scaling.scaler].needs)
    prices = load_prices(cfg.cost.prices)  # a bad catalogue fails here, before any work
    check_env_id(cfg.env.env_id)
    if cfg.functions.backend == "lithops":
        from minionsrl.backends.lithops_backend import lithops_config

        lithops_config(cfg.functions.lithops_config)  # a missing or broken Lithops config fails here
    info = env_info(EnvSpec(cfg.env.env_id, cfg.env.env_kwargs), cfg.env.env_check_timeout_s)
    cfg = config.resolve(cfg, info.family)
    if cfg.cost.budget_usd is not None:  # on the resolved counts (auto's first: the fewest it can start at, a floor)
        first = first_actors(cfg.scaling)
        least = make_ledger(cfg, prices).least_round_usd(first)
        if cfg.cost.budget_usd < least:
            raise ConfigError(f"budget_usd: ${cfg.cost.budget_usd:g} is less than the least a first round of {first} "
                              f"function{'s' if first > 1 else ''} and the learner host can cost (${least:.3g}); "
                              "raise budget_usd")
    check_network_fits(cfg, info)
    cfg = _episodes_not_carried(cfg, info)
    if cfg.learner.normalize_obs and len(info.obs_shape) == 3:
        raise ConfigError(f"normalize_obs: {cfg.env.env_id!r} has image observations (scaled by 1/255 in the "
                          "network); use --no-normalize-obs")
    return cfg, info


LEARNER_BYTES_PER_PARAMETER = 20  # float32 weights, their gradients, Adam's two moments and the published copy


def check_network_fits(cfg: TrainConfig, info: EnvInfo) -> None:
    """One line, before any work, for an MLP too big to train here: weights a function's memory cannot hold (every
    function loads them), or a learner this machine's available memory cannot hold (each layer's width is checked
    alone; their product is what fills memory)."""
    if len(info.obs_shape) == 3 and info.discrete:  # the Nature CNN: hidden_sizes do not apply
        return
    sizes = [int(math.prod(info.obs_shape)), *cfg.learner.hidden_sizes]
    count = sum(a * b + b for out in (info.action_dim, 1) for a, b in itertools.pairwise([*sizes, out]))
    weights_mb, memory_mb = 4 * count / 2**20, cfg.cost.function_memory_mb
    what = f"hidden_sizes: {cfg.learner.hidden_sizes!r} make a policy of {count:,} parameters"
    if weights_mb > memory_mb / 2:
        raise ConfigError(f"{what} ({weights_mb:,.0f} MB of float32 weights), more than half a function's "
                          f"{memory_mb:g} MB (--function-memory-mb), which must hold them and its env; use smaller "
                          "layers")
    available = available_memory_bytes()
    if available is not None and count * LEARNER_BYTES_PER_PARAMETER > available:
        raise ConfigError(f"{what}: the learner would need about {count * LEARNER_BYTES_PER_PARAMETER / 2**30:,.1f} "
                          f"GB, and this machine has {available / 2**30:,.1f} GB available; use smaller layers")


def _episodes_not_carried(cfg: TrainConfig, info: EnvInfo) -> TrainConfig:
    """Say once, before any work, where an env's episodes cannot be carried and its fragments are shorter than its
    time limit, so that every longer episode is cut unfinished; ``--actors auto`` is held to the counts whose
    fragments hold one (its ``n_max`` lowered). An env without a known time limit ends its episodes itself: nothing
    to say of fragments that may or may not cut them."""
    limit = info.episode_steps
    if info.carries or not cfg.env.carry_episodes or limit is None:
        return cfg
    env_id, plan = cfg.env.env_id, cfg.env.step_plan()
    most = plan.most_actors_within(limit)
    if cfg.scaling.scaler == "auto" and most is not None and most >= cfg.scaling.n_min:
        if most >= cfg.scaling.n_max:
            return cfg
        cfg = cfg.replace(n_max=most)
        cut = f"--actors auto stays at n <= {most}: with more functions every fragment would be shorter than that"
    else:
        first = first_actors(cfg.scaling)
        if most is None or first <= most:
            return cfg
        fix = f"at most {most} actors" if most else f"--fragment-length {limit} or more"
        cut = (f"fragments of {min(plan.steps(first))} steps cut every one unfinished, so no training episode longer "
               f"than that ends; use {fix} to let them end")
    how = ("; give the env get_episode_state() and set_episode_state(state) to carry them (README, 'Your own env')"
           if is_entry_point(env_id) else "")
    warnings.warn(f"env_id {env_id!r}: its episodes cannot be carried across rounds (minionsrl cannot read its "
                  f"state) and run up to {limit} steps: {cut}{how}", EpisodesNotCarried, stacklevel=3)
    return cfg


def check_detectors(cfg: TrainConfig, scaler: str, needs: frozenset[str]) -> None:
    """One clear line, before any work, when the detectors are off but the scaler reads them every round."""
    if cfg.scaling.detectors == "off" and needs:
        raise ConfigError(f"detectors: the {scaler} scaler reads the {' and '.join(sorted(needs))} detector(s) "
                          "every round; use --detectors auto (or on)")


def learner_device(lc: LearnerConfig) -> str:
    """``auto``: a CUDA device when JAX sees one, else the CPU; ``cuda`` where there is none is bad input.
    Without NVIDIA device files or a CUDA plugin for JAX, the answer needs no JAX (a second saved). Where JAX is
    asked, the learner's runtime is set up first (:func:`~minionsrl.learner.runtime.configure`): its flags reach
    XLA only before JAX's first client is made, and asking for a GPU makes them all."""
    if lc.device == "cpu":
        return "cpu"
    if glob.glob("/dev/nvidia[0-9]*") and any(importlib.util.find_spec(f"jax_cuda{v}_plugin") for v in (12, 13)):
        from minionsrl.learner import runtime

        runtime.configure(lc.learner_threads, gpu=True)
        import jax

        try:
            jax.devices("gpu")
            return "cuda"
        except RuntimeError:  # no device the plugin can use
            pass
    if lc.device == "cuda":
        raise ConfigError("device: 'cuda' was asked for but JAX sees no CUDA device on this machine (a GPU learner "
                          f"needs an NVIDIA driver and the `cuda` extra: {install_hint('cuda')}); use --device "
                          "cpu (or auto)")
    return "cpu"


def make_ledger(cfg: TrainConfig, prices: Prices | None = None) -> CostLedger:
    """The cost ledger of a run: its function platform and memory, the deployment it prices (``--deployment``, else
    its backend's own), and a learner host of the kind its learner runs on (``prices``: the catalogue, if already
    loaded). The budget's check prices with it."""
    cost = cfg.cost
    return CostLedger(load_prices(cost.prices) if prices is None else prices, cost.platform, cost.function_memory_mb,
                      cost.cold_start_s, learner_device=learner_device(cfg.learner),
                      deployment=deployment_of(cost.deployment, cfg.functions.backend))
