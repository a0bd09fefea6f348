"""Train a custom env named as ``module:Class``, then evaluate the trained policy.

    python examples/custom_env.py

``my_envs.py`` sits beside this script; the learner hands its folder to the rollout workers, so nothing needs
setting (elsewhere: PYTHONPATH, or install the module where the functions run).
"""

import minionsrl
from minionsrl import TrainConfig, train

summary = train(TrainConfig(env_id="my_envs:Corridor", env_kwargs={"length": 8}, actors=4, max_rounds=15,
                            eval_every=5, target_return=0.9, run_dir="runs/examples/corridor", progress=False),
                plots=False)
print("stopped by", summary["stopped_by"], "after", summary["env_steps"], "steps")
mean, std = minionsrl.evaluate(minionsrl.load_policy("runs/examples/corridor", which="best"), n_episodes=5)
print(f"best policy: {mean:.2f} ± {std:.2f}")

# the same env through the id the module registers (Gymnasium's "module:Env-v0" form)
train(TrainConfig(env_id="my_envs:Corridor-v0", actors=2, max_rounds=2, run_dir="runs/examples/corridor-v0",
                  progress=False), plots=False)
