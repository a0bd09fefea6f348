"""The round core (minionsrl/loop/round.py): one function of the run's frozen state, which tells observers what it
leaves for the disk and writes nothing itself; a resumed run's state equals the uninterrupted run's."""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig
from minionsrl.cost import Totals
from minionsrl.errors import Diverged
from minionsrl.loop.retry import Outcome
from minionsrl.loop.round import Observer, play_round
from minionsrl.loop.state import RunState
from minionsrl.stats import RoundStats


def _cfg(run_dir: Path, **overrides: Any) -> TrainConfig:
    return TrainConfig(**{"env_id": "CartPole-v1", "actors": 2, "fragment_length": 64, "eval_every": 2,
                          "eval_episodes": 2, "max_rounds": 6, "progress": False, "tensorboard": False,
                          "run_dir": str(run_dir), **overrides})


class Recorder(Observer):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def row(self, stats: RoundStats, outcomes: list[Outcome]) -> None:
        self.events.append(("row", stats.round, stats.eval_return_mean, len(outcomes)))

    def attempts(self, round_idx: int, outcomes: list[Outcome]) -> None:
        self.events.append(("attempts", round_idx))

    def best(self, policy: dict[str, Any]) -> None:
        self.events.append(("best",))

    def before_update(self) -> None:
        self.events.append(("update",))


def test_the_round_is_one_function_of_about_a_screen():
    assert len(inspect.getsource(play_round).splitlines()) <= 80


def test_a_round_returns_a_new_state_and_a_held_row_reaches_its_observers_a_round_later(tmp_path):
    """With the evaluation beside the next round's functions (the default), round 2's row waits for it: round 2
    tells only its attempts, round 3 tells round 2's row (with the return) before its own; the input state is
    never changed, and nothing is written to the run dir by the round itself."""
    trainer = make_trainer(_cfg(tmp_path / "run"))
    try:
        s0 = trainer.state
        recorder = Recorder()
        played = [play_round(s0, trainer.parts, recorder)]
        assert s0 == trainer.state and s0.round == 0 and played[0].state.round == 1  # frozen: a new state
        for _ in range(2):
            played.append(play_round(played[-1].state, trainer.parts, recorder))
    finally:
        trainer.close()
    r1, r2, r3 = played
    assert [row.round for row in r1.rows] == [1] and r2.rows == () and [row.round for row in r3.rows] == [2, 3]
    assert r2.state.pending_eval == (2, 2, 2) and r3.state.pending_eval is None
    assert r3.rows[0].eval_return_mean is not None and r3.rows[0].eval_return_mean == r3.state.last_eval
    assert r3.state.best_round == 2 and r3.state.env_steps == 3 * 128
    kinds = [e[0] for e in recorder.events]
    assert kinds == ["update", "row", "update", "attempts", "best", "row", "update", "row"], recorder.events
    assert recorder.events[5][:3] == ("row", 2, r3.rows[0].eval_return_mean)
    assert not (tmp_path / "run" / "checkpoints" / "latest.safetensors").exists()  # the trainer checkpoints, not it


def test_a_round_that_fails_keeps_the_row_it_had_completed(tmp_path):
    """Round 3's update diverges after its collect completed round 2's held row: the observers have that row (with
    its evaluation), and the error names round 3."""
    trainer = make_trainer(_cfg(tmp_path / "run"))
    recorder = Recorder()
    try:
        s = play_round(play_round(trainer.state, trainer.parts, recorder).state, trainer.parts, recorder).state

        def diverge(*args: Any, **kwargs: Any) -> Any:
            raise Diverged("the policy loss is nan")

        trainer.parts.learner.learn = diverge  # type: ignore[method-assign]
        with pytest.raises(Diverged, match=r"^round 3: the policy loss is nan"):
            play_round(s, trainer.parts, recorder)
    finally:
        trainer.close()
    rows = [e for e in recorder.events if e[0] == "row"]
    assert [e[1] for e in rows] == [1, 2] and rows[-1][2] is not None  # round 2's row, with its evaluation


def _final(run_dir: Path, resume: bool = False, **overrides: Any) -> tuple[RunState, dict[str, Any]]:
    trainer = make_trainer(_cfg(run_dir, **overrides), resume=resume)
    trainer.run()
    return trainer.state, trainer.learner.state_dict()


def _learning(s: RunState) -> RunState:
    """The state less what timing decides: clocks, dollars, projected seconds (and the last row, which has them)."""
    assert s.remaining is not None and s.remaining.spent is not None
    return replace(s, started=0.0, wall_offset=0.0, last_round=None, recent_costs=(), recent_projected=(),
                   remaining=replace(s.remaining, spent=s.remaining.spent[:1]), billed=Totals(
                       actor_hosts=s.billed.actor_hosts))


@pytest.mark.integration
def test_a_resumed_run_ends_in_the_state_of_the_uninterrupted_one(tmp_path):
    straight, weights = _final(tmp_path / "straight")
    _final(tmp_path / "resumed", max_rounds=4)  # round 4 evaluated now, as the uninterrupted run's beside round 5
    resumed, resumed_weights = _final(tmp_path / "resumed", resume=True)
    assert _learning(resumed) == _learning(straight) and straight.round == 6
    assert straight.last_round is not None and resumed.last_round is not None
    assert resumed.last_round.env_steps == straight.last_round.env_steps
    arrays = dict(_leaves(weights))
    assert len(arrays) >= 10, sorted(arrays)  # the weights, the optimiser's moments, the normaliser
    assert arrays.keys() == dict(_leaves(resumed_weights)).keys()
    for key, value in _leaves(resumed_weights):
        np.testing.assert_array_equal(value, arrays[key], err_msg=key)


def _leaves(tree: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(tree, dict):
        return [leaf for k, v in tree.items() for leaf in _leaves(v, f"{path}/{k}")]
    if isinstance(tree, list | tuple):
        return [leaf for i, v in enumerate(tree) for leaf in _leaves(v, f"{path}/{i}")]
    return [(path, np.asarray(tree))]


@pytest.mark.integration
def test_round_2_runs_on_the_learner_thread_in_few_modules(tmp_path):
    """The package's modules that execute on the learner's thread during round 2 of a CartPole run (a profiler hook
    set from a callback, issue 57's measure). The collect phase is most of them: the synchronous sampler's event
    loop (requests, replies decoded and checked, retries) runs on this thread. A guard against a round spreading
    further; issue 57 asks for 15 (30 when it was filed)."""
    import os
    import sys
    import threading

    import minionsrl
    from minionsrl.experiments.training import run_trainer

    root, seen = os.path.dirname(minionsrl.__file__), set()
    learner_thread = threading.get_ident()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(root):
            seen.add(os.path.relpath(frame.f_code.co_filename, root))

    def on_round(row: RoundStats) -> bool | None:
        assert threading.get_ident() == learner_thread
        sys.setprofile(profile if row.round == 1 else None)
        return row.round < 2

    try:
        run_trainer(make_trainer(_cfg(tmp_path / "run", actors=4, eval_every=5)), on_round=on_round, plots=False)
    finally:
        sys.setprofile(None)
    assert "loop/round.py" in seen and "learner/learners.py" in seen, sorted(seen)
    assert len(seen) <= 33, sorted(seen)
