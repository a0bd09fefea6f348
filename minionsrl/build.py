"""The composition root: a config in, the run's parts out. Every factory lives here, so the parts they
build (scalers, backends, learners, the loop) never import one another to dispatch.

It only constructs: :func:`~minionsrl.prepare.prepare_config` (the one validation stage) checks and resolves a config
before any work starts; ``make_trainer`` then assembles the round loop from a backend, a scaler, a sampler and a
learner.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from minionsrl import files
from minionsrl.config import TrainConfig
from minionsrl.cost import load_prices
from minionsrl.forecast import env_check_stats, model_round
from minionsrl.function.envs import EnvInfo, EnvSpec
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.prepare import check_detectors, learner_device, make_ledger, prepare_config
from minionsrl.scaling.registry import SCALERS, Needs, started_actors
from minionsrl.stats import FunctionStats

if TYPE_CHECKING:
    from minionsrl.backends.base import Backend
    from minionsrl.learner.learners import Learner
    from minionsrl.loop.trainer import Trainer
    from minionsrl.scaling.base import Scaler
    from minionsrl.scaling.round_model import RoundForecast


def _local(cfg: TrainConfig, key: bytes) -> Backend:
    from minionsrl.backends.local import LocalBackend

    fn = cfg.functions
    return LocalBackend(key, max_concurrency=fn.max_concurrency, idle_timeout_s=fn.idle_timeout_s,
                        invocation_timeout_s=fn.invocation_timeout_s, memory_mb=cfg.cost.function_memory_mb)


def _server(cfg: TrainConfig, key: bytes) -> Backend:
    from minionsrl.backends.server import ServerBackend

    fn = cfg.functions
    prices = load_prices(cfg.cost.prices)  # the servers the ledger bills
    return ServerBackend(key, vcpus_per_host=prices.actor_host.vcpus, startup_s=prices.startup_s,
                         max_concurrency=fn.max_concurrency, wait_for_startup=fn.server_wait_startup,
                         invocation_timeout_s=fn.invocation_timeout_s)


def _ray(cfg: TrainConfig, key: bytes) -> Backend:
    from minionsrl.backends.ray_backend import RayBackend  # Ray's SDK loads only for a Ray run

    fn = cfg.functions
    return RayBackend(key, address=fn.ray_address, num_cpus=fn.ray_num_cpus, max_concurrency=fn.max_concurrency,
                      invocation_timeout_s=fn.invocation_timeout_s, resume_flag=files.run_dir_flag(cfg.run.run_dir))


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


def _expect_durations(backend: Backend, cfg: TrainConfig, info: EnvInfo, first: int) -> None:
    """Tell the backend's deadlines how long a first training invocation of a round of ``first`` should take, from
    the learner's check of the env (its build, and its random steps with the functions' added latency), before one
    has run."""
    deadlines = getattr(backend, "deadlines", None)
    if deadlines is not None:
        steps = max(cfg.env.step_plan().steps(first)) * cfg.env.envs_per_function
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
    arch = PolicyArch.of(info, cfg.learner.hidden_sizes)
    needs = scaler_needs(cfg, info, arch)
    if backend is None:  # started first, so that its instances boot while the learner's framework loads
        made = None
        try:
            backend = made = make_backend(cfg, wire.new_key())
            first = started_actors(cfg, needs)
            _expect_durations(backend, cfg, info, first)
            backend.prewarm(first)
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
        from minionsrl.loop.retry import RetryPolicy
        from minionsrl.loop.sampler import AsyncSampler, PipelinedSampler, Publisher, Requests, SyncSampler
        from minionsrl.loop.trainer import Trainer

        learner = make_learner(cfg, arch)
        scaler = scaler or make_scaler(cfg, needs=needs)
        check_detectors(cfg, scaler.name, scaler.needs)  # e.g. a learned scheduler that reads the noise scale
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


def scaler_needs(cfg: TrainConfig, info: EnvInfo, arch: PolicyArch) -> Needs:
    """What the scaler of a run on the env ``info`` describes may read: its family, the round model priced on the
    run's platform, and a function's stats as the env check timed a step (with the functions' added latency and
    the reply's bytes a step; none where the check timed no step)."""
    from minionsrl.loop.sampler import row_bytes

    stepped = env_check_stats(info.step_own_s, info.step_cpu_s, cfg.env.env_step_latency_ms / 1000, row_bytes(arch))
    # made once: the first count to prewarm and the scaler built after it read the same model
    return Needs(info.family, functools.cache(lambda: round_forecast(cfg)), stepped if info.step_own_s else None)


def make_scaler(cfg: TrainConfig, family: str = "classic", needs: Needs | None = None) -> Scaler:
    """Build the scaler named by ``cfg.scaling.scaler`` (``family``: the env's, which picks the shipped scheduler;
    ``needs``: all it may read, the env check's step too, in place of the family and the round model alone)."""
    return SCALERS[cfg.scaling.scaler].build(cfg, needs or Needs(family, lambda: round_forecast(cfg)))


def round_forecast(cfg: TrainConfig) -> RoundForecast:
    """The round model priced on this run's platform (its own ledger's rule, on a ledger of its own): a round of
    ``n`` functions, the learner's seconds and a function's stats in, its projected seconds and serverless dollars
    out. What the ``auto`` scaler weighs, without knowing the backend."""
    ledger, plan = make_ledger(cfg), cfg.env.step_plan()

    def forecast(n: int, learner_s: float, stats: FunctionStats) -> tuple[float, float]:
        modelled = model_round(ledger, learner_s, stats, n, plan.round_batch(n) / n)
        return modelled.round_s, modelled.serverless_usd

    return forecast

