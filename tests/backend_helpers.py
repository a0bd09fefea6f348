"""Policies and requests for backend tests, built as the trainer builds them."""

from __future__ import annotations

from minionsrl.function.envs import EnvSpec
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.request import Request
from minionsrl.learner.networks import init_params, snapshot_of
from minionsrl.loop.sampler import invocation_seed

CART = PolicyArch(4, 2, True, (64, 64))
COUNTER = PolicyArch(2, 3, True, (8,))
KEY = b"b" * 32
STEPS = 32


def snapshot(arch: PolicyArch = CART, version: int = 0) -> bytes:
    return snapshot_of(arch, init_params(arch, version), None, version, 10.0).encode(KEY)


def requests_for(ref: str, n: int, round_idx: int = 1, spec: EnvSpec | None = None, kind: str = "train",
                 **extra) -> list[Request]:
    """Requests as the sampler builds them (``extra``: fields to set, e.g. ``fault``)."""
    spec = spec or EnvSpec("CartPole-v1")
    sized = {"steps": STEPS} if kind == "train" else {"episodes": 1}
    return [Request(id=f"r{round_idx}-{kind}-{slot}", kind=kind, policy=ref, env=spec,
                    seed=invocation_seed(1, round_idx, slot, 0 if kind == "train" else 1), gamma=0.99,
                    **{**sized, **extra}) for slot in range(n)]
