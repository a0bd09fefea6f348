"""The same training on Ray (the ``ray`` extra): without ``ray_address`` a private local cluster is started and
stopped with the run; ``ray_address="HEAD_IP:6379"`` joins an existing one. Same seed, same actors: the same
learning as on the local backend.

    python examples/ray_run.py
"""

from minionsrl import TrainConfig, train

summary = train(TrainConfig(env_id="CartPole-v1", backend="ray", ray_num_cpus=2, actors=4, max_rounds=4,
                            run_dir="runs/examples/ray", progress=False, tensorboard=False), plots=False)
print("ray:", summary["env_steps"], "steps,", f"final return {summary['final_eval_return']:.1f}")
