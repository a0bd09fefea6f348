"""The composition root: a config in, the run's parts out. Every factory lives here, so the parts they
build (scalers, backends, learners, the loop) never import one another to dispatch.

``prepare_config`` checks and resolves a config before any work starts; ``make_trainer`` assembles
the round loop from a backend, a scaler, a sampler and a learner.
"""

from __future__ import annotations

import glob
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING

from minionsrl import config
from minionsrl.config import LearnerConfig, TrainConfig
from minionsrl.cost import CostLedger, actor_host, load_prices
from minionsrl.errors import ConfigError
from minionsrl.forecast import FunctionStats, model_round
from minionsrl.function.envs import EnvInfo, EnvSpec, check_env_id, env_info
from minionsrl.function.extras import install_hint
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.scaling.registry import SCALERS, Needs, first_actors

if TYPE_CHECKING:
    from minionsrl.backends.base import Backend
    from minionsrl.learner.learners import Learner
    from minionsrl.loop.trainer import Trainer
    from minionsrl.scaling.base import Scaler
    from minionsrl.scaling.round_model import RoundForecast


def prepare_config(cfg: TrainConfig) -> tuple[TrainConfig, EnvInfo]:
    """Check the env id, inspect its spaces and resolve the presets: all before any work starts."""
    cfg = config.auto_actors(cfg)  # --actors auto is the auto scaler: every check below reads the scaler
    config.validate(cfg, require_stop=False)  # the preset may still supply total_timesteps
    learner_device(cfg.learner)  # cuda where there is none fails here; the config keeps what was asked for
    _check_detectors(cfg, cfg.scaling.scaler, SCALERS[cfg.scaling.scaler].needs)
    prices = load_prices(cfg.cost.prices)  # a bad catalogue fails here, before any work
    if cfg.cost.budget_usd is not None:
        first = first_actors(cfg.scaling)
        least = make_ledger(cfg, prices).least_round_usd(first)
        if cfg.cost.budget_usd < least:
            raise ConfigError(f"budget_usd: ${cfg.cost.budget_usd:g} is less than the least a first round of {first} "
                              f"function{'s' if first > 1 else ''} and the learner host can cost (${least:.3g}); "
                              "raise budget_usd")
    check_env_id(cfg.env.env_id)
    if cfg.functions.backend == "lithops":
        from minionsrl.backends.lithops_backend import lithops_config

        lithops_config(cfg.functions.lithops_config)  # a missing or broken Lithops config fails here
    try:
        info = env_info(EnvSpec(cfg.env.env_id, cfg.env.env_kwargs), cfg.env.env_check_timeout_s)
    except ConfigError:
        raise
    except Exception as exc:  # bad kwargs, a missing optional dependency, a broken custom env
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"env_id {cfg.env.env_id!r} with env_kwargs {cfg.env.env_kwargs!r} cannot be built "
                          f"({first}); check env_kwargs against the environment's constructor") from exc
    cfg = config.resolve(cfg, info.family)
    if cfg.learner.normalize_obs and len(info.obs_shape) == 3:
        raise ConfigError(f"normalize_obs: {cfg.env.env_id!r} has image observations (scaled by 1/255 in the "
                          "network); use --no-normalize-obs")
    return cfg, info


def _local(cfg: TrainConfig, key: bytes) -> Backend:
    from minionsrl.backends.local import LocalBackend

    fn = cfg.functions
    return LocalBackend(key, max_concurrency=fn.max_concurrency, idle_timeout_s=fn.idle_timeout_s,
                        invocation_timeout_s=fn.invocation_timeout_s, memory_mb=cfg.cost.function_memory_mb)


def _server(cfg: TrainConfig, key: bytes) -> Backend:
    from minionsrl.backends.server import ServerBackend

    fn = cfg.functions
    vcpus, startup_s = actor_host(load_prices(cfg.cost.prices))  # the servers the ledger bills
    return ServerBackend(key, vcpus_per_host=vcpus, startup_s=startup_s, max_concurrency=fn.max_concurrency,
                         wait_for_startup=fn.server_wait_startup, invocation_timeout_s=fn.invocation_timeout_s)


def _ray(cfg: TrainConfig, key: bytes) -> Backend:
    from minionsrl.backends.ray_backend import RayBackend  # Ray's SDK loads only for a Ray run

    fn = cfg.functions
    return RayBackend(key, address=fn.ray_address, num_cpus=fn.ray_num_cpus, max_concurrency=fn.max_concurrency,
                      invocation_timeout_s=fn.invocation_timeout_s)


def _lithops(cfg: TrainConfig, key: bytes) -> Backend:
    from minionsrl.backends.lithops_backend import LithopsBackend, lithops_config  # Lithops loads only when used

    fn = cfg.functions
    return LithopsBackend(key, lithops_config(fn.lithops_config), memory_mb=int(cfg.cost.function_memory_mb),
                          invocation_timeout_s=fn.invocation_timeout_s, max_concurrency=fn.max_concurrency)


# every backend by name (config.BACKENDS, the --backend choices): how a config starts it, with the run's key
BACKENDS: dict[str, Callable[[TrainConfig, bytes], Backend]] = {
    "local": _local, "server": _server, "ray": _ray, "lithops": _lithops}


def make_backend(cfg: TrainConfig, key: bytes) -> Backend:
    """Build the backend named by ``cfg.functions.backend`` (the memory a function is billed for bounds its
    instances)."""
    return BACKENDS[cfg.functions.backend](cfg, key)


def _check_detectors(cfg: TrainConfig, scaler: str, needs: frozenset[str]) -> None:
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


def make_ledger(cfg: TrainConfig, prices: dict | None = None) -> CostLedger:
    """The cost ledger of a run: its function platform, and a learner host of the kind the learner runs on."""
    cost = cfg.cost
    return CostLedger(load_prices(cost.prices) if prices is None else prices, cost.platform, cost.function_memory_mb,
                      cost.cold_start_s, learner_device=learner_device(cfg.learner),
                      backend=cfg.functions.backend)


def make_learner(cfg: TrainConfig, arch: PolicyArch) -> Learner:
    """The learner ``cfg.learner.algo`` names (:data:`~minionsrl.learner.learners.LEARNERS`), built from the
    resolved learner config, on the device it asks for."""
    from minionsrl.learner import learners, runtime

    lc = cfg.learner
    # what the budgets and the learning-rate rule are relative to (under a batch size: that batch)
    reference_batch = cfg.env.step_plan().round_batch(lc.reference_actors or cfg.scaling.actors)
    device = learner_device(lc)
    runtime.configure(lc.learner_threads, gpu=device == "cuda")  # after learner_device's own call: changes nothing
    return learners.LEARNERS[lc.algo](arch, lc, device, cfg.run.seed, reference_batch)


def _expect_durations(backend: Backend, cfg: TrainConfig, info: EnvInfo) -> None:
    """Tell the backend's deadlines how long a first training invocation should take, from the learner's check of
    the env (its build, and its random steps with the functions' added latency), before one has run."""
    deadlines = getattr(backend, "deadlines", None)
    if deadlines is not None:
        steps = max(cfg.env.step_plan().steps(first_actors(cfg.scaling))) * cfg.env.envs_per_function
        deadlines.expect("train", info.build_s + steps * (info.step_s + cfg.env.env_step_latency_ms / 1000))


def make_trainer(cfg: TrainConfig, resume: bool = False, backend: Backend | None = None,
                 scaler: Scaler | None = None) -> Trainer:
    """Check ``cfg`` and assemble its run: session, learner, scaler, ledger, backend, sampler, loop.
    ``backend`` and ``scaler`` replace the ones ``cfg`` names (tests, the scheduler's training)."""
    from minionsrl.backends.duplicating import DuplicatingBackend
    from minionsrl.function import wire
    from minionsrl.loop.session import Session

    cfg, info = prepare_config(cfg)
    session = Session(cfg, resume, create=False)  # a run dir that cannot be used fails here, before any work
    if backend is None:  # started first, so that its instances boot while the learner's framework loads
        made = None
        try:
            backend = made = make_backend(cfg, wire.new_key())
            _expect_durations(backend, cfg, info)
            backend.prewarm(first_actors(cfg.scaling))
        except BaseException:
            if made is not None:
                made.close()
            session.close()  # its lock
            raise
    if cfg.faults.fault_duplicate > 0:  # the platform's own fault: a wrapper delivers those replies twice
        backend = DuplicatingBackend(backend)
    try:
        session.create()  # only once the backend is up: one that cannot start leaves no half-made run dir
        from minionsrl.function.faults import FaultPlan
        from minionsrl.loop.requests import Publisher, Requests
        from minionsrl.loop.retry import RetryPolicy
        from minionsrl.loop.sampler import AsyncSampler, PipelinedSampler, SyncSampler
        from minionsrl.loop.trainer import Trainer

        arch = PolicyArch.of(info, cfg.learner.hidden_sizes)
        learner = make_learner(cfg, arch)
        scaler = scaler or make_scaler(cfg, info.family)
        _check_detectors(cfg, scaler.name, scaler.needs)  # e.g. a learned scheduler that reads the noise scale
        ledger = make_ledger(cfg)
        publisher = Publisher(backend, backend.key, learner.snapshot)
        faults = cfg.faults
        requests = Requests(function_env_spec(cfg), cfg.run.seed, cfg.learner.gamma,
                            FaultPlan(faults.rates, faults.fault_seed), arch, cfg.eval.eval_max_steps)
        parts = (backend, requests, publisher, arch, cfg.env.step_plan(), cfg.env.carry_episodes,
                 RetryPolicy(faults.max_retries, faults.round_deadline_s, faults.min_reply_fraction))
        # the learner says whether its fragments must all come from the current policy (a round barrier)
        sampler = (AsyncSampler(*parts, k=cfg.learner.async_fragments) if not learner.synchronous else
                   PipelinedSampler(*parts) if cfg.learner.pipeline else SyncSampler(*parts))
        return Trainer(cfg, session, learner, sampler, publisher, scaler, ledger, backend)
    except BaseException:
        backend.close()
        session.close()
        raise


def function_env_spec(cfg: TrainConfig) -> EnvSpec:
    """The environment the rollout functions build: the config's, with its step latency (training and in-run
    evaluation both run on the functions, so both wait; DESIGN §1)."""
    return EnvSpec(cfg.env.env_id, cfg.env.env_kwargs, step_latency_ms=cfg.env.env_step_latency_ms)


def make_scaler(cfg: TrainConfig, family: str = "classic") -> Scaler:
    """Build the scaler named by ``cfg.scaling.scaler`` (``family``: the env's, which picks the shipped scheduler)."""
    return SCALERS[cfg.scaling.scaler].build(cfg, Needs(family, lambda: round_forecast(cfg)))


def round_forecast(cfg: TrainConfig) -> RoundForecast:
    """The round model priced on this run's platform (its own ledger's rule, on a ledger of its own): a round of
    ``n`` functions, the learner's seconds and a function's stats in, its projected seconds and serverless dollars
    out. What the ``auto`` scaler weighs, without knowing the backend."""
    ledger, plan = make_ledger(cfg), cfg.env.step_plan()

    def forecast(n: int, learner_s: float, stats: FunctionStats) -> tuple[float, float]:
        modelled = model_round(ledger, learner_s, stats, n, plan.round_batch(n) / n)
        return modelled.round_s, modelled.serverless_usd

    return forecast

