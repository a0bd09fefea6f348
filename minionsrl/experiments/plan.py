"""``minionsrl plan``: what ``n`` actors would cost for this env and learner, before the spend (SPEC §4).

**The probe.** Two short runs of the configured job on this machine's ``local`` backend — 2 and 8 actors (one run
under a constant batch; with ``--envs-per-function E``, E times fewer, at least 1 and 2: :func:`probe_actors`),
four rounds each, evaluation cut to a step — measure what the forecast needs from their warm rounds (the first
round starts instances and compiles the learner's programs, reported apart): a function's own-instance seconds per
sample (the env's CPU, its waits, the policy's inference), a warm invocation's init
(policy load), the share of its time it keeps a CPU busy, its reply's bytes per sample, and the learner's
own-instance seconds a round at each run's batch (the median of its warm rounds, as a run's rounds are read). The
learner's time is linear in the batch only within one regime of its update: a batch under one minibatch takes the
same SGD steps at any size (CartPole's 64 and 256 samples: 20 steps each), a larger one steps once more per
minibatch, so a line through the two runs' batches misses the slope at the batches a forecast weighs (CartPole's
2,048: the line's 0.093 s against 0.064 s measured). So the update of the larger run is also replayed on its own
fragments, as they are and tiled to :data:`LEARNER_REACH` times the batch, and the replays' slope carries the
learner's seconds on past the runs (when that update is cheap enough to replay). The learner's seconds are the
line through these points, extended at either end by its end segments.

**The forecast.** For each ``n`` (powers of two up to ``--cap``) and each platform, the cost ledger bills a modelled
round of ``n`` such functions (:func:`minionsrl.forecast.model_round`, the model the ``auto`` scaler also uses, priced
by the rule that bills a real round, not a copy of it):

* ``lambda``: AWS Lambda through Lithops (its invoke-and-collect profile, S3 requests), the serverless bill: what
  ``--backend lithops`` runs, and what a ``--backend local`` run is priced as (the same ``priced_as``);
* ``lambda-direct``: the same functions invoked directly (Lambda ``Invoke``, as the papers ran them): a labelled
  what-if, since no backend of this package makes those calls; never a pick of the verdict's headline;
* ``server``: the server baseline, the learner host and ``ceil(n / vCPUs)`` actor hosts billed over the round;
* ``ray``: a Ray cluster (its profile), billed as servers;
* ``local``: this machine's wall time, its cores shared by the learner and ``n`` functions, run as many at once as
  the local backend would (:class:`~minionsrl.backends.local.Concurrency`); its dollars are the learner host's.

Each row names its deployment (``priced_as``, as ``summary.json`` does), so a run and its forecast can be matched.

**To a target** (``--target-return R``). A probe of four rounds says nothing of how many rounds learning takes, so
the rounds come from what was measured: ``minionsrl/data/targets.yaml`` holds the env steps each seed of
``minionsrl compare --until target`` took to a target, per fixed count, for the jobs measured here (the env, its
step latency, the target and the batch a round). Where the plan's job is one of them, each recorded count's
rounds per seed times the forecast round, plus the first round's compilation and cold start and the evaluations'
invocations, is the forecast time and dollars to the target, with the seeds' range and how many reached it; for
any other job the plan says there is no basis and how to measure one.

Per row: seconds and dollars a round, the run's rounds for its step budget (``total_timesteps``) and their time and
dollars, and the round's split (learner / one function / the platform's overhead). Per platform: the ``n`` that
finishes the step budget soonest, the cheapest, and the knee (the least ``n`` past which doubling buys under 10%
of the run's time). The forecast is of cost, not of learning: more actors a round also means fewer updates for the
same steps, which only a run (``compare``) can weigh.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from minionsrl import files
from minionsrl.backends.base import OK, InvocationRecord
from minionsrl.config import FIELDS, TrainConfig
from minionsrl.config.fields import default_of
from minionsrl.config.presets import preset_flags
from minionsrl.config.roles import SHORTEST_FRAGMENT
from minionsrl.cost import CostLedger, Prices, load_prices
from minionsrl.deployments import DEPLOYMENTS
from minionsrl.errors import ConfigError, EvaluationCut
from minionsrl.experiments.tables import markdown_table
from minionsrl.forecast import (
    KNEE_GAIN,
    FunctionStats,
    busy_share,
    knee,
    model_round,
    own_init_s,
    per_sample_s,
    warm_train,
)
from minionsrl.loop.metrics import read_metrics, read_rows
from minionsrl.stats import RoundStats

PROBE_ACTORS = (2, 8)  # the probe's two runs of one-env functions (one, at the second count, under a constant batch)
PROBE_ROUNDS = 4  # a run's first round is cold (instances, compilation); the others are measured
LEARNER_REACH = 4  # the larger run's update is replayed at this many times its batch ...
LEARNER_REPLAYS = 5  # ... this many times at each size (after one that compiles), their median
REPLAY_MAX_S = 1.0  # ... where the runs' line says such an update takes less than this
DEFAULT_CAP = 256
# platform -> the deployment it prices (deployments.DEPLOYMENTS); ``local`` is this machine's wall time
PLATFORMS = {"lambda": "lithops", "lambda-direct": "direct", "server": "servers", "ray": "ray", "local": "servers"}
THIS_MACHINE = "this machine (wall time)"  # the ``local`` rows' priced_as


@dataclass(frozen=True)
class Probe:
    """What the probe measured on this machine (own-instance seconds: wall less the wait for a CPU here)."""

    sample_s: float  # a function's seconds per sample (env step, its waits, inference): the median
    sample_quantiles: tuple[float, ...]  # the same at the 0th, 5th, … 100th percentiles of the probe's invocations
    init_s: float  # a warm invocation's init (the round's policy load, its env reset)
    busy_share: float  # of a function's own time, the share it keeps a CPU busy
    reply_bytes_per_sample: float
    learner_batches: tuple[int, ...]  # the batches the learner's seconds a round were measured at, increasing
    learner_seconds: tuple[float, ...]  # its seconds a round at each
    compile_s: float  # the learner's first round beyond a warm one (its programs compiled)
    local_cold_start_s: float  # an instance's start on this machine
    probe_s: float  # how long the probe took
    carries: bool = True  # the env's episodes continue across rounds (EnvInfo.carries)
    episode_steps: int | None = None  # its time limit, where it has one

    def learner_s(self, batch: int) -> float:
        """The learner's own seconds for a round of ``batch`` samples: the line through the measured points,
        extended past them by its end segments (at least 0)."""
        return learner_line(self.learner_batches, self.learner_seconds, batch)

    def slowest_sample_s(self, n: int) -> float:
        """Seconds per sample of the slowest of ``n`` functions, which a round waits for: the probe's quantile at
        ``n / (n + 1)`` (the expected rank of the largest of ``n`` draws), its largest past the probe's range."""
        q = np.linspace(0.0, 1.0, len(self.sample_quantiles))
        return float(np.interp(n / (n + 1), q, self.sample_quantiles))

    def function(self, n: int) -> FunctionStats:
        """A function of a round of ``n``, as the round model takes it."""
        return FunctionStats(self.sample_s, self.slowest_sample_s(n), self.init_s, self.busy_share,
                             self.reply_bytes_per_sample)


def learner_line(batches: tuple[int, ...], seconds: tuple[float, ...], batch: float) -> float:
    """Piecewise-linear through ``(batches, seconds)`` (increasing batches), its end segments extended past them;
    one point is a constant. At least 0."""
    if len(batches) == 1:
        return max(seconds[0], 0.0)
    i = min(max(int(np.searchsorted(batches, batch)), 1), len(batches) - 1)
    (b0, s0), (b1, s1) = (batches[i - 1], seconds[i - 1]), (batches[i], seconds[i])
    return max(s0 + (s1 - s0) * (batch - b0) / (b1 - b0), 0.0)


@dataclass
class _ProbeRun:
    """What a probe run left: its rounds, its successful training invocations (those of its warm rounds
    apart: the first round's warm calls ran beside instances starting), and its learner with a round's fragments
    sampled after its last update (to replay an update of that size)."""

    rounds: list[RoundStats]
    records: list[InvocationRecord]
    warm_rounds: list[InvocationRecord]
    learner: Any
    fragments: list[Any]


def _probe_run(cfg: TrainConfig, actors: int, folder: Path) -> _ProbeRun:
    """:data:`PROBE_ROUNDS` rounds of the job at ``actors`` actors on the local backend, then one more round's
    fragments, not learned from (see :class:`_ProbeRun`)."""
    from minionsrl.build import make_trainer

    run_dir = folder / f"probe-{actors}"
    probe = cfg.replace(run_dir=str(run_dir), backend="local", scaler="fixed", actors=actors, max_rounds=PROBE_ROUNDS,
                        target_return=None, budget_usd=None, time_budget_s=None, eval_every=0, eval_episodes=1,
                        eval_max_steps=1, progress=False, tensorboard=False, track=False)
    trainer = make_trainer(probe)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EvaluationCut)  # the probe's last evaluation is one step, cut on purpose
            for _ in range(PROBE_ROUNDS):
                trainer.run_round()
        fragments = trainer.sampler.sample(PROBE_ROUNDS + 1, actors).fragments  # what the replays learn on
    finally:
        trainer.close()
    rounds = [RoundStats.from_row(row) for row in read_metrics(run_dir)]
    records = [(row["round"], InvocationRecord.from_row(row)) for row in read_rows(run_dir / files.INVOCATIONS)]
    train = [(rnd, r) for rnd, r in records if r.kind == "train" and r.status == OK]
    return _ProbeRun(rounds, [r for _, r in train], [r for rnd, r in train if rnd != "1"], trainer.learner, fragments)


def _replayed_s(run: _ProbeRun, copies: int) -> float:
    """The median own-instance seconds of the run's last update replayed on ``copies`` copies of its fragments."""
    from minionsrl.learner import runtime

    fragments = run.fragments * copies
    times = []
    for i in range(LEARNER_REPLAYS + 1):  # the first compiles the batch's programs
        started = runtime.mark()
        run.learner.learn(fragments, np.random.default_rng(i))
        times.append(runtime.own_s(started))
    return float(np.median(times[1:]))


def probe(cfg: TrainConfig, say: Callable[[str], None] = lambda line: None) -> Probe:
    """Measure what the forecast needs with short runs of ``cfg`` on this machine (see the module's docstring);
    ``say`` gets a line as each run starts and when the probe ends, with the seconds so far."""
    t0 = time.perf_counter()
    plan = cfg.env.step_plan()
    counts = probe_actors(cfg.env.envs_per_function)
    counts = counts[-1:] if plan.constant_batch else counts
    learner: dict[int, float] = {}
    per_sample, inits, shares, sizes, colds, compiles = [], [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="minionsrl-plan-") as tmp:
        for i, n in enumerate(counts):
            say(f"plan: probe {i + 1} of {len(counts)}: {PROBE_ROUNDS} rounds of {n} actors "
                f"({PROBE_ROUNDS * plan.round_batch(n):,} env steps) on this machine, "
                f"{time.perf_counter() - t0:.0f} s in")
            run = _probe_run(cfg, n, Path(tmp))
            rounds = run.rounds
            samples = plan.round_batch(n) / n  # per function
            # the median of the warm rounds, as a run's are read: on a busy machine a round's own-instance seconds
            # come out high or low (its threads' waits overlap), and the least of them is the lowest reading
            learner_warm = float(np.median([r.projected_learner_s for r in rounds[1:]]))
            learner[plan.round_batch(n)] = learner_warm
            compiles.append(max(rounds[0].projected_learner_s - learner_warm, 0.0))
            colds += [r.init_s for r in run.records if r.cold]
            for r in warm_train(run.warm_rounds):
                per_sample.append(per_sample_s(r, samples))
                inits.append(own_init_s(r))
                shares.append(busy_share(r))
                sizes.append(r.bytes_out / samples)
        batch = plan.round_batch(counts[-1])
        if not plan.constant_batch and run.fragments and learner_line(
                *_points(learner), LEARNER_REACH * batch) < REPLAY_MAX_S:
            # the replays' slope past the larger run, from its measured level
            slope = (_replayed_s(run, LEARNER_REACH) - _replayed_s(run, 1)) / ((LEARNER_REACH - 1) * batch)
            learner[LEARNER_REACH * batch] = learner[batch] + max(slope, 0.0) * (LEARNER_REACH - 1) * batch
    say(f"plan: probed in {time.perf_counter() - t0:.0f} s; forecasting")
    if not per_sample:
        raise ConfigError("plan: the probe's functions never ran warm; check the env with `minionsrl train`")
    batches, seconds = _points(learner)
    return Probe(sample_s=float(np.mean(per_sample)),
                 sample_quantiles=tuple(float(x) for x in np.quantile(per_sample, np.linspace(0.0, 1.0, 21))),
                 init_s=float(np.median(inits)),
                 busy_share=float(np.median(shares)), reply_bytes_per_sample=float(np.median(sizes)),
                 learner_batches=batches, learner_seconds=seconds, compile_s=float(np.median(compiles)),
                 local_cold_start_s=float(np.median(colds)) if colds else 0.0, probe_s=time.perf_counter() - t0)


def probe_actors(envs_per_function: int) -> tuple[int, int]:
    """The actor counts of the probe's two runs: :data:`PROBE_ACTORS` of one-env functions, and for functions of
    ``envs_per_function`` envs as many fewer (at least 1 and 2), so that the probe learns on the batches of the
    one-env layout's runs (8 functions of 1 env and 1 of 8 are both measured at 8 streams) rather than on batches E
    times larger, which its forecast would then extrapolate down from, at E times the probe's time."""
    small, large = PROBE_ACTORS
    return max(1, small // envs_per_function), max(2, large // envs_per_function)


def _points(learner: dict[int, float]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Measured (batch -> seconds) as increasing batches and their seconds."""
    ordered = sorted(learner.items())
    return tuple(b for b, _ in ordered), tuple(s for _, s in ordered)


@dataclass(frozen=True)
class Row:
    """One ``n`` on one platform."""

    n: int
    platform: str
    priced_as: str  # the deployment, as a run's summary.json names it
    shipped: bool  # a backend of this package runs it (else a what-if)
    cuts_episodes: bool  # its fragments are shorter than the env's episodes, which are not carried: never picked
    short_fragments: bool  # fragments under SHORTEST_FRAGMENT steps, where Hopper learned less a round: not picked
    round_s: float
    usd_per_round: float
    rounds: int
    run_s: float
    run_usd: float
    learner_s: float
    functions_s: float
    overhead_s: float

    @property
    def learns(self) -> bool:
        """Whether its fragments can be learned from: none of its fragments cut every episode, or is too short."""
        return not (self.cuts_episodes or self.short_fragments)

    @property
    def label(self) -> str:
        """Its ``n`` in a table, marked where it does not learn."""
        return f"{self.n} cut" if self.cuts_episodes else f"{self.n} short" if self.short_fragments else str(self.n)


def _local_round(p: Probe, n: int, samples: float, learner_s: float, cpus: int) -> float:
    """This machine's wall time for a round of ``n`` functions: the learner's part, then the functions in waves of
    what the local backend runs at once, no faster than their CPU seconds spread over the cores."""
    from minionsrl.backends.local import at_once

    together = at_once(cpus, p.busy_share)
    one = p.init_s + samples * p.slowest_sample_s(min(n, together))
    return learner_s + max(math.ceil(n / together) * one, n * one * p.busy_share / cpus)


def _ledger(cfg: TrainConfig, prices: Prices, path: str) -> CostLedger:
    """The ledger that bills a modelled round of ``cfg``'s functions on deployment ``path`` (a CPU learner's host)."""
    return CostLedger(prices, cfg.cost.platform, cfg.cost.function_memory_mb, cfg.cost.cold_start_s, "cpu",
                      DEPLOYMENTS[path])


def forecast(cfg: TrainConfig, p: Probe, cap: int = DEFAULT_CAP, prices: Prices | None = None,
             platforms: dict[str, str] = PLATFORMS, counts: list[int] | None = None) -> list[Row]:
    """Rows for ``n`` = 1, 2, 4, … ``cap`` (or ``counts``) on each of ``platforms`` (name -> the deployment it
    prices; see the module's docstring): a deployment on servers bills servers, ``local`` this machine's wall time,
    any other serverless functions."""
    prices = prices if prices is not None else load_prices(cfg.cost.prices)
    plan, total = cfg.env.step_plan(), cfg.run.total_timesteps
    cpus = os.cpu_count() or 1
    ledgers = {platform: _ledger(cfg, prices, path) for platform, path in platforms.items()}
    rows = []
    for n in counts or sorted({min(2**i, cap) for i in range(int(math.log2(cap)) + 1)}):
        if min(plan.steps(n)) < 1:  # a constant batch split thinner than one step a function
            continue
        batch = plan.round_batch(n)
        samples = batch / n
        learner_s = p.learner_s(batch)
        cuts = not p.carries and p.episode_steps is not None and min(plan.steps(n)) < p.episode_steps
        # a count's own split of a constant batch; a fixed fragment length is the user's, the same at every count
        short = plan.constant_batch and min(plan.steps(n)) < SHORTEST_FRAGMENT
        rounds = math.ceil(total / batch) if total else 1
        for platform, ledger in ledgers.items():
            modelled = model_round(ledger, learner_s, p.function(n), n, samples)
            if platform == "local":
                round_s = _local_round(p, n, samples, learner_s, cpus)
                usd = ledger.learner_usd_s * round_s
                one = p.init_s + samples * p.slowest_sample_s(n)
                overhead = round_s - learner_s - one  # one wave: the round is the two parts, but for rounding
                split = (learner_s, one, overhead if overhead > 1e-9 * round_s else 0.0)
                priced_as, shipped = THIS_MACHINE, True
            else:
                round_s = modelled.round_s
                usd = modelled.server_usd if ledger.deployment.servers else modelled.serverless_usd
                split = (modelled.learner_s, modelled.function_s, modelled.overhead_s)
                priced_as, shipped = ledger.priced_as, ledger.deployment.shipped
            rows.append(Row(n, platform, priced_as, shipped, cuts, short, round_s, usd, rounds, rounds * round_s,
                            rounds * usd, *split))
    return rows


@dataclass(frozen=True)
class ToTarget:
    """A count's forecast seconds and dollars to the target on one platform: over the recorded seeds that reached
    it, the mean, least and most of each (see the module's docstring)."""

    n: int
    platform: str
    priced_as: str
    reached: int
    seeds: int
    rounds: tuple[float, float, float]
    seconds: tuple[float, float, float]
    usd: tuple[float, float, float]


def recorded_steps(cfg: TrainConfig, target: float) -> dict[int, list[int | None]] | None:
    """The env steps each recorded seed took to ``target`` per fixed count, for ``cfg``'s job and batch (None: no
    record of that job)."""
    text = resources.files("minionsrl").joinpath("data", "targets.yaml").read_text()
    for job in files.parse_yaml(text, "the shipped targets.yaml")["jobs"]:
        if (job["env_id"], float(job["step_latency_ms"]), float(job["target"]), job["train_batch_size"]) == (
                cfg.env.env_id, cfg.env.env_step_latency_ms, float(target), cfg.env.train_batch_size):
            return {int(n): list(steps) for n, steps in job["steps_to_target"].items()}
    return None


def to_target(cfg: TrainConfig, p: Probe, rows: list[Row], target: float, prices: Prices | None = None,
              platforms: tuple[str, ...] = ("lambda", "server")) -> list[ToTarget]:
    """Each recorded count's forecast seconds and dollars to ``target`` on ``platforms`` (empty: no record of this
    job; see the module's docstring)."""
    steps = recorded_steps(cfg, target)
    if steps is None:
        return []
    prices = prices if prices is not None else load_prices(cfg.cost.prices)
    batch, every = cfg.env.train_batch_size or 1, cfg.eval.eval_every or 0
    out = []
    for platform in platforms:
        ledger = _ledger(cfg, prices, PLATFORMS[platform])
        for n, seeds in sorted(steps.items()):
            row = next((r for r in rows if r.platform == platform and r.n == n), None)
            if row is None:
                continue
            # an evaluation's functions: its episodes (to the time limit) split over up to n of them
            episodes = min(cfg.eval.eval_episodes, n)
            length = (p.episode_steps or cfg.eval.eval_max_steps) * cfg.eval.eval_episodes / episodes
            evaluation = [InvocationRecord("eval", "eval", run_s=length * p.sample_s)] * episodes
            eval_usd = (ledger.serverless_usd(0.0, evaluation, 0.0)[0] if not ledger.deployment.servers else 0.0)
            first = p.compile_s + cfg.cost.cold_start_s  # the first round compiles and starts instances
            got = [(s / batch, s / batch * row.round_s + first,
                    s / batch * row.usd_per_round + (s / batch // every if every else 0) * eval_usd
                    + first * ledger.learner_usd_s) for s in seeds if s is not None]
            if got:
                out.append(ToTarget(n, platform, row.priced_as, len(got), len(seeds),
                                    *[(float(np.mean(v)), min(v), max(v)) for v in zip(*got, strict=True)]))
    return out


@dataclass(frozen=True)
class Picks:
    """A platform's recommended counts."""

    fastest: int
    cheapest: int
    knee: int


def picks(rows: list[Row], platform: str) -> Picks:
    """The ``n`` that finishes soonest, the cheapest, and the knee, on ``platform``, of the counts whose fragments
    learn (:attr:`Row.learns`; of all, where none does)."""
    mine = sorted((r for r in rows if r.platform == platform), key=lambda r: r.n)
    mine = [r for r in mine if r.learns] or mine
    return Picks(min(mine, key=lambda r: (r.run_s, r.n)).n, min(mine, key=lambda r: (r.run_usd, r.n)).n,
                 knee([(r.n, r.run_s) for r in mine]))


def verdict(rows: list[Row], p: Probe) -> str:
    """Plain sentences: what serverless functions (Lambda through Lithops, the shipped path) pay in — time against
    this machine, dollars against servers, both or neither —, where more of them stop paying, what holds a round
    up there, and what the unshipped direct invoke would change (a labelled what-if)."""
    k, here, servers = picks(rows, "lambda"), picks(rows, "local"), picks(rows, "server")
    at = {r.n: r for r in rows if r.platform == "lambda"}
    knee, first, best, cheapest = at[k.knee], at[min(at)], at[k.fastest], at[k.cheapest]
    local, server = _row(rows, "local", here.fastest), _row(rows, "server", servers.cheapest)
    step = f"a sample takes {_duration(p.sample_s)} of a function's time"
    learner = knee.learner_s / knee.round_s if knee.round_s else 0.0
    overhead = knee.overhead_s / knee.round_s if knee.round_s else 0.0
    held = (f"the learner is {learner:.0%} of a Lambda round at n = {k.knee}" if learner >= overhead else
            f"Lambda's invoke-and-collect overhead is {overhead:.0%} of a round at n = {k.knee}")
    time, usd = _side(best.run_s, local.run_s), _side(cheapest.run_usd, server.run_usd)
    even = f"(within {TIE:.0%})"
    pays = {(1, 1): "pays in time and in dollars", (1, -1): "pays in time, not in dollars",
            (-1, 1): "pays in dollars, not in time", (-1, -1): "pays neither in time nor in dollars",
            (0, 1): f"pays in dollars and is about as fast as this machine {even}",
            (0, -1): f"is about as fast as this machine {even} and does not pay in dollars",
            (1, 0): f"pays in time and costs about what servers do {even}",
            (-1, 0): f"does not pay in time and costs about what servers do {even}",
            (0, 0): f"is about as fast as this machine and costs about what servers do {even}"}[time, usd]
    in_time = time == 1
    text = (f"Serverless (Lambda via Lithops) {pays} for this job: {step}. At best Lambda finishes the step "
            f"budget in {_duration(best.run_s)} (n = {k.fastest}), this machine's {os.cpu_count() or 1} cores in "
            f"{_duration(local.run_s)} (n = {here.fastest}); Lambda's cheapest run is ${cheapest.run_usd:.3g} "
            f"(n = {k.cheapest}), servers' ${server.run_usd:.3g} (n = {servers.cheapest}).")
    if in_time:
        text += (f" More functions pay up to n = {k.knee} (the knee: doubling past it saves under {KNEE_GAIN:.0%}): "
                 f"{_duration(first.run_s)} at n = {first.n} becomes {_duration(knee.run_s)}, where {held}.")
    else:
        text += f" {held[0].upper()}{held[1:]}."
    direct = {r.n: r for r in rows if r.platform == "lambda-direct"}
    if k.knee in direct:
        what_if = direct[k.knee]
        text += (f" What-if: invoked directly, as the papers ran it (no backend here ships that path), n = {k.knee} "
                 f"would take {_duration(what_if.run_s)} and ${what_if.run_usd:.3g}.")
    return text


TIE = 0.10  # figures this close are called even: two probes of one job moved plan's times by 5% here


def _side(ours: float, theirs: float) -> int:
    """1 where ``ours`` is under ``theirs`` by more than :data:`TIE`, -1 where over it by more, 0 within."""
    return 1 if ours < (1 - TIE) * theirs else -1 if ours > (1 + TIE) * theirs else 0


def _row(rows: list[Row], platform: str, n: int) -> Row:
    return next(r for r in rows if r.platform == platform and r.n == n)


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


COMPARED = (8, 64)  # the counts the suggested comparison runs, where the plan has rows for them
# what makes the job and its price, beside the learning settings: the suggested comparison repeats those that differ
# from their defaults (a fragment length whenever the batch is not constant: the preset's may be)
JOB_FIELDS = ("env_id", "env_kwargs", "train_batch_size", "fragment_length", "env_step_latency_ms", "envs_per_function",
              "carry_episodes", "platform", "function_memory_mb", "deployment", "prices")


def compare_command(cfg: TrainConfig, target: float, forecast_rows: list[Row]) -> str:
    """The ``minionsrl compare`` that measures this job's rounds to ``target`` at :data:`COMPARED` (or the least and
    most counts the plan has rows for), runnable as printed (a POSIX shell's quoting): this job's env, batch,
    layout and pricing (:data:`JOB_FIELDS`; learning flags given to plan are not repeated), each run capped at the
    projected seconds the step budget takes on Lambda at the slower of the two (rounded up to 10 s), so that a run
    that never gets there stops where the budget would."""
    values = {name: cfg.get(name) for name in JOB_FIELDS}
    shown = {name: value for name, value in values.items() if value is not None and (
        name in ("env_id", "fragment_length") or value != default_of(FIELDS[name]))}
    if cfg.env.train_batch_size:
        shown.pop("fragment_length", None)
    lam = {r.n: r.run_s for r in forecast_rows if r.platform == "lambda"}
    counts = [n for n in COMPARED if n in lam] or sorted({min(lam), max(lam)})
    cap = 10 * math.ceil(max(lam[n] for n in counts) / 10)
    return (f"minionsrl compare {preset_flags(shown)} --until target --target {target:.10g} --time-budget-s {cap} "
            f"--scalers {','.join(f'fixed:{n}' for n in counts)} --seeds 5")


def target_text(cfg: TrainConfig, target: float, rows: list[ToTarget], forecast_rows: list[Row]) -> list[str]:
    """The forecast to the target as Markdown lines: each recorded count's time and dollars, or why there is none
    and the comparison that would measure it (``forecast_rows``: the plan's rows, which cap its runs)."""
    if not rows:
        return [f"To return {target:g}: no recorded basis for this job (the env, its step latency, a batch of "
                f"{cfg.env.train_batch_size or 'fragment_length x n'} a round); only runs can say how many rounds "
                f"learning takes: `{compare_command(cfg, target, forecast_rows)}`.",
                ""]

    def span(v: tuple[float, float, float], fmt: Any) -> str:
        return f"{fmt(v[0])} ({fmt(v[1])}–{fmt(v[2])})"

    table = [[r.n, r.priced_as, f"{r.reached}/{r.seeds}", span(r.rounds, lambda x: f"{x:.0f}"),
              span(r.seconds, _duration), span(r.usd, lambda x: f"${x:.3g}")] for r in rows]
    return [f"To return {target:g}, from the rounds each recorded seed took at this batch (`minionsrl/data/"
            "targets.yaml`: `minionsrl compare --until target`, 5 seeds a count) times this probe's round: the mean "
            "over the seeds that reached it (least–most).", "",
            markdown_table(["n", "priced as", "seeds there", "rounds", "time to target", "dollars to target"], table,
                           right=[True, False, True, True, True, True]), ""]


def auto_text(cfg: TrainConfig, rows: list[Row]) -> str:
    """The ``--actors auto`` line: at a constant batch (auto's), the command that starts it at Lambda's knee, so it
    spends no rounds measuring another count (its measuring rounds split the batch otherwise and so change what is
    learned); at a batch that grows with ``n``, the ``plan`` that forecasts at auto's batch."""
    line = ("To have a run pick its count from this model, measured on its own rounds: `minionsrl train --actors "
            "auto` (the knee; `--optimize cost`: the cheapest).")
    if not cfg.env.constant_batch:
        return line + (" It keeps the batch of `--actors` whatever the count: `minionsrl plan --actors auto` "
                       "forecasts at that batch.")
    k = picks(rows, "lambda")
    start = f"--initial-actors {k.knee}" + (f" --n-min {k.knee}" if k.knee < cfg.scaling.n_min else "")
    fixed = f"--actors {k.knee} --train-batch-size {cfg.env.step_plan().round_batch(k.knee)}"
    return line + (f" Started at this batch's knee on Lambda, `--actors auto {start}`, it runs no rounds at another "
                   f"count to measure, so it learns as `{fixed}` does (its measuring rounds split the batch otherwise "
                   "and change what is learned); it still moves if its own rounds price another count better. "
                   "Without it, auto starts at that knee by itself only where the env's step mostly waits.")


def report(cfg: TrainConfig, p: Probe, rows: list[Row], targets: list[str] | None = None) -> str:
    """The forecast as Markdown: the probe, the verdict, the forecast to the target (``targets``: its lines, where
    one was asked for), each platform's picks, and the table."""
    lines = [f"# plan: {cfg.env.env_id}, {cfg.run.total_timesteps:,} steps", "",
             f"Probe ({p.probe_s:.0f} s on this machine): a function's {_duration(p.sample_s)} a sample (mean), "
             f"{_duration(p.init_s)} warm init, CPU busy {p.busy_share:.0%} of its time; the learner "
             + ", ".join(f"{_duration(s)} for {b:,} samples" for b, s in zip(p.learner_batches, p.learner_seconds,
                                                                             strict=True))
             + f" a round (+{_duration(p.compile_s)} compiling, once per batch shape); an instance starts here in "
             f"{_duration(p.local_cold_start_s)}.", "", verdict(rows, p), "", auto_text(cfg, rows), "",
             *(targets or [])]
    never = ("never picked" if any(r.learns for r in rows) else "picked below only because every count is "
             "marked: raise --train-batch-size (or --fragment-length) for fragments that learn")
    cut = sorted({r.n for r in rows if r.cuts_episodes})
    if cut:
        lines += [f"The env's episodes are not carried across rounds, and at n = {', '.join(map(str, cut))} every "
                  f"fragment is shorter than its {p.episode_steps}-step episodes: no training episode would end. "
                  f"Those rows are marked `cut` and {never}.", ""]
    short = sorted({r.n for r in rows if r.short_fragments and not r.cuts_episodes})
    if short:
        lines += [f"At n = {', '.join(map(str, short))} a round's samples leave fragments under {SHORTEST_FRAGMENT} "
                  "steps, under which Hopper and two user envs learned less a round (`--actors auto` weighs no more): "
                  f"those rows are marked `short` and {never}.", ""]
    pick_rows = []
    for platform in PLATFORMS:
        k = picks(rows, platform)
        fastest = _row(rows, platform, k.fastest)
        pick_rows.append([platform, fastest.priced_as, k.fastest, _duration(fastest.run_s), k.cheapest,
                          f"${_row(rows, platform, k.cheapest).run_usd:.3g}", k.knee])
    lines += [markdown_table(["platform", "priced as", "fastest n", "run time", "cheapest n", "run dollars", "knee"],
                             pick_rows, right=[False, False, True, True, True, True, True]), ""]
    table = [[r.label, r.platform, f"{r.round_s:.4g}", f"{r.usd_per_round:.3g}",
              r.rounds, _duration(r.run_s),
              f"{r.run_usd:.3g}", f"{r.learner_s:.3g}", f"{r.functions_s:.3g}", f"{r.overhead_s:.3g}"]
             for r in sorted(rows, key=lambda r: (list(PLATFORMS).index(r.platform), r.n))]
    lines += [markdown_table(["n", "platform", "round (s)", "$ a round", "rounds", "run time", "run $", "learner (s)",
                              "function (s)", "overhead (s)"], table, right=[True, False, *[True] * 8])]
    return "\n".join(lines) + "\n"


def frontier_plot(rows: list[Row], path: Path, title: str) -> Path:
    """The run's time against its dollars, one line per platform, each point an ``n``."""
    import matplotlib.pyplot as plt

    from minionsrl.experiments.plots import _save

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for platform in PLATFORMS:
        mine = sorted((r for r in rows if r.platform == platform), key=lambda r: r.n)
        ax.plot([r.run_usd for r in mine], [r.run_s for r in mine], marker="o", markersize=3, label=platform)
        for r in mine:
            ax.annotate(str(r.n), (r.run_usd, r.run_s), textcoords="offset points", xytext=(3, 3), fontsize=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("dollars for the step budget")
    ax.set_ylabel("seconds for the step budget")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def run_plan(cfg: TrainConfig, cap: int = DEFAULT_CAP, out_dir: str | Path | None = None,
             json_path: str | Path | None = None, say: Callable[[str], None] = lambda line: None
             ) -> tuple[str, list[Row]]:
    """``minionsrl plan``: probe, forecast, and write ``plan.md`` and ``plan.png`` into ``out_dir`` (and the rows as
    JSON to ``json_path``); returns the Markdown and the rows. Bad input is one line before any work; ``say`` gets
    the probe's progress (:func:`probe`)."""
    from minionsrl.prepare import prepare_config

    if cap < 1:
        raise ConfigError(f"--cap: {cap} actors; give a cap of at least 1")
    prices = load_prices(cfg.cost.prices)  # a catalogue missing a field fails here, before the probe
    cfg, info = prepare_config(cfg.replace(max_rounds=None))  # the env checked, the preset's steps resolved
    if not cfg.run.total_timesteps:
        raise ConfigError("plan: the forecast is for a step budget; set --total-timesteps")
    p = replace(probe(cfg, say), carries=info.carries or not cfg.env.carry_episodes, episode_steps=info.episode_steps)
    rows = forecast(cfg, p, cap, prices)
    target = cfg.run.target_return
    goals = [] if target is None else to_target(cfg, p, rows, target, prices)
    text = report(cfg, p, rows, None if target is None else target_text(cfg, target, goals, rows))
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "plan.md").write_text(text)
        frontier_plot(rows, out / "plan.png", f"plan: {cfg.env.env_id}")
    if json_path is not None:
        Path(json_path).write_text(json.dumps({"env_id": cfg.env.env_id, "total_timesteps": cfg.run.total_timesteps,
                                               "probe": asdict(p), "rows": [asdict(r) for r in rows],
                                               "picks": {pl: asdict(picks(rows, pl)) for pl in PLATFORMS},
                                               "verdict": verdict(rows, p),
                                               "to_target": [asdict(g) for g in goals]}, indent=1))
    return text, rows
