"""``server``: the server-based baseline — a pool of long-lived workers that never idle out.

Actors run on the same worker processes as ``local``, but instances are kept for the whole job (a
server is billed whether busy or not) and every actor host (``vcpus`` actors) that the job has not
had before costs a start-up delay. The cost ledger always charges that delay in projected time and
dollars; with ``wait_for_startup`` the backend also really waits for it.
"""

from __future__ import annotations

import math
import time

from minionsrl.backends.base import hosts_for
from minionsrl.backends.local import LocalBackend
from minionsrl.function.request import Request


class ServerBackend(LocalBackend):
    """Long-lived workers with host-granular scale-out and an optional real start-up wait."""

    name = "server"

    def __init__(self, key: bytes, vcpus_per_host: int, startup_s: float, max_concurrency: int | None = None,
                 wait_for_startup: bool = False, invocation_timeout_s: float | None = None) -> None:
        """``vcpus_per_host`` actors a server, each new one ``startup_s`` seconds to start (the cost catalogue's
        servers: :func:`minionsrl.cost.actor_host`)."""
        super().__init__(key, max_concurrency=max_concurrency, idle_timeout_s=math.inf,
                         invocation_timeout_s=invocation_timeout_s)
        self.vcpus_per_host = vcpus_per_host
        self.startup_s = startup_s
        self.wait_for_startup = wait_for_startup
        self.hosts = 0
        self.startup_waits = 0

    def submit(self, requests: list[Request]) -> None:
        """Start the actor hosts that ``requests`` need on top of those in flight (waiting if so
        configured), then run the requests on them."""
        tasks = [*self._queue, *(i.task for i in self._instances if i.task is not None)]
        busy = sum(1 for t in tasks if t.request.kind == "train")
        hosts = hosts_for(busy + sum(1 for r in requests if r.kind == "train"), self.vcpus_per_host)
        if hosts > self.hosts:
            if self.wait_for_startup and self.hosts > 0:  # the first hosts start before the job
                time.sleep(self.startup_s)
                self.startup_waits += 1
            self.hosts = hosts
        super().submit(requests)
