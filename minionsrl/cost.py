"""The cost ledger (DESIGN §4): what each invocation and each round cost, serverless and on servers.

Prices and platform profiles are data (``minionsrl/data/prices.yaml``, or ``--prices FILE``). Every host that
waits on a round is billed for the round as the cloud would run it, ``P`` (its projected time, below), not for
this machine's wall time ``R``, in which ``n`` functions queue on a few cores; the bill over ``R`` is kept
beside it. ``P`` does not depend on what else runs on this machine: every time in it is an *own-instance* time,
wall time less the wait for a CPU here (:mod:`minionsrl.function.clock`). Formulas (worked example in
``docs/COST.md``):

* an invocation's own-instance time: init = the modelled cold start if cold, else its measured init less its
  CPU wait; run = its measured run less its CPU wait; one that ended without timings (killed, timed out,
  cancelled) is the time its caller saw. The same times are latency and bill: one cold-start model;
* invocation bill = ceil(1000·(run + init if the platform bills init) / granularity) · granularity / 1000 ·
  memory_GB · price_GB_s + the price of a request;
* a stage (the functions a round waits for) = ceil(slots / parallel_invokes) · invoke_s + the slowest slot +
  collect_s, a slot's retries in series (each retry adding invoke_s + collect_s), from the backend's profile;
* projected round P = the learner's own-instance part + the stage before the update + an evaluation's after it;
* serverless round = learner_host_rate · P + Σ invocation bills + storage requests of the backend's data path
  (PUT/GET per invocation and per round, LIST per second the round waited for functions);
* server round = (learner host + every actor host started so far) · P_servers (billed idle: a pool stays up), plus
  every host's share of its monthly IP/disk, plus ``startup_s`` when the pool grows.

Every projected figure prices one *deployment* (:class:`~minionsrl.deployments.Deployment`): a platform and the
path to it. ``P`` and the serverless bill price the run's (``priced_as`` in ``summary.json``; by default the one
its backend ships: a local run is priced as Lambda through Lithops, what ``--backend lithops`` runs); the server
bill prices the servers' path (``P_servers``: the same round with the servers' RPC profile).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from minionsrl import files
from minionsrl.backends.base import OK, THROTTLED, InvocationRecord, hosts_for
from minionsrl.deployments import COLD_START_S, DEPLOYMENTS, PLATFORMS, Deployment
from minionsrl.errors import ConfigError
from minionsrl.function.clock import own_s
from minionsrl.function.faults import DEFAULT_MEMORY_MB
from minionsrl.numbers import is_amount

SECONDS_PER_MONTH = 30 * 24 * 3600


def load_prices(path: str | Path | None = None) -> Prices:
    """Read the price catalogue (the shipped one when ``path`` is None), check its fields and return it typed."""
    if path is None:
        text = resources.files("minionsrl").joinpath("data", "prices.yaml").read_text()
        source = "the shipped prices.yaml"
    else:
        if not Path(path).is_file():
            raise ConfigError(f"prices: file {str(path)!r} does not exist; pass an existing YAML catalogue")
        source = str(path)
        text = files.read_bytes(path, files.MAX_CONFIG_BYTES, "prices")
    prices = files.parse_yaml(text, f"prices: {source}")
    required = {
        "aws_lambda": ("x86_usd_per_gb_s", "arm_usd_per_gb_s", "usd_per_million_requests", "billing_granularity_ms"),
        "azure_functions": ("usd_per_gb_s", "usd_per_million_requests", "billing_granularity_ms"),
        "servers": ("usd_per_host_month", "startup_s"),
    }
    paths = [f"{section}.{key}" for section, keys in required.items() for key in keys]
    for path in [*paths, "servers.actor_host.usd_per_hour", "servers.gpu_learner_host.usd_per_hour",
                 "servers.cpu_learner_host.usd_per_hour"]:
        value = _at(prices, path)
        if not is_amount(value):
            raise ConfigError(f"prices: {source} needs a non-negative number at {path}")
    vcpus = _at(prices, "servers.actor_host.vcpus")
    if vcpus is not None and (not isinstance(vcpus, int) or isinstance(vcpus, bool) or vcpus < 1):
        raise ConfigError(f"prices: {source} needs a positive integer at servers.actor_host.vcpus")
    _check_overheads(prices, source)
    return Prices.of(prices)


def _check_overheads(prices: dict[str, Any], source: str) -> None:
    """Every deployment's invoke-and-collect profile is complete, and storage prices are numbers."""
    for path in DEPLOYMENTS:
        where = f"overheads.{path}"
        profile = _at(prices, where)
        if not isinstance(profile, dict):
            raise ConfigError(f"prices: {source} has no {where} profile ({', '.join(Overhead.REQUIRED)}, source); "
                              "copy it from the shipped minionsrl/data/prices.yaml")
        for name in Overhead.FIELDS:
            value = profile.get(name)
            if value is None and name not in Overhead.REQUIRED:
                continue
            if not is_amount(value):
                raise ConfigError(f"prices: {source} needs a non-negative number at {where}.{name}")
        if not isinstance(profile["parallel_invokes"], int) or profile["parallel_invokes"] < 1:
            raise ConfigError(f"prices: {source} needs a positive integer at {where}.parallel_invokes")
        if not isinstance(profile.get("source"), str) or not profile["source"].strip():
            raise ConfigError(f"prices: {source} needs {where}.source: where its figures come from")
    for kind in ("put", "get", "list"):
        value = _at(prices, f"storage_requests.usd_per_1000_{kind}")
        if not is_amount(value):
            raise ConfigError(f"prices: {source} needs a non-negative number at storage_requests.usd_per_1000_{kind}")


def _at(tree: Any, dotted: str) -> Any:
    """The value at ``a.b.c`` in nested mappings, or None where the path does not exist."""
    for part in dotted.split("."):
        if not isinstance(tree, dict):
            return None
        tree = tree.get(part)
    return tree


@dataclass(frozen=True)
class FunctionPricing:
    """The billing rule of one function platform."""

    usd_per_gb_s: float
    usd_per_request: float
    granularity_ms: float
    bill_init: bool

    @classmethod
    def of(cls, prices: dict[str, Any], platform: str) -> FunctionPricing:
        """The billing rule of ``platform`` (one of :data:`PLATFORMS`) in a catalogue :func:`load_prices` checked."""
        if platform.startswith("aws_lambda"):
            lam = prices["aws_lambda"]
            rate = lam["x86_usd_per_gb_s"] if platform.endswith("x86") else lam["arm_usd_per_gb_s"]
            return cls(rate, lam["usd_per_million_requests"] / 1e6, lam["billing_granularity_ms"],
                       bool(lam.get("bill_init", True)))
        az = prices["azure_functions"]
        return cls(az["usd_per_gb_s"], az["usd_per_million_requests"] / 1e6, az["billing_granularity_ms"],
                   bool(az.get("bill_init", True)))

    def billed_seconds(self, init_s: float, run_s: float) -> float:
        """Duration the platform bills for an invocation of these own-instance times, rounded up to its
        granularity."""
        ms = 1000.0 * (run_s + (init_s if self.bill_init else 0.0))
        step = max(self.granularity_ms, 1e-9)
        return math.ceil(ms / step - 1e-9) * step / 1000.0

    def invocation_usd(self, init_s: float, run_s: float, memory_mb: float) -> float:
        """What the platform bills for one invocation of these own-instance times on a function of ``memory_mb``:
        its billed GB-seconds and its request."""
        return self.billed_seconds(init_s, run_s) * memory_mb / 1024.0 * self.usd_per_gb_s + self.usd_per_request


@dataclass(frozen=True)
class Overhead:
    """What reaching the functions adds to a round on a deployment's path, beyond their own time (``prices.yaml``
    ``overheads.<path>``, with its public source): the learner sends ``parallel_invokes`` calls at once, each
    taking ``invoke_s`` to start its function; a result reaches the learner ``collect_s`` after its function
    ends. Backends that move data through object storage make requests billed per request: PUTs and GETs per
    invocation and per round, and LISTs while the learner polls for results."""

    invoke_s: float = 0.0
    parallel_invokes: int = 1
    collect_s: float = 0.0
    puts_per_invocation: float = 0.0
    gets_per_invocation: float = 0.0
    puts_per_round: float = 0.0
    lists_per_s: float = 0.0

    REQUIRED = ("invoke_s", "parallel_invokes", "collect_s")
    FIELDS = ("invoke_s", "parallel_invokes", "collect_s", "puts_per_invocation", "gets_per_invocation",
              "puts_per_round", "lists_per_s")

    def stage_s(self, chains: list[float]) -> float:
        """A wave of invocations, one per slot, whose attempts took ``chains`` seconds each (a slot's retries run
        one after the other, each paying a call and a collection): dispatch, the slowest slot, its collection."""
        if not chains:
            return 0.0
        return math.ceil(len(chains) / self.parallel_invokes) * self.invoke_s + max(chains) + self.collect_s

    def retry_s(self) -> float:
        """What a retried attempt adds to its slot beyond its own time: a new call and a new collection."""
        return self.invoke_s + self.collect_s

    def storage_requests(self, invocations: int, wait_s: float) -> dict[str, float]:
        """Storage requests of a round that ran ``invocations`` functions and waited ``wait_s`` for them."""
        return {"put": self.puts_per_invocation * invocations + (self.puts_per_round if invocations else 0.0),
                "get": self.gets_per_invocation * invocations, "list": self.lists_per_s * wait_s}


@dataclass(frozen=True)
class ModelledRound:
    """A round of ``n`` functions as the ledger would bill it (:meth:`CostLedger.model_round`): its projected
    seconds and both bills, and of its seconds the learner's part and one function's."""

    round_s: float
    serverless_usd: float
    server_usd: float
    learner_s: float
    function_s: float

    @property
    def overhead_s(self) -> float:
        """What the platform adds: dispatching the calls and collecting the results."""
        return max(self.round_s - self.learner_s - self.function_s, 0.0)


@dataclass
class RoundBill:
    """A round's line in the ledger."""

    cost_serverless_usd: float  # hosts billed over the projected round
    cost_server_usd: float
    cost_serverless_wall_usd: float  # hosts billed over this machine's wall time instead
    cost_server_wall_usd: float
    projected_round_s: float
    projected_server_round_s: float
    actor_hosts: int  # the server pool billed this round: every host started so far
    storage_usd: float  # of the serverless cost, the object-storage requests


@dataclass(frozen=True)
class Totals:
    """What the run has been billed so far, both ways, and the server pool it has started (a started pool stays up
    until the job ends, billed idle): part of the run's state (:class:`~minionsrl.loop.state.RunState`), checkpointed
    as ``ledger``."""

    serverless_usd: float = 0.0
    server_usd: float = 0.0
    serverless_wall_usd: float = 0.0
    server_wall_usd: float = 0.0
    projected_s: float = 0.0
    actor_hosts: int = 0

    def billed(self, bill: RoundBill) -> Totals:
        """These totals with ``bill`` added (its pool is the run's from now on)."""
        return Totals(self.serverless_usd + bill.cost_serverless_usd, self.server_usd + bill.cost_server_usd,
                      self.serverless_wall_usd + bill.cost_serverless_wall_usd,
                      self.server_wall_usd + bill.cost_server_wall_usd, self.projected_s + bill.projected_round_s,
                      bill.actor_hosts)

    def abandoned(self, usd: float) -> Totals:
        """These totals with ``usd`` of invocations cancelled after the last round added (serverless only: a server
        pool runs them at no extra cost)."""
        return Totals(self.serverless_usd + usd, self.server_usd, self.serverless_wall_usd + usd,
                      self.server_wall_usd, self.projected_s, self.actor_hosts)

    def usd(self) -> dict[str, float]:
        """The dollars, as ``summary.json``'s ``cost_usd``."""
        return {"serverless": self.serverless_usd, "server": self.server_usd,
                "serverless_wall": self.serverless_wall_usd, "server_wall": self.server_wall_usd}

    _KEYS = ("serverless_usd", "server_usd", "serverless_wall_usd", "server_wall_usd", "projected_s")

    def to_state(self) -> dict[str, Any]:
        """The checkpoint's ``ledger``."""
        return {"actor_hosts": self.actor_hosts, **{f"total_{k}": getattr(self, k) for k in self._KEYS}}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Totals:
        """The totals a checkpoint's ``ledger`` kept (:meth:`to_state`)."""
        return cls(**{k: float(state[f"total_{k}"]) for k in cls._KEYS}, actor_hosts=int(state["actor_hosts"]))


@dataclass
class RoundTimes:
    """What the ledger needs of a round's time: its wall time on this machine, the learner's own-instance part
    (:mod:`minionsrl.function.clock`), and each slot's attempts in the order they ran, for the wave the update
    waited for (training, and an evaluation beside it) and for an evaluation after the update. A pipelined round's
    training wave was sent ``head_start_s`` before the round began (beside the previous update, its own-instance
    seconds), and an evaluation sent at the round's start runs ``beside`` it."""

    wall_s: float
    learner_s: float
    sampled: list[list[InvocationRecord]]
    evaluated_after: list[list[InvocationRecord]] = field(default_factory=list)
    head_start_s: float = 0.0
    beside: list[list[InvocationRecord]] = field(default_factory=list)


@dataclass(frozen=True)
class Host:
    """A server the ledger bills by the hour (``prices.yaml`` ``servers.*``); ``vcpus``: how many functions a host of
    actors runs at once (16 where the catalogue does not say)."""

    name: str
    usd_per_hour: float
    vcpus: int = 16

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Host:
        return cls(str(raw.get("name", "")), float(raw["usd_per_hour"]), int(raw.get("vcpus", cls.vcpus)))


@dataclass(frozen=True)
class Prices:
    """The price catalogue, checked (:func:`load_prices`): each function platform's billing rule, the servers (a
    host of actors, the learner's host on a CPU or a GPU, what a host costs besides, how long one takes to start),
    storage requests, and each deployment's invoke-and-collect profile."""

    functions: dict[str, FunctionPricing]  # by platform (PLATFORMS)
    actor_host: Host
    cpu_learner_host: Host
    gpu_learner_host: Host
    usd_per_host_month: float
    startup_s: float  # a new server's start, billed
    usd_per_request: dict[str, float]  # a storage request, by kind: put, get, list
    overheads: dict[str, Overhead]  # by deployment path (DEPLOYMENTS)

    @classmethod
    def of(cls, prices: dict[str, Any]) -> Prices:
        """The typed form of a catalogue whose fields :func:`load_prices` checked."""
        servers = prices["servers"]
        return cls(
            functions={p: FunctionPricing.of(prices, p) for p in PLATFORMS},
            actor_host=Host.of(servers["actor_host"]), cpu_learner_host=Host.of(servers["cpu_learner_host"]),
            gpu_learner_host=Host.of(servers["gpu_learner_host"]),
            usd_per_host_month=float(servers["usd_per_host_month"]), startup_s=float(servers["startup_s"]),
            usd_per_request={kind: prices["storage_requests"][f"usd_per_1000_{kind}"] / 1000.0
                             for kind in ("put", "get", "list")},
            overheads={path: Overhead(**{name: profile[name] for name in Overhead.FIELDS if name in profile})
                       for path, profile in prices["overheads"].items() if path in DEPLOYMENTS})

    def pricing(self, platform: str) -> FunctionPricing:
        """The billing rule of function platform ``platform`` (one not in the catalogue: one clear line)."""
        if platform not in self.functions:
            raise ConfigError(f"platform: {platform!r} is not one of {', '.join(PLATFORMS)}")
        return self.functions[platform]


class CostLedger:
    """Bills every round both ways, on the run's deployment and on servers; the run's state keeps the totals
    (:class:`Totals`)."""

    def __init__(self, prices: Prices, platform: str = "aws_lambda_x86", memory_mb: float = DEFAULT_MEMORY_MB,
                 cold_start_s: float = COLD_START_S, learner_device: str = "cpu",
                 deployment: Deployment = DEPLOYMENTS["lithops"]) -> None:
        self.pricing = prices.pricing(platform)
        self.deployment, self.priced_as = deployment, deployment.priced_as(platform)
        self.overhead = prices.overheads[deployment.path]
        self.server_overhead = prices.overheads["servers"]  # the server bill prices the servers' own path
        self.request_usd = prices.usd_per_request
        self.memory_mb = memory_mb
        self.cold_start_s = cold_start_s
        # the learner is billed on the kind of host it ran on: a GPU host only for a GPU learner
        self.learner_host = prices.gpu_learner_host if learner_device == "cuda" else prices.cpu_learner_host
        self.learner_usd_s = self.learner_host.usd_per_hour / 3600.0
        self.actor_usd_s = prices.actor_host.usd_per_hour / 3600.0
        self.vcpus_per_host, self.startup_s = prices.actor_host.vcpus, prices.startup_s
        self.host_overhead_usd_s = prices.usd_per_host_month / SECONDS_PER_MONTH

    # -- one invocation ------------------------------------------------------------------------------
    def function_s(self, record: InvocationRecord) -> tuple[float, float]:
        """(init, run) of an invocation on an instance of its own, the one model for its latency and its bill:
        a cold start is ``cold_start_s`` (the model, not this machine's process start), a warm init and the run
        are as measured less their wait for a CPU here. A warm init includes loading the round's policy even where
        this machine's instance had loaded it for an earlier invocation (``reused_policy_s``): on an instance of
        its own, every function loads each new policy. One that ended without timings of its own (killed, timed
        out, cancelled) held its instance for the time its caller saw; a refused call never ran."""
        if record.status == THROTTLED:
            return 0.0, 0.0
        if record.status != OK and not record.run_s:
            return 0.0, record.duration_s
        init = self.cold_start_s if record.cold else own_s(record.init_s, record.init_wait_s) + record.reused_policy_s
        return init, own_s(record.run_s, record.run_wait_s)

    def latency_s(self, record: InvocationRecord) -> float:
        """An invocation's own-instance time, from its function's start to its end."""
        return sum(self.function_s(record))

    def invocation_usd(self, record: InvocationRecord) -> float:
        """What the platform bills for one invocation (a refused one: nothing)."""
        if record.status == THROTTLED:
            return 0.0
        return self.pricing.invocation_usd(*self.function_s(record), self.memory_mb)

    # -- one round -----------------------------------------------------------------------------------
    def projected_s(self, times: RoundTimes, overhead: Overhead | None = None) -> float:
        """What the round takes in the cloud on the run's deployment (or on the path of ``overhead``): the
        learner's own-instance part, the wave of functions it waited for before its update and, if any, the
        evaluation after it, each as a platform stage (:class:`Overhead`): dispatch, the slowest slot (its attempts
        one after the other), collection. A wave sent ahead (pipelined) is waited for only beyond its head start."""
        path = overhead or self.overhead

        def stage(chains: list[list[InvocationRecord]]) -> float:
            return path.stage_s([self._chain_s(c, path) for c in chains])

        waited = max(stage(times.sampled) - times.head_start_s, stage(times.beside), 0.0)
        return times.learner_s + (waited + stage(times.evaluated_after))  # summed in the order it always was

    def _chain_s(self, chain: list[InvocationRecord], path: Overhead) -> float:
        ran = [r for r in chain if r.status != THROTTLED]
        return sum(self.latency_s(r) for r in ran) + max(len(ran) - 1, 0) * path.retry_s()

    def serverless_usd(self, host_s: float, records: list[InvocationRecord], wait_s: float) -> tuple[float, float]:
        """(the serverless cost, its storage part) of a round or of its part so far: the learner host for
        ``host_s``, the functions and their requests, and the storage requests of its data path while it waited
        ``wait_s`` for functions."""
        ran = sum(1 for r in records if r.status != THROTTLED)  # a platform bills no call it refused
        storage = sum(count * self.request_usd[kind]
                      for kind, count in self.overhead.storage_requests(ran, wait_s).items())
        return self.learner_usd_s * host_s + sum(self.invocation_usd(r) for r in records) + storage, storage

    def abandoned_usd(self, records: list[InvocationRecord]) -> float:
        """What invocations cancelled after the last round cost (no round of their own waited for them): their
        compute and requests."""
        return self.serverless_usd(0.0, records, 0.0)[0]

    def bill_round(self, times: RoundTimes, records: list[InvocationRecord], n_actors: int,
                   actor_hosts: int = 0) -> RoundBill:
        """Bill one round from its times and every invocation record (training, evaluation, failed attempts,
        duplicates, stragglers), hosts over the projected round; ``actor_hosts``: the server pool the run had
        started before it (a started pool stays up until the job ends, billed idle)."""
        projected, on_servers = self.projected_s(times), self.projected_s(times, self.server_overhead)
        wait_s = projected - times.learner_s
        hosts = hosts_for(n_actors, self.vcpus_per_host)
        startup = self.startup_s if hosts > actor_hosts else 0.0
        pool = max(actor_hosts, hosts)
        server_rate = self.server_usd_s(pool)
        serverless, storage = self.serverless_usd(projected, records, wait_s)
        serverless_wall, _ = self.serverless_usd(times.wall_s, records, wait_s)
        return RoundBill(serverless, server_rate * (on_servers + startup), serverless_wall,
                         server_rate * (times.wall_s + startup), projected, on_servers + startup, pool, storage)

    def server_usd_s(self, hosts: int) -> float:
        """Dollars a second of the server baseline with ``hosts`` actor hosts: them and the learner host, each with
        its share of the monthly IP and disk."""
        return self.learner_usd_s + hosts * self.actor_usd_s + (hosts + 1) * self.host_overhead_usd_s

    def model_round(self, learner_s: float, function: InvocationRecord, n_actors: int,
                    slowest: InvocationRecord | None = None) -> ModelledRound:
        """A round of ``n_actors`` functions that do what ``function`` records (own-instance times: a warm
        invocation), the slowest of them what ``slowest`` records (``function`` where not given), and a learner part
        of ``learner_s``, billed as :meth:`bill_round` bills a measured one (its pool's start left out): the
        forecast (``minionsrl plan``) is this ledger's own rule, not a copy of it."""
        records = [function] * (n_actors - 1) + [slowest or function]
        times = RoundTimes(0.0, learner_s, [[r] for r in records])
        projected, on_servers = self.projected_s(times), self.projected_s(times, self.server_overhead)
        serverless, _ = self.serverless_usd(projected, records, projected - learner_s)
        server = self.server_usd_s(hosts_for(n_actors, self.vcpus_per_host)) * on_servers
        return ModelledRound(projected, serverless, server, learner_s, self.latency_s(slowest or function))

    def round_usd(self, times: RoundTimes, records: list[InvocationRecord]) -> float:
        """A round's serverless cost so far, without billing it (the budget check before its last steps)."""
        projected = self.projected_s(times)
        return self.serverless_usd(projected, records, projected - times.learner_s)[0]

    # -- budgets -------------------------------------------------------------------------------------
    def least_round_usd(self, n_actors: int) -> float:
        """The least a first round of ``n_actors`` functions can cost: its requests, each billed at least one
        unit, and the learner host while it waits for one modelled cold start."""
        least = self.pricing.invocation_usd(0.0, 1e-9, self.memory_mb)  # a request and one billing unit
        return n_actors * least + self.learner_usd_s * self.cold_start_s
