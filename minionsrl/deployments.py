"""Where a run's functions run and what its figures price: the names a config chooses from.

The backends a config names (:data:`BACKENDS`), the function platforms the ledger bills (:data:`PLATFORMS`) and the
deployments a projected figure prices (:data:`DEPLOYMENTS`), with their defaults. A leaf of the package: the config
checks its choices against these tables, and the backends and the cost ledger read them, so the config imports
neither a backend nor the ledger. What a backend does is in :mod:`minionsrl.backends`; how a deployment is billed,
in :mod:`minionsrl.cost` (its invoke-and-collect profile is data, ``prices.yaml`` ``overheads.<path>``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """A backend as a config names it: where its functions run, in the summary's words, and the pip extra it needs
    (checked before any work). Its constructor is in the composition root (:data:`minionsrl.build.BACKENDS`)."""

    where: str
    extra: str | None = None


# every backend, by the name a config gives it: the one table the config's choices, the summary and the checks read
BACKENDS: dict[str, Kind] = {
    "local": Kind("local worker processes (this machine)"),
    "server": Kind("long-lived worker processes (this machine: the server-based baseline)"),
    "ray": Kind("Ray tasks", extra="ray"),
    "lithops": Kind("Lithops", extra="lithops"),
}
IDLE_TIMEOUT_S = 300.0  # the local backend reaps an instance idle this long (--idle-timeout-s)

PLATFORMS = ("aws_lambda_x86", "aws_lambda_arm", "azure_functions")
COLD_START_S = 1.0  # seconds of a cloud function's modelled cold start (the config's default)


@dataclass(frozen=True)
class Deployment:
    """A path to the functions: whether a backend of this package makes those calls (an unshipped path is a
    labelled what-if, never a headline), and whether it runs on servers (its dollars are the server bill) rather
    than on a function platform."""

    path: str
    label: str  # how a figure names it, after the function platform where it runs on one
    shipped: bool
    servers: bool = False

    def priced_as(self, platform: str) -> str:
        """The deployment's name in ``summary.json``, ``plan`` and the progress line: ``aws_lambda_x86 via lithops``."""
        return self.label if self.servers else f"{platform} {self.label}"


DEPLOYMENTS: dict[str, Deployment] = {
    "lithops": Deployment("lithops", "via lithops", shipped=True),  # --backend lithops: Lithops over S3
    "direct": Deployment("direct", "direct invoke (what-if: no backend ships it)", shipped=False),  # the papers'
    "ray": Deployment("ray", "ray cluster", shipped=True, servers=True),
    "servers": Deployment("servers", "servers", shipped=True, servers=True),
}
# the deployment a backend's run prices by default: a local run stands for the functions a user can deploy
BACKEND_DEPLOYMENT = {"local": "lithops", "lithops": "lithops", "ray": "ray", "server": "servers"}


def pays_servers(priced_as: str) -> bool:
    """Whether a run priced as ``priced_as`` (its ``summary.json`` name) pays the server bill: a deployment on
    servers (servers, a Ray cluster), where the functions' bill is a what-if, as ``plan`` prices it."""
    return any(d.servers and d.label == priced_as for d in DEPLOYMENTS.values())


def deployment_of(path: str | None, backend: str) -> Deployment:
    """The deployment a run prices: ``path`` (``--deployment``), else its backend's own."""
    return DEPLOYMENTS[path or BACKEND_DEPLOYMENT[backend]]
