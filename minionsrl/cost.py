"""The cost ledger (DESIGN §4): what each invocation and each round cost, serverless and on servers.

Prices are data (``minionsrl/data/prices.yaml``, or ``--prices FILE``). Every host that waits on a
round is billed for the round as the cloud would run it, ``P`` (its projected time, below), not for this
machine's wall time ``R``, in which ``n`` functions queue on a few cores; the bill over ``R`` is kept
beside it. Formulas, with ``n`` the round's actor count (worked example in ``docs/COST.md``):

* invocation bill = ceil(billed_ms / granularity) · granularity / 1000 · memory_GB · price_GB_s, where
  billed_ms is the run time plus the init time (the cold start when cold) if the platform bills init; an
  invocation that failed without timings of its own (killed, timed out, cancelled) is billed for the time
  the caller saw it run;
* projected cloud round time P = R − sample time + max over training functions (modelled cold start or
  measured warm init, + run time), i.e. each function on its own instance with no queueing;
* serverless round = learner_host_rate · P + Σ invocation bills + invocations · price_per_request;
* server round = (learner host + ceil(n / vCPUs per actor host) actor hosts) · P (billed idle), plus
  every host's share of its monthly IP/disk, plus ``startup_s`` of every actor host added this round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from minionsrl.backends.base import OK, THROTTLED, InvocationRecord
from minionsrl.errors import ConfigError

SECONDS_PER_MONTH = 30 * 24 * 3600
PLATFORMS = ("aws_lambda_x86", "aws_lambda_arm", "azure_functions")


def load_prices(path: str | Path | None = None) -> dict[str, Any]:
    """Read the price catalogue (the shipped one when ``path`` is None) and check its fields."""
    if path is None:
        text = resources.files("minionsrl").joinpath("data", "prices.yaml").read_text()
        source = "the shipped prices.yaml"
    else:
        if not Path(path).is_file():
            raise ConfigError(f"prices: file {str(path)!r} does not exist; pass an existing YAML catalogue")
        source = str(path)
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"prices: {source} cannot be read ({type(exc).__name__}); pass a UTF-8 YAML "
                              "file") from exc
    try:
        prices = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"prices: {source} is not valid YAML") from exc
    required = {
        "aws_lambda": ("x86_usd_per_gb_s", "arm_usd_per_gb_s", "usd_per_million_requests", "billing_granularity_ms"),
        "azure_functions": ("usd_per_gb_s", "usd_per_million_requests", "billing_granularity_ms"),
        "servers": ("usd_per_host_month", "startup_s"),
    }
    paths = [f"{section}.{key}" for section, keys in required.items() for key in keys]
    for path in [*paths, "servers.actor_host.usd_per_hour", "servers.gpu_learner_host.usd_per_hour",
                 "servers.cpu_learner_host.usd_per_hour"]:
        value = _at(prices, path)
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < math.inf:
            raise ConfigError(f"prices: {source} needs a non-negative number at {path}")
    vcpus = _at(prices, "servers.actor_host.vcpus")
    if vcpus is not None and (not isinstance(vcpus, int) or isinstance(vcpus, bool) or vcpus < 1):
        raise ConfigError(f"prices: {source} needs a positive integer at servers.actor_host.vcpus")
    return prices


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
        if platform not in PLATFORMS:
            raise ConfigError(f"platform: {platform!r} is not one of {', '.join(PLATFORMS)}")
        if platform.startswith("aws_lambda"):
            lam = prices["aws_lambda"]
            rate = lam["x86_usd_per_gb_s"] if platform.endswith("x86") else lam["arm_usd_per_gb_s"]
            return cls(rate, lam["usd_per_million_requests"] / 1e6, lam["billing_granularity_ms"],
                       bool(lam.get("bill_init", True)))
        az = prices["azure_functions"]
        return cls(az["usd_per_gb_s"], az["usd_per_million_requests"] / 1e6, az["billing_granularity_ms"],
                   bool(az.get("bill_init", True)))

    def billed_seconds(self, record: InvocationRecord) -> float:
        """Duration the platform bills, rounded up to its granularity."""
        seconds = record.run_s + (record.init_s if self.bill_init else 0.0)
        if record.status != OK and not record.run_s:  # killed, timed out or cancelled: it held the instance
            seconds = max(seconds, record.duration_s)
        ms = 1000.0 * seconds
        step = max(self.granularity_ms, 1e-9)
        return math.ceil(ms / step - 1e-9) * step / 1000.0

    def invocation_usd(self, record: InvocationRecord, memory_mb: float) -> float:
        return self.billed_seconds(record) * memory_mb / 1024.0 * self.usd_per_gb_s


@dataclass
class RoundBill:
    """A round's line in the ledger."""

    cost_serverless_usd: float  # hosts billed over the projected round
    cost_server_usd: float
    cost_serverless_wall_usd: float  # hosts billed over this machine's wall time instead
    cost_server_wall_usd: float
    projected_round_s: float
    projected_server_round_s: float
    actor_hosts: int


def training(records: list[InvocationRecord]) -> list[InvocationRecord]:
    """The records of training invocations."""
    return [r for r in records if r.kind == "train"]


class CostLedger:
    """Bills every round both ways and keeps the running totals (checkpointed)."""

    def __init__(self, prices: dict[str, Any], platform: str = "aws_lambda_x86", memory_mb: float = 1769.0,
                 cold_start_s: float = 1.0, learner_device: str = "cpu") -> None:
        self.prices = prices
        self.pricing = FunctionPricing.of(prices, platform)
        self.memory_mb = memory_mb
        self.cold_start_s = cold_start_s
        servers = prices["servers"]
        # the learner is billed on the kind of host it ran on: a GPU host only for a GPU learner
        self.learner_host = servers["gpu_learner_host" if learner_device == "cuda" else "cpu_learner_host"]
        self.learner_usd_s = self.learner_host["usd_per_hour"] / 3600.0
        self.actor_usd_s = servers["actor_host"]["usd_per_hour"] / 3600.0
        self.vcpus_per_host = int(servers["actor_host"].get("vcpus", 16))
        self.host_overhead_usd_s = servers["usd_per_host_month"] / SECONDS_PER_MONTH
        self.startup_s = float(servers["startup_s"])
        self.actor_hosts = 0
        self.total_serverless_usd = 0.0
        self.total_server_usd = 0.0
        self.total_serverless_wall_usd = 0.0
        self.total_server_wall_usd = 0.0
        self.total_projected_s = 0.0

    def hosts_for(self, n_actors: int) -> int:
        return math.ceil(n_actors / self.vcpus_per_host)

    def projected_s(self, round_s: float, sample_s: float, sampling: list[InvocationRecord]) -> float:
        """What the round (so far) takes in the cloud: the learner's part of it as measured, and the slowest
        function it waited for before its update (``sampling``: the training ones, and an evaluation run beside
        them) on an instance of its own (a modelled cold start, or its measured warm init)."""
        slowest = max((self._cloud_latency(r) for r in sampling), default=0.0)
        return max(round_s - sample_s, 0.0) + slowest

    def serverless_usd(self, host_s: float, records: list[InvocationRecord]) -> float:
        """The serverless cost of a round (or of its part so far): the learner host for ``host_s``, the
        functions and their requests."""
        ran = [r for r in records if r.status != THROTTLED]  # a platform bills no call it refused
        functions = sum(self.pricing.invocation_usd(r, self.memory_mb) for r in ran)
        return self.learner_usd_s * host_s + functions + len(ran) * self.pricing.usd_per_request

    def bill_round(self, round_s: float, sample_s: float, records: list[InvocationRecord], n_actors: int,
                   sampling: list[InvocationRecord] | None = None) -> RoundBill:
        """Bill one round from its wall time and invocation records, hosts over the projected round; update
        the totals. ``sampling``: the records the round waited for before its update (default: the training
        ones; an evaluation after the update is in the learner's measured part)."""
        projected = self.projected_s(round_s, sample_s, training(records) if sampling is None else sampling)
        hosts = self.hosts_for(n_actors)
        added = max(hosts - self.actor_hosts, 0)
        startup = self.startup_s if added else 0.0
        server_rate = self.learner_usd_s + hosts * self.actor_usd_s + (hosts + 1) * self.host_overhead_usd_s
        self.actor_hosts = max(self.actor_hosts, hosts)  # servers, once started, stay (billed idle)
        bill = RoundBill(self.serverless_usd(projected, records), server_rate * (projected + startup),
                         self.serverless_usd(round_s, records), server_rate * (round_s + startup), projected,
                         projected + startup, hosts)
        self.total_serverless_usd += bill.cost_serverless_usd
        self.total_server_usd += bill.cost_server_usd
        self.total_serverless_wall_usd += bill.cost_serverless_wall_usd
        self.total_server_wall_usd += bill.cost_server_wall_usd
        self.total_projected_s += projected
        return bill

    def _cloud_latency(self, record: InvocationRecord) -> float:
        """A function's latency on its own cloud instance: modelled cold start, else measured warm init."""
        return (self.cold_start_s if record.cold else record.init_s) + record.run_s

    def least_round_usd(self, n_actors: int) -> float:
        """The least a first round of ``n_actors`` functions can cost: its requests, each billed at least one
        unit, and the learner host while it waits for one modelled cold start."""
        least = FunctionPricing(self.pricing.usd_per_gb_s, self.pricing.usd_per_request, self.pricing.granularity_ms,
                                bill_init=False)
        unit = least.invocation_usd(InvocationRecord("least", "train", run_s=1e-9), self.memory_mb)
        return n_actors * (self.pricing.usd_per_request + unit) + self.learner_usd_s * self.cold_start_s

    def affordable(self, budget_usd: float | None, next_round_usd: float) -> bool:
        """Whether a round expected to cost ``next_round_usd`` stays within the budget."""
        return budget_usd is None or self.total_serverless_usd + next_round_usd <= budget_usd

    _TOTALS = ("total_serverless_usd", "total_server_usd", "total_serverless_wall_usd", "total_server_wall_usd",
               "total_projected_s")

    def state_dict(self) -> dict[str, Any]:
        return {"actor_hosts": self.actor_hosts, **{name: getattr(self, name) for name in self._TOTALS}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor_hosts = int(state["actor_hosts"])
        for name in self._TOTALS:
            setattr(self, name, float(state[name]))
