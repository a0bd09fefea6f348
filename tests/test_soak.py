"""Resources over many rounds (the short form of docs/archive/bench/soak.py): instances that die mid-invocation are
replaced without leaving descriptors, zombie processes or published policies behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig

pytestmark = pytest.mark.integration  # kills worker processes over many rounds


def _children() -> list[tuple[int, str]]:
    """(pid, state) of this process's children, from /proc."""
    me, out = os.getpid(), []
    for pid in Path(f"/proc/{me}/task/{me}/children").read_text().split():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        out.append((int(pid), state))
    return out


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_killed_instances_leave_no_descriptors_zombies_or_policies(tmp_path):
    cfg = TrainConfig(env_id="CartPole-v1", actors=3, fragment_length=8, max_rounds=12, eval_every=6, eval_episodes=1,
                      fault_kill=0.2, fault_seed=3, max_concurrency=2, tensorboard=False, progress=False,
                      run_dir=str(tmp_path / "run"))
    others = {pid for pid, _ in _children()}  # what earlier tests left running in this process (services, clusters)
    trainer = make_trainer(cfg)
    try:
        samples = []
        while trainer.round < cfg.run.max_rounds:
            trainer.run_round()
            trainer.session.wait()  # the background checkpoint write, whose file would count as a descriptor
            if trainer.round in (3, cfg.run.max_rounds):
                samples.append((_fds(), [c for c in _children() if c[0] not in others]))
        backend = getattr(trainer.backend, "inner", trainer.backend)
        policies = list(backend._dir.glob("policy-*"))
        stacks = list(backend._dir.glob("stack-*"))  # a live instance's file for its stack, should it hang
        started = backend.instances_started
        killed = sum(1 for line in (tmp_path / "run" / "invocations.csv").read_text().splitlines() if "died" in line)
    finally:
        trainer.close()
    (fds_early, _), (fds_late, children) = samples
    assert killed >= 2 and started > cfg.functions.max_concurrency  # instances were killed and replaced
    assert fds_late <= fds_early  # each replaced instance's pipes were closed
    assert [c for c in children if c[1] == "Z"] == []  # and its process reaped
    assert len(children) <= cfg.functions.max_concurrency
    assert len(policies) <= 2  # only the policies still referred to stay published
    assert len(stacks) <= cfg.functions.max_concurrency  # a killed instance's stack file goes with it
