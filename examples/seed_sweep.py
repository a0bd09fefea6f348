"""A seed sweep from Python: one TrainConfig, three seeds, the mean and spread of the final returns and costs.

    python examples/seed_sweep.py
"""

import statistics

from minionsrl import TrainConfig, train

base = TrainConfig(env_id="CartPole-v1", actors=4, max_rounds=8, eval_every=4, progress=False, tensorboard=False)
summaries = [train(base.replace(seed=seed, run_dir=f"runs/examples/sweep/seed{seed}"), plots=False)
             for seed in range(3)]
returns = [s["final_eval_return"] for s in summaries]
dollars = [s["cost_usd"]["serverless"] for s in summaries]
print(f"final return {statistics.mean(returns):.1f} ± {statistics.stdev(returns):.1f} over {len(returns)} seeds")
print(f"serverless bill ${statistics.mean(dollars):.6f} a run (servers: "
      f"${statistics.mean(s['cost_usd']['server'] for s in summaries):.6f})")
