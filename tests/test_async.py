"""APPO / IMPALA asynchronous rounds: policy-lag bookkeeping, seeds, stale-policy retries, failures,
evaluation while training is in flight, every scaler, and APPO solving CartPole (slow)."""

from __future__ import annotations

import csv
import json
from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np
import optax
import pytest

from minionsrl.backends.base import Backend, InvocationRecord, Reply, make_reply
from minionsrl.build import make_trainer
from minionsrl.config import SCALERS, TrainConfig
from minionsrl.errors import ConfigError, InvocationError
from minionsrl.function import rollout as rollout_mod
from minionsrl.function.fragment import PolicySnapshot
from minionsrl.function.request import Request
from minionsrl.loop.metrics import read_metrics
from minionsrl.loop.sampler import AsyncSampler, invocation_seed

KEY = b"a" * 32


class ScriptedBackend(Backend):
    """Runs the rollout function in this process; ``collect`` returns the oldest submitted invocation
    first (FIFO), one at a time, so arrival order — and with it the policy lag — is known."""

    name = "scripted"

    def __init__(self, drop_old_policies: bool = False, fail_train: bool = False) -> None:
        self.key = KEY
        self.policies: dict[str, bytes] = {}
        self.queue: deque[dict[str, Any]] = deque()
        self.submitted: list[Request] = []
        self.drop_old_policies, self.fail_train = drop_old_policies, fail_train
        self.max_in_flight = 0

    def publish(self, policy_blob: bytes) -> str:
        ref = f"p{len(self.policies)}"
        if self.drop_old_policies:
            self.policies.clear()  # as the local backend does: only the newest policy is kept
        self.policies[ref] = policy_blob
        return ref

    def submit(self, requests: list[Request]) -> None:
        self.queue.extend(requests)
        self.submitted.extend(requests)
        self.max_in_flight = max(self.max_in_flight, sum(r.kind == "train" for r in self.queue))

    def collect(self, timeout: float | None = None) -> list[Reply]:
        if not self.queue:
            return []
        req = self.queue.popleft()
        record = InvocationRecord(invocation_id=req.id, kind=req.kind)
        if self.fail_train and req.kind == "train":
            record.status, record.error = "failed", "injected failure"
            return [Reply(record)]
        if self.drop_old_policies:
            rollout_mod._POLICY.clear()  # a fresh instance: nothing cached, the policy is fetched
        data = rollout_mod.handle(req.encode(), self.policies.__getitem__, self.key)
        return [make_reply(record, data, self.key)]

    def cancel(self, ids: Iterable[str] | None = None) -> list[Reply]:
        wanted = None if ids is None else set(ids)
        chosen = [r for r in self.queue if wanted is None or r.id in wanted]
        self.queue = deque(r for r in self.queue if r not in chosen)
        return [Reply(InvocationRecord(r.id, r.kind, status="cancelled", error="cancelled")) for r in chosen]

    @property
    def in_flight(self) -> int:
        return len(self.queue)

    def close(self) -> None:
        self.queue.clear()


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = {"env_id": "CartPole-v1", "algo": "appo", "actors": 4, "async_fragments": 2, "max_rounds": 6,
            "fragment_length": 32, "eval_every": 0, "eval_episodes": 2, "progress": False, "tensorboard": False,
            "run_dir": str(tmp_path / "run"), "seed": 5}
    return TrainConfig(**{**base, **kw})


def test_policy_lag_bookkeeping_with_fifo_arrivals(tmp_path):
    backend = ScriptedBackend()
    trainer = make_trainer(_cfg(tmp_path), backend=backend)
    assert isinstance(trainer.sampler, AsyncSampler)
    trainer.run()
    rows = read_metrics(tmp_path / "run")
    # n = 4 in flight, k = 2, FIFO: update 1 sees the first two (lag 0); update 2 the other two of version 0
    # (lag 1); from then on every fragment was sampled two updates before the one that uses it.
    assert [float(r["policy_lag_mean"]) for r in rows] == [0, 1, 2, 2, 2, 2]
    assert [int(r["policy_lag_max"]) for r in rows] == [0, 1, 2, 2, 2, 2]
    assert [int(r["fragments"]) for r in rows] == [2] * 6
    assert [int(r["env_steps"]) for r in rows] == [64 * i for i in range(1, 7)]
    assert backend.max_in_flight == 4
    # each request carried the newest policy when it was submitted, and fragments report that version
    versions = [PolicySnapshot.decode(backend.policies[r.policy], KEY).version
                for r in backend.submitted if r.kind == "train"]
    assert versions[:6] == [0, 0, 0, 0, 0, 0]  # the 4 first + 2 resubmitted before update 1
    assert versions == sorted(versions) and versions[-1] >= 4


def test_async_seeds_are_a_function_of_run_seed_slot_and_call(tmp_path):
    backend = ScriptedBackend()
    make_trainer(_cfg(tmp_path, max_rounds=3), backend=backend).run()
    calls: dict[int, int] = {}
    for req in (r for r in backend.submitted if r.kind == "train"):
        slot = int(req.id.rsplit("-", 1)[1])
        calls[slot] = calls.get(slot, 0) + 1
        assert req.seed == invocation_seed(5, calls[slot], slot, 0)
        assert req.id == f"r{calls[slot]}-train-{slot}"
    assert len({r.id for r in backend.submitted}) == len(backend.submitted)  # ids are unique


def test_stale_policy_failures_are_resubmitted_with_the_newest_policy(tmp_path):
    backend = ScriptedBackend(drop_old_policies=True)
    trainer = make_trainer(_cfg(tmp_path, max_rounds=5), backend=backend)
    trainer.run()
    rows = read_metrics(tmp_path / "run")
    assert len(rows) == 5
    assert sum(int(r["stale_retries"]) for r in rows) > 0
    # every fragment used came from a policy that was still published: lag is at most 1 here
    assert max(int(r["policy_lag_max"]) for r in rows) <= 1
    # the failed invocations are logged (and billed) too
    with open(tmp_path / "run" / "invocations.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    failed = [r for r in rows if r["status"] == "failed"]
    assert failed and all(r["kind"] == "train" for r in failed)
    # a retry keeps the slot's seed, under a new id
    for r in failed:
        retry = next(x for x in rows if x["slot"] == r["slot"] and int(x["attempt"]) == int(r["attempt"]) + 1
                     and x["seed"] == r["seed"])
        assert retry["invocation_id"] != r["invocation_id"]


def test_a_slot_failing_repeatedly_fails_the_run(tmp_path):
    with pytest.raises(InvocationError, match="failed 4 times in a row"):  # max_retries = 3
        make_trainer(_cfg(tmp_path), backend=ScriptedBackend(fail_train=True)).run()


@pytest.mark.integration
def test_evaluation_runs_while_training_stays_in_flight(tmp_path):
    backend = ScriptedBackend()
    summary = make_trainer(_cfg(tmp_path, max_rounds=4, eval_every=2, algo="impala"), backend=backend).run()
    rows = read_metrics(tmp_path / "run")
    assert [bool(r["eval_return_mean"]) for r in rows] == [False, True, False, True]
    assert summary["final_eval_return"] == float(rows[-1]["eval_return_mean"]) > 0
    assert backend.in_flight == 0  # the last update cancelled what was still in flight
    evals = [r for r in backend.submitted if r.kind == "eval"]
    assert len(evals) == 4 and all(r.seed == invocation_seed(5, int(r.id[1]), int(r.id[-1]), 1)
                                   for r in evals)


@pytest.mark.integration
@pytest.mark.parametrize("scaler", [s for s in SCALERS if s != "auto"])  # auto models a synchronous round only
def test_every_scaler_sets_the_invocations_in_flight(tmp_path, scaler):
    backend = ScriptedBackend()
    cfg = _cfg(tmp_path, scaler=scaler, n_min=2, n_max=6, initial_actors=4, max_rounds=3, async_fragments=None,
               lanczos_iterations=4, detector_samples=64)
    make_trainer(cfg, backend=backend).run()
    rows = read_metrics(tmp_path / "run")
    assert len(rows) == 3
    for row in rows:
        n = int(row["n_actors"])
        assert (2 <= n <= 6) or (scaler == "fixed" and n == 4)
        assert int(row["fragments"]) >= max(1, n // 2)  # k defaults to half of those in flight
    assert backend.max_in_flight <= max(int(r["n_actors"]) for r in rows)


def test_resume_keeps_the_per_slot_call_counters(tmp_path):
    make_trainer(_cfg(tmp_path, max_rounds=2), backend=ScriptedBackend()).run()
    backend = ScriptedBackend()
    trainer = make_trainer(_cfg(tmp_path, max_rounds=3), resume=True, backend=backend)
    assert trainer.round == 2 and sum(trainer.sampler.slot_calls.values()) >= 4
    before = dict(trainer.sampler.slot_calls)
    trainer.run()
    first = next(r for r in backend.submitted if r.kind == "train")
    slot = int(first.id.rsplit("-", 1)[1])
    assert first.id == f"r{before[slot] + 1}-train-{slot}"  # no seed of the first run is reused


@pytest.mark.slow
def test_appo_solves_cartpole(tmp_path):
    # asynchronous runs depend on arrival order, so steps to solve vary (62k-182k seen): a generous budget
    cfg = TrainConfig(env_id="CartPole-v1", algo="appo", target_return=475, total_timesteps=500_000, seed=1,
                      progress=False, tensorboard=False, run_dir=str(tmp_path / "run"))
    summary = make_trainer(cfg).run()
    assert summary["best_eval_return"] >= 475, summary
    assert summary["final_eval_return"] >= 475, summary
    rows = read_metrics(tmp_path / "run")
    lags = np.array([float(r["policy_lag_mean"]) for r in rows])
    assert lags.max() >= 1  # it really ran off-policy: some fragments were a version or more behind
    print(json.dumps({k: summary[k] for k in ("rounds", "env_steps", "wall_s", "final_eval_return")}))


def test_algo_from_the_cli_and_yaml(tmp_path):
    from minionsrl import cli, config

    args = cli.build_parser().parse_args(["train", "--algo", "impala", "--async-fragments", "3",
                                          "--vtrace-rho-bar", "2"])
    cfg, _ = cli.train_config(args)
    assert (cfg.learner.algo, cfg.learner.async_fragments, cfg.learner.vtrace_rho_bar) == ("impala", 3, 2.0)
    resolved = config.resolve(cfg, "classic")
    assert resolved.learner.update_epochs == 1  # IMPALA: one pass over each learner batch
    assert config.resolve(config.build({"algo": "appo"}), "classic").learner.update_epochs == 4
    path = tmp_path / "c.yaml"
    path.write_text("algo: appo\nasync-fragments: 2\n")
    assert config.build(config.load_yaml(path)).learner.algo == "appo"
    path.write_text("algo: a3c\n")
    with pytest.raises(ConfigError, match="algo: 'a3c' is not one of ppo, appo, impala"):
        config.validate(config.build(config.load_yaml(path)))
    assert cli.main(["train", "--config", str(path)]) == 2


def _adam_steps(trainer) -> int:
    """The SGD steps the learner has taken: the step count in its optimiser's (optax Adam) state."""
    return int(optax.tree_utils.tree_get(trainer.learner.engine.opt_state, "count"))


@pytest.mark.parametrize("minibatch, steps_per_update", [(128, 1), (32, 2)])
def test_impala_takes_one_step_per_group_of_whole_fragments(tmp_path, minibatch, steps_per_update):
    # k = 2 fragments of T = 32 per update: groups of minibatch // T fragments, one SGD step each
    trainer = make_trainer(_cfg(tmp_path, algo="impala", minibatch_size=minibatch, max_rounds=3),
                           backend=ScriptedBackend())
    trainer.run()
    assert _adam_steps(trainer) == 3 * steps_per_update


def test_impala_epochs_are_passes_not_squared(tmp_path):
    """update_epochs passes over the fragments, one step per group each (was update_epochs² steps per group)."""
    trainer = make_trainer(_cfg(tmp_path, algo="impala", minibatch_size=32, update_epochs=3, max_rounds=2),
                           backend=ScriptedBackend())
    trainer.run()
    assert _adam_steps(trainer) == 2 * 3 * 2  # 2 updates x 3 passes x 2 groups of one fragment (k = 2)


def test_a_round_deadline_is_refused_for_asynchronous_learners():
    from minionsrl import config

    with pytest.raises(ConfigError, match="round_deadline_s: appo has no round barrier"):
        config.validate(config.build({"algo": "appo", "round_deadline_s": 5.0, "max_rounds": 1}))
    config.validate(config.build({"algo": "ppo", "round_deadline_s": 5.0, "max_rounds": 1}))


def test_injected_faults_are_retried_with_the_same_seed(tmp_path):
    backend = ScriptedBackend()
    make_trainer(_cfg(tmp_path, max_rounds=4, fault_raise=0.3, fault_seed=3), backend=backend).run()
    with open(tmp_path / "run" / "invocations.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    failed = [r for r in rows if r["status"] == "failed"]
    assert failed and all(r["fault"] == "raise" for r in failed)
    retried = [r for r in rows if int(r["attempt"]) > 0]
    assert retried and all(any(f["seed"] == r["seed"] and f["slot"] == r["slot"] for f in failed) for r in retried)
    assert len(read_metrics(tmp_path / "run")) == 4
