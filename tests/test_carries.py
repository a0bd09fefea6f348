"""Carried episodes across rounds whose actor count changes: no episode in progress is lost when ``n`` shrinks."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from minionsrl.backends.base import Backend, InvocationRecord, Reply, make_reply
from minionsrl.config import StepPlan
from minionsrl.function import rollout
from minionsrl.function.envs import EnvSpec
from minionsrl.function.faults import FaultPlan
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.request import Request
from minionsrl.learner.networks import init_params, snapshot_of
from minionsrl.loop.retry import RetryPolicy
from minionsrl.loop.sampler import Publisher, Requests, SyncSampler

CART = PolicyArch(4, 2, True, (8,))
KEY = b"c" * 32


class InProcessBackend(Backend):
    """Runs each rollout function in this process, at submission (one warm instance)."""

    name = "in-process"
    key = KEY

    def __init__(self) -> None:
        self.policies: dict[str, bytes] = {}
        self.ready: list[Reply] = []

    def publish(self, policy_blob: bytes) -> str:
        ref = f"p{len(self.policies)}"
        self.policies[ref] = policy_blob
        return ref

    def submit(self, requests: list[Request]) -> None:
        for req in requests:
            data = rollout.handle(req.encode(), self.policies.__getitem__, KEY)
            self.ready.append(make_reply(InvocationRecord(req.id, req.kind), data, KEY))

    def collect(self, timeout: float | None = None) -> list[Reply]:
        out, self.ready = self.ready, []
        return out

    def cancel(self, ids: Iterable[str] | None = None) -> list[Reply]:
        return []

    @property
    def in_flight(self) -> int:
        return len(self.ready)

    def close(self) -> None:
        pass


def _sampler(envs: int = 1, steps: int = 16) -> SyncSampler:
    backend = InProcessBackend()
    publisher = Publisher(backend, KEY, lambda v: snapshot_of(CART, init_params(CART, 0), None, v, 10.0))
    requests = Requests(EnvSpec("CartPole-v1"), 3, 0.99, FaultPlan({}, 0))
    return SyncSampler(backend, requests, publisher, CART, StepPlan(fragment_length=steps, envs=envs), True,
                       RetryPolicy())


@pytest.mark.parametrize("envs", [1, 2])
def test_a_shrinking_actor_count_loses_no_episode_in_progress(envs):
    """Every step sampled belongs to an episode that either finished (and was reported) or is still carried:
    the episodes of actors a smaller round leaves out go on, and their returns are reported when they end."""
    sampler, sampled, finished = _sampler(envs), 0, 0
    for round_idx, n in enumerate([6, 2, 1, 3, 1, 6, 2], start=1):
        fragments = sampler.sample(round_idx, n).fragments
        sampled += sum(len(f.rewards) for f in fragments)
        finished += int(sum(f.episode_lengths.sum() for f in fragments))
        carried = sum(c["ep_length"] for c in sampler.carries.values())
        assert finished + carried == sampled, f"round {round_idx} (n={n}): {sampled - finished - carried} steps lost"
        # CartPole rewards 1 a step: a carried episode's return is its length, whoever continues it
        assert all(c["ep_return"] == c["ep_length"] for c in sampler.carries.values())


def test_paused_episodes_go_on_in_the_actors_that_start_new_ones():
    """A round of fewer actors than the carried episodes hands the left-out ones to its actors whose episode
    ended (lowest first); the rest wait, and a round of more actors takes them up before starting new ones."""
    sampler = _sampler()
    sampler.carries = {a: {"ep_length": a} for a in (0, 2, 3, 5)}
    sampler._resume_paused(3)  # actors 0..2: actor 1 has none, it takes the lowest paused one (3)
    assert sampler.carries == {0: {"ep_length": 0}, 1: {"ep_length": 3}, 2: {"ep_length": 2}, 5: {"ep_length": 5}}
    sampler._resume_paused(6)  # nothing is paused in a round that includes every carrying actor
    assert set(sampler.carries) == {0, 1, 2, 5}
    sampler._resume_paused(2)  # 2 and 5 are paused; no actor of the round is free
    assert set(sampler.carries) == {0, 1, 2, 5}

