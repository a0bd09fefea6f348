"""A pipelined Hopper-v5 run, measured per round: how far the behaviour policy (one update old) is from the anchor
(the policy being updated), through the decoupled objective's weights pi_anchor/pi_behaviour; one JSON line a round
(docs/results/pipeline-hopper.md, 2026-11-28).

    .venv/bin/python docs/archive/bench/pipeline_lag.py SEED STEPS OUT.jsonl RUN_DIR
"""

import json
import sys

import numpy as np

from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig

seed, steps, out, run_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
trainer = make_trainer(TrainConfig(env_id="Hopper-v5", actors=8, total_timesteps=steps, eval_every=0, eval_episodes=1,
                                   seed=seed, pipeline=True, tensorboard=False, run_dir=run_dir))
batch_of, rows = trainer.learner._batch, []


def batch(fragments):
    b = batch_of(fragments)
    if b.behaviour_weights is not None:
        w = b.behaviour_weights.astype(np.float64)
        rows.append({"round": trainer.round, "kl_behaviour_anchor": float(np.mean(-np.log(w))),  # E_b[log b - log a]
                     "w_std": float(w.std()), "w_out_of_clip": float(np.mean((w < 0.8) | (w > 1.2))),
                     "ess_fraction": float(w.sum() ** 2 / (w ** 2).sum() / len(w))})
    return b


def on_round(stats):
    if rows:
        rows[-1].update(approx_kl_update=stats.approx_kl, clipfrac=stats.clipfrac, train_return=stats.train_return_mean)
        with open(out, "a") as f:
            f.write(json.dumps(rows[-1]) + "\n")


trainer.learner._batch = batch
trainer.run(on_round)
