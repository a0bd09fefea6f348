"""The MinionsRL learned scheduler (DESIGN §2.2): NumPy inference, artefacts, seeded sampling, JAX training.

Training jobs here run on a stand-in trainer (the scaler is consulted once per round as in a real run), so
these tests need neither Gymnasium nor the learner; ``test_experiments`` trains one on real CartPole jobs.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from typing import Any, ClassVar

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.experiments import scheduler as sched
from minionsrl.scaling.minions import (
    FEATURES,
    FEATURES_V1,
    HORIZON,
    Episode,
    MinionsScaler,
    SchedulerAgent,
    SchedulerHyper,
    Transition,
    load_agent,
    save_agent,
)
from minionsrl.stats import RoundStats

SHIPPED_KEYS = sorted(f"{tower}.{i}.{kind}" for tower in ("actor", "critic") for i in (0, 2, 4)
                      for kind in ("weight", "bias"))


def _row(r: int, n: int, **changed: Any) -> RoundStats:
    """A round's stats as the trainer makes them after round ``r`` with ``n`` actors (made up, deterministic)."""
    return RoundStats.from_row({
        "round": r, "n_actors": n, "cum_cost_serverless_usd": 0.002 * r, "learn_s": 0.3, "sample_s": 0.4 + 0.02 * n,
            "round_s": 0.9, "projected_round_s": 0.5 + 0.05 * n, "cost_serverless_usd": 0.0005 * n,
            "eval_return_mean": 40.0 * r if r % 2 == 0 else None, "policy_loss": -0.02, "value_loss": 30.0 / r,
            "approx_kl": 0.004 * r, "gns": 50.0 * r, **changed}, complete=False)


def _drive(scaler: MinionsScaler, first: int, last: int, row: RoundStats | None = None) -> list[int]:
    """The scaler's picks for rounds ``first..last``, each round's row following from its pick."""
    picks = []
    for r in range(first, last + 1):
        picks.append(scaler.next_actors(row))
        row = _row(r, picks[-1])
    return picks


def test_scheduler_inference_imports_neither_jax_nor_torch() -> None:
    code = ("import sys, minionsrl.scaling.minions as m; agent, _ = m.load_agent(None); "
            "m.MinionsScaler(agent, 1, 64, 475.0, explore=True).next_actors(None); "
            "print(sorted(k for k in ('jax', 'jaxlib', 'optax', 'torch') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_the_shipped_scheduler_loads_and_acts_as_trained() -> None:
    agent, meta = load_agent(None)  # the scheduler shipped with the package: the first eight features
    assert meta["env_id"] == "CartPole-v1" and agent.n_max == meta["n_max"] == 64
    assert agent.features == FEATURES_V1 and "gns" not in agent.features
    json.dumps(meta)
    scaler = MinionsScaler(agent, 1, 64, target_return=float(meta["target_return"]), horizon=meta["max_rounds"])
    assert scaler.needs == frozenset()  # it does not read the noise scale: no detector runs for it
    picks = _drive(scaler, 1, 10)
    assert all(1 <= n <= 64 for n in picks) and 0.0 < scaler.score <= 1.0
    # the greedy choices torch made with these weights before the port (reference states: a seeded normal draw)
    states = np.random.default_rng(0).normal(size=(19, 8)).astype(np.float32)
    assert (agent.log_probs(np.zeros(8, np.float32)).argmax() + 1) == 22
    assert list(agent.log_probs(states).argmax(axis=1) + 1) == [22, 36, 22, 10, 22, 22, 22, 22, 42, 22, 60, 22, 36, 36,
                                                                22, 37, 53, 22, 36]
    assert np.allclose(np.exp(agent.log_probs(states)).sum(axis=1), 1.0)
    clipped = MinionsScaler(agent, 2, 8, target_return=475.0)
    assert all(2 <= n <= 8 for n in _drive(clipped, 1, 5))


def test_artefact_round_trip_naming_and_bad_files(tmp_path) -> None:
    agent = SchedulerAgent(n_max=8, seed=3)
    assert agent.features == FEATURES and agent.params["actor.2.weight"].shape == (8, 64)  # networks' layout
    assert all((agent.params[k] == v).all() for k, v in SchedulerAgent(8, seed=3).params.items())  # seeded
    assert not (SchedulerAgent(8, seed=4).params["actor.0.weight"] == agent.params["actor.0.weight"]).all()
    save_agent(agent, tmp_path / "s.safetensors", {"target_return": 100.0})
    with safe_open(str(tmp_path / "s.safetensors"), framework="numpy") as fh:
        assert sorted(fh.keys()) == SHIPPED_KEYS  # named as the shipped artefact (torch Sequential indices)
    loaded, meta = load_agent(tmp_path / "s.safetensors")
    assert meta["n_max"] == 8 and meta["target_return"] == 100.0 and meta["features"] == list(FEATURES)
    assert agent.params.keys() == loaded.params.keys()
    assert all((agent.params[k] == loaded.params[k]).all() for k in agent.params)
    # weights named as minionsrl.learner.networks names them load too
    save_file(agent.params, str(tmp_path / "n.safetensors"), metadata={"minionsrl": json.dumps(meta)})
    state = np.linspace(-1, 1, len(FEATURES), dtype=np.float32)
    assert (load_agent(tmp_path / "n.safetensors")[0].logits(state) == agent.logits(state)).all()
    scaler = MinionsScaler(loaded, 2, 8, target_return=100.0, horizon=4)
    n = scaler.next_actors(None)
    assert 2 <= n <= 8 and n == scaler.next_actors(None)  # greedy: the same state gives the same choice
    assert scaler.needs == frozenset({"gns"})
    with pytest.raises(ConfigError, match="does not exist"):
        load_agent(tmp_path / "missing.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a scheduler")
    with pytest.raises(ConfigError, match="not a minionsrl scheduler"):
        load_agent(tmp_path / "junk.safetensors")
    save_file(agent.state_dict(), str(tmp_path / "v1.safetensors"),  # 9-feature weights, 8 features declared
              metadata={"minionsrl": json.dumps({**meta, "features": list(FEATURES_V1)})})
    with pytest.raises(ConfigError, match="not a minionsrl scheduler"):
        load_agent(tmp_path / "v1.safetensors")
    save_file({k: v for k, v in agent.state_dict().items() if k != "critic.4.bias"}, str(tmp_path / "cut.safetensors"),
              metadata={"minionsrl": json.dumps(meta)})
    with pytest.raises(ConfigError, match="not a minionsrl scheduler"):
        load_agent(tmp_path / "cut.safetensors")


def test_sampling_is_seeded_and_a_restored_state_dict_continues_the_sequence(tmp_path) -> None:
    agent, _ = load_agent(None)

    def scaler(seed: int) -> MinionsScaler:
        return MinionsScaler(agent, 1, 64, target_return=475.0, horizon=40, explore=True, seed=seed)

    whole = _drive(scaler(7), 1, 12)
    assert whole == _drive(scaler(7), 1, 12) and whole != _drive(scaler(8), 1, 12)
    assert all(1 <= n <= 64 for n in whole) and len(set(whole)) > 1  # it samples: not always the greedy 22
    first = scaler(7)
    assert _drive(first, 1, 6) == whole[:6]
    assert first.episode.transitions[-1].logprob == pytest.approx(np.log(first.score))
    state = json.loads(json.dumps(first.state_dict()))  # plain JSON-able data
    assert state == first.state_dict()
    from minionsrl.loop import checkpoint

    checkpoint.save(tmp_path, {"scaler": first.state_dict()})  # as the trainer checkpoints it
    resumed = scaler(99)
    resumed.load_state_dict(checkpoint.load(tmp_path)["scaler"])
    assert resumed.last_eval == first.last_eval == 40.0 * 4 and resumed.score == first.score
    assert _drive(resumed, 7, 12, row=_row(6, whole[5])) == whole[6:]
    # rewards: each transition gets the round it chose, the last one's after the job (train_scheduler)
    t = first.episode.transitions
    assert len(t) == 6 and t[0].reward == pytest.approx(-0.1 * _row(1, whole[0]).projected_round_s)
    assert t[-1].reward == 0.0 and [x.action + 1 for x in t] == whole[:6]


def test_a_resumed_training_job_keeps_the_transitions_it_sampled_before_the_checkpoint(tmp_path) -> None:
    """The job's trajectory so far is in the scaler's state (as plain data): the scheduler's update after a resumed
    job learns from every round of it, not only from those after the resume."""
    from minionsrl.loop import checkpoint

    agent, _ = load_agent(None)

    def scaler() -> MinionsScaler:
        return MinionsScaler(agent, 1, 64, target_return=475.0, horizon=40, explore=True, seed=7)

    whole = scaler()
    _drive(whole, 1, 12)
    first = scaler()
    _drive(first, 1, 6)
    state = first.state_dict()
    assert json.loads(json.dumps(state)) == state
    checkpoint.save(tmp_path, {"scaler": state})
    resumed = scaler()
    resumed.load_state_dict(checkpoint.load(tmp_path)["scaler"])
    _drive(resumed, 7, 12, row=_row(6, first.episode.transitions[-1].action + 1))
    assert len(resumed.episode.transitions) == len(whole.episode.transitions) == 12
    for got, expected in zip(resumed.episode.transitions, whole.episode.transitions, strict=True):
        np.testing.assert_array_equal(got.state, expected.state)
        assert got.state.dtype == np.float32
        assert (got.action, got.logprob, got.reward) == (expected.action, expected.logprob, expected.reward)


def _episode(agent: SchedulerAgent, steps: int, seed: int = 1) -> Episode:
    rng = np.random.default_rng(seed)
    episode = Episode()
    for _ in range(steps):
        state = rng.normal(size=len(agent.features)).astype(np.float32)
        action = int(rng.integers(agent.n_max))
        logprob = float(agent.log_probs(state)[action])
        episode.transitions.append(Transition(state, action, logprob, -float(rng.random())))
    return episode


def test_ppo_update_changes_the_weights_and_ignores_the_padding() -> None:
    hyper = SchedulerHyper()
    agent = SchedulerAgent(8, seed=0)
    before = {k: v.copy() for k, v in agent.params.items()}
    episode = _episode(agent, 13)  # padded to 16 steps inside
    stats = sched.ppo_update(agent, sched.SchedulerOptimizer(agent, hyper), episode, hyper)
    g = 0.0
    for t in reversed(episode.transitions):
        g = t.reward + hyper.gamma * g
    assert stats["episode_return"] == pytest.approx(g)
    assert np.isfinite(stats["policy_loss"]) and stats["value_loss"] > 0
    assert all(not np.array_equal(before[k], agent.params[k]) for k in before)  # every layer learns
    assert all(v.dtype == np.float32 for v in agent.params.values())
    # the same update on the unpadded batch
    fresh = SchedulerAgent(8, seed=0)
    opt = sched.SchedulerOptimizer(fresh, hyper)
    steps = episode.transitions
    returns = np.array([sum(hyper.gamma**j * u.reward for j, u in enumerate(steps[i:])) for i in range(len(steps))],
                       dtype=np.float32)
    states = np.stack([t.state for t in steps])
    adv = returns - fresh.value(states)
    batch = {"states": states, "actions": np.array([t.action for t in steps], np.int32),
             "old_logp": np.array([t.logprob for t in steps], np.float32),
             "adv": ((adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)).astype(np.float32), "returns": returns,
             "mask": np.ones(len(steps), np.float32)}
    params, *_ = sched._update(opt.tx, hyper, fresh.params, opt.state, batch)
    assert all(np.allclose(np.asarray(params[k]), agent.params[k], atol=1e-6) for k in params)


class _StandInTrainer:
    """What ``train_scheduler`` needs of a trainer: a run that consults the scaler once per round."""

    seen: ClassVar[list[dict[str, np.ndarray]]] = []

    def __init__(self, cfg: TrainConfig, scaler: MinionsScaler) -> None:
        self.cfg, self.scaler = cfg, scaler
        self.seen.append({k: v.copy() for k, v in scaler.agent.params.items()})

    def run(self) -> dict[str, Any]:
        row, picks = None, []
        for r in range(1, self.cfg.run.max_rounds + 1):
            picks.append(self.scaler.next_actors(row))
            row = _row(r, picks[-1])
        self.last_round = row
        return {"best_eval_return": 40.0 * self.cfg.run.max_rounds, "rounds": self.cfg.run.max_rounds,
                "projected_cloud_s": sum(0.5 + 0.05 * n for n in picks),
                "cost_usd": {"serverless": sum(0.0005 * n for n in picks)}}


@pytest.mark.integration
def test_training_jobs_change_the_weights_and_a_cut_training_continues(tmp_path, monkeypatch) -> None:
    import minionsrl.build

    monkeypatch.setattr(minionsrl.build, "make_trainer", lambda cfg, scaler: _StandInTrainer(cfg, scaler))
    _StandInTrainer.seen = []
    cfg = TrainConfig(env_id="CartPole-v1", n_min=1, n_max=8, max_rounds=5, seed=3, progress=False,
                      tensorboard=False, run_dir=str(tmp_path / "unused"))
    out = sched.train_scheduler(cfg, jobs=2, target=500.0, out=tmp_path / "a.safetensors", n_max=8)
    curve = list(csv.DictReader(open(out.with_suffix(".curve.csv"))))  # noqa: SIM115
    assert [int(r["job"]) for r in curve] == [1, 2] and out.with_suffix(".curve.png").stat().st_size > 0
    assert all(r["reached"] == "False" and float(r["episode_return"]) < 0 for r in curve)
    assert all(1 <= float(r["mean_action"]) <= 8 for r in curve)
    initial = SchedulerAgent(8, seed=cfg.run.seed).params  # the first job's agent: fresh from the config's seed
    assert all((_StandInTrainer.seen[0][k] == v).all() for k, v in initial.items())
    two, meta = load_agent(out)
    assert meta["jobs"] == 2 and meta["hyper"] == dataclasses.asdict(SchedulerHyper())
    assert all(not np.array_equal(initial[k], two.params[k]) for k in initial)  # the jobs trained it
    assert all(not np.array_equal(_StandInTrainer.seen[1][k], two.params[k]) for k in initial)  # job 2 as well
    # the same seed trains the same scheduler
    again = load_agent(sched.train_scheduler(cfg, jobs=2, target=500.0, out=tmp_path / "b.safetensors", n_max=8))[0]
    assert all((again.params[k] == v).all() for k, v in two.params.items())
    # a training cut short goes on from its last saved agent
    _StandInTrainer.seen = []
    sched.train_scheduler(cfg, jobs=3, target=500.0, out=out, n_max=8)
    assert [int(r["job"]) for r in csv.DictReader(open(out.with_suffix(".curve.csv")))] == [1, 2, 3]  # noqa: SIM115
    assert len(_StandInTrainer.seen) == 1  # only job 3 ran, starting from the two-job agent
    assert all((_StandInTrainer.seen[0][k] == v).all() for k, v in two.params.items())
    three, meta = load_agent(out)
    assert meta["jobs"] == 3 and all(not np.array_equal(three.params[k], v) for k, v in two.params.items())


def test_a_missed_target_costs_its_shortfall_in_units_of_the_target() -> None:
    scaler = MinionsScaler(SchedulerAgent(8, seed=0), 1, 8, target_return=400.0, hyper=SchedulerHyper(miss_coef=2.0))
    assert scaler.miss_reward(300.0, 400.0) == pytest.approx(-0.5)  # a quarter of the target short, times 2
    assert scaler.miss_reward(400.0, 400.0) == 0.0 and scaler.miss_reward(900.0, 400.0) == 0.0


@pytest.mark.integration
def test_training_jobs_learn_on_one_compute_thread_as_a_run_does(tmp_path) -> None:
    """The agent's optimiser must not make JAX's CPU client before the jobs' learners set it up: with two XLA compute
    threads a job's wait for a CPU was counted twice and its learner's own seconds came out 0 under load."""
    code = """if True:
        import os, sys
        import minionsrl.build as build
        from minionsrl.config import TrainConfig
        from minionsrl.experiments import scheduler as sched

        class Stop(Exception):
            pass

        def trainer(cfg, scaler):
            import jax.numpy as jnp
            jnp.zeros(1).block_until_ready()
            names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
            print(names.count("tf_XLAEigen"))
            raise Stop

        build.make_trainer = trainer
        cfg = TrainConfig(env_id="CartPole-v1", n_min=1, n_max=8, max_rounds=2, progress=False, tensorboard=False,
                          run_dir=sys.argv[1])
        try:
            sched.train_scheduler(cfg, jobs=1, target=500.0, out=sys.argv[1] + "/s.safetensors", n_max=8)
        except Stop:
            pass
        """
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip() == "1"


def test_a_deployed_scheduler_reads_rounds_in_its_training_jobs_units(tmp_path) -> None:
    from minionsrl.build import make_scaler

    save_agent(SchedulerAgent(8, seed=0), tmp_path / "s.safetensors", {"target_return": 350.0, "max_rounds": 40})
    cfg = TrainConfig(scaler="minions", scheduler=str(tmp_path / "s.safetensors"), n_min=2, n_max=64, max_rounds=5000,
                      target_return=1000.0)
    scaler = make_scaler(cfg)
    assert isinstance(scaler, MinionsScaler) and scaler.horizon == 40 and scaler.return_scale == 1000.0
    assert scaler.state(_row(20, 4))[FEATURES.index("round")] == pytest.approx(0.5)  # round 20 of 40, not of 5000
    assert scaler.n_max == 8  # the agent's own actions bound the range


def test_the_return_features_are_in_units_of_the_targets_magnitude() -> None:
    """Training and a deployed run build the scaler alike: a negative target (Pendulum's) keeps the sign of the
    return, a target of 0 reads returns as they are (no division by zero), and the horizon defaults alike."""
    agent = SchedulerAgent(8, seed=0)
    at = FEATURES.index("eval_return")
    row = _row(2, 4, eval_return_mean=-400.0)
    assert MinionsScaler(agent, 1, 8, target_return=-200.0).state(row)[at] == pytest.approx(-2.0)
    assert MinionsScaler(agent, 1, 8, target_return=0.0).state(row)[at] == pytest.approx(-400.0)
    assert MinionsScaler(agent, 1, 8, target_return=1.0, horizon=None).horizon == HORIZON


def test_each_family_gets_its_shipped_scheduler() -> None:
    from minionsrl.build import make_scaler

    hopper, meta = load_agent(None, "mujoco")
    assert meta["env_id"] == "Hopper-v5" and hopper.features == FEATURES and meta["jobs"] >= 50
    assert load_agent(None, "atari")[1]["env_id"] == load_agent(None)[1]["env_id"] == "CartPole-v1"
    cfg = TrainConfig(scaler="minions", n_min=8, n_max=64, target_return=1000.0)
    mujoco = make_scaler(cfg, "mujoco")
    assert isinstance(mujoco, MinionsScaler) and mujoco.agent.features == FEATURES and mujoco.needs == {"gns"}
    assert make_scaler(cfg).agent.features == FEATURES_V1  # classic control: the CartPole one


def test_a_constant_batch_gets_the_scheduler_trained_under_one() -> None:
    from minionsrl.build import make_scaler

    batch, meta = load_agent(None, "mujoco", constant_batch=True)
    assert meta["env_id"] == "Hopper-v5" and meta["batch_size"] == 4096 and meta["jobs"] >= 50
    assert batch.features == FEATURES
    cfg = TrainConfig(scaler="minions", n_min=8, n_max=64, target_return=1000.0, train_batch_size=4096)
    assert make_scaler(cfg, "mujoco").agent.n_max == meta["n_max"]
    assert load_agent(None, "mujoco")[1].get("batch_size") is None  # T fixed: the other one
    assert load_agent(None, "classic", constant_batch=True)[1]["env_id"] == "CartPole-v1"  # none of its own
