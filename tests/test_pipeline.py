"""The pipelined round (``--pipeline``): the next round's functions sample with the policy one update older while
the learner updates; the lag is logged, a resumed run sends the same wave again, and the ledger waits for a wave
only beyond its head start."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from minionsrl.backends.base import InvocationRecord
from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig, validate
from minionsrl.cost import CostLedger, RoundTimes, load_prices
from minionsrl.deployments import DEPLOYMENTS
from minionsrl.errors import ConfigError
from minionsrl.loop import checkpoint
from minionsrl.loop.metrics import LEARNING_COLUMNS, read_metrics, read_rows
from minionsrl.loop.sampler import PipelinedSampler, SyncSampler


def _cfg(run_dir: Path, **overrides) -> TrainConfig:
    return TrainConfig(**{"env_id": "CartPole-v1", "seed": 3, "max_rounds": 8, "actors": 3, "fragment_length": 64,
                          "eval_every": 3, "eval_episodes": 2, "pipeline": True, "progress": False,
                          "tensorboard": False, "run_dir": str(run_dir), **overrides})


def _learning(run_dir: Path) -> list[dict[str, str]]:
    return [{k: row[k] for k in LEARNING_COLUMNS} for row in read_metrics(run_dir)]


@pytest.mark.integration
def test_a_pipelined_round_samples_with_the_policy_one_update_older(tmp_path):
    summary = make_trainer(_cfg(tmp_path / "run")).run()
    rows = read_metrics(tmp_path / "run")
    assert summary["rounds"] == 8 and [int(r["round"]) for r in rows] == list(range(1, 9))
    assert rows[0]["policy_lag_max"] == ""  # round 1 is sent when it begins
    assert {r["policy_lag_max"] for r in rows[1:]} == {"1"}
    invocations = read_rows(tmp_path / "run" / "invocations.csv")
    train = [r for r in invocations if r["kind"] == "train"]
    assert len(train) == 8 * 3 and {r["status"] for r in train} == {"ok"}  # the last round sent nothing ahead
    evals = [r for r in rows if r["eval_return_mean"]]
    assert [int(r["round"]) for r in evals] == [3, 6, 8]  # held evaluations ran beside the next round


@pytest.mark.integration
def test_only_a_pipelined_run_has_a_sampler_that_sends_ahead(tmp_path):
    for pipeline, kind in ((True, PipelinedSampler), (False, SyncSampler)):
        trainer = make_trainer(_cfg(tmp_path / str(pipeline), pipeline=pipeline))
        try:
            assert type(trainer.sampler) is kind and trainer.sampler.defers_evaluation is pipeline
            assert hasattr(trainer.sampler, "ahead") is pipeline  # a plain round keeps no send-ahead state
        finally:
            trainer.close()


@pytest.mark.integration
def test_pipelined_learning_differs_from_the_synchronous_round(tmp_path):
    make_trainer(_cfg(tmp_path / "pipe", max_rounds=3)).run()
    make_trainer(_cfg(tmp_path / "sync", max_rounds=3, pipeline=False)).run()
    pipe, sync = _learning(tmp_path / "pipe"), _learning(tmp_path / "sync")
    # the same first round, nothing sent ahead of it: anchored at the learner's own log-probabilities, which equal
    # the functions' up to float rounding (NumPy there, JAX here)
    for name in ("policy_loss", "value_loss", "approx_kl", "entropy"):
        assert float(pipe[0][name]) == pytest.approx(float(sync[0][name]), rel=1e-4), name
    assert pipe[0]["train_return_mean"] == sync[0]["train_return_mean"]
    assert pipe[1]["train_return_mean"] != sync[1]["train_return_mean"]  # round 2 sampled with the initial policy


@pytest.mark.integration
def test_a_resumed_pipelined_run_sends_the_same_wave_again(tmp_path):
    straight = tmp_path / "straight"
    make_trainer(_cfg(straight)).run()

    cut = tmp_path / "cut"
    trainer = make_trainer(_cfg(cut))
    for _ in range(4):  # round 4's checkpoint holds round 5's wave, in flight
        trainer.run_round()
    assert trainer.sampler.ahead is not None and trainer.sampler.ahead.round == 5
    trainer.close()  # stopped with the wave in flight: it is lost, as it would be with the process
    saved = checkpoint.load(cut / "checkpoints")
    assert saved["sent_ahead"]["round"] == 5 and saved["sent_ahead"]["version"] == 3
    make_trainer(_cfg(cut), resume=True).run()

    assert _learning(cut) == _learning(straight)
    assert [r["policy_lag_max"] for r in read_metrics(cut)] == [r["policy_lag_max"] for r in read_metrics(straight)]
    ours, theirs = (checkpoint.load(d / "checkpoints") for d in (cut, straight))
    for name, value in theirs["policy"].items():
        np.testing.assert_array_equal(ours["policy"][name], value)


@pytest.mark.integration
def test_a_wave_that_does_not_fit_the_policy_is_refused_on_resume(tmp_path):
    run_dir = tmp_path / "run"
    trainer = make_trainer(_cfg(run_dir))
    trainer.run_round()
    trainer.close()
    state = checkpoint.load(run_dir / "checkpoints")
    name = next(iter(state["sent_ahead"]["params"]))
    state["sent_ahead"]["params"][name] = np.full_like(state["sent_ahead"]["params"][name], np.nan)
    checkpoint.save(run_dir / "checkpoints", state)
    with pytest.raises(ConfigError, match=r"pipelined wave's policy.*finite"):
        make_trainer(_cfg(run_dir), resume=True)


def test_pipeline_is_for_ppo(tmp_path):
    with pytest.raises(ConfigError, match="pipeline: appo"):
        validate(_cfg(tmp_path, algo="appo"))


def _record(run_s: float) -> InvocationRecord:
    return InvocationRecord(invocation_id="x", kind="train", status="ok", init_s=0.0, run_s=run_s, cpu_s=run_s)


def test_the_ledger_waits_for_a_wave_sent_ahead_only_beyond_its_head_start():
    ledger = CostLedger(load_prices(), deployment=DEPLOYMENTS["direct"])
    chains = [[_record(0.5)], [_record(0.3)]]
    synchronous = ledger.projected_s(RoundTimes(2.0, 0.2, chains))
    stage = synchronous - 0.2
    assert ledger.projected_s(RoundTimes(2.0, 0.2, chains, head_start_s=0.1)) == pytest.approx(0.2 + stage - 0.1)
    assert ledger.projected_s(RoundTimes(2.0, 0.2, chains, head_start_s=10.0)) == pytest.approx(0.2)
    # an evaluation sent at the round's start had no head start: the round waits for it whole
    beside = ledger.projected_s(RoundTimes(2.0, 0.2, chains, head_start_s=10.0, beside=[[_record(0.4)]]))
    assert beside == pytest.approx(0.2 + ledger.projected_s(RoundTimes(0.0, 0.0, [[_record(0.4)]])))


def test_a_pipelined_learner_anchors_the_clip_at_the_policy_it_updates(tmp_path):
    """Its batch's log-probabilities are the learner's own (before the update) and each row weighs
    π_anchor/π_behaviour; the synchronous learner keeps the behaviour policy's."""
    from minionsrl.learner.engine import score

    trainer = make_trainer(_cfg(tmp_path / "run", max_rounds=3))
    try:
        trainer.run_round()
        sampled = trainer.sampler.sample(2, 3)  # round 2's wave, sent ahead with the initial policy
        assert trainer.learner.config.pipeline
        batch = trainer.learner._batch(sampled.fragments)
        behaviour = np.concatenate([f.logprobs for f in sampled.fragments])
        anchor, _ = score(trainer.learner.arch, trainer.learner.engine.weights, batch.obs, batch.actions)
        np.testing.assert_array_equal(batch.logprobs, anchor)
        np.testing.assert_allclose(batch.behaviour_weights, np.exp(anchor.astype(np.float64) - behaviour), rtol=1e-6)
        assert not np.allclose(batch.behaviour_weights, 1.0)  # one update apart
        trainer.learner.config = dataclasses.replace(trainer.learner.config, pipeline=False)
        np.testing.assert_array_equal(trainer.learner._batch(sampled.fragments).logprobs, behaviour)
    finally:
        trainer.close()
