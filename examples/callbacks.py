"""A callback that watches the training (SB3's BaseCallback, small) and stops the run, then a resume that keeps
the learning-rate schedule.

    python examples/callbacks.py
"""

import minionsrl
from minionsrl import Callback, TrainConfig, train


class StopWhenGood(Callback):
    """Every 3 rounds, evaluate the policy as it stands; stop once it reaches ``goal``."""

    def __init__(self, goal: float) -> None:
        self.goal = goal

    def on_round(self, row, trainer):
        if row.round % 3:  # not trainer.round: a row whose evaluation runs beside the next round comes after it
            return True
        mean, _ = minionsrl.evaluate(minionsrl.current_policy(trainer), "CartPole-v1", n_episodes=3)
        print(f"after round {trainer.round} ({trainer.env_steps} steps): return {mean:.0f}")  # the policy now
        return mean < self.goal  # False stops the run


cfg = TrainConfig(env_id="CartPole-v1", actors=4, total_timesteps=20_000, run_dir="runs/examples/callbacks",
                  progress=False, tensorboard=False)
summary = train(cfg, callback=StopWhenGood(150), plots=False)
print("stopped by", summary["stopped_by"], "at round", summary["rounds"])
# continue the same run with a larger step limit: the learning rate goes on from where it stood
more = train(TrainConfig(**{**cfg.to_dict(), "total_timesteps": 25_000, "max_rounds": summary["rounds"] + 2}),
             resume=True, plots=False)
print("resumed to round", more["rounds"])
