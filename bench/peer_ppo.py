"""The peer of ``bench/hopper.py peer``: our own JAX PPO on EnvPool, in CleanRL's ``ppo_continuous_action.py`` recipe.

Written here (not CleanRL's code), after that recipe's published structure and defaults: a separate actor and
critic, each a 64-64 tanh MLP with orthogonal init (gain √2 in the hidden layers, 0.01 on the policy head, 1 on the
value head, zero biases) and a state-independent log-std starting at 0; observations normalised by a running
mean/std and clipped to ±10; rewards divided by the std of the discounted return and clipped to ±10; GAE; the
clipped surrogate with value clipping and per-minibatch advantage normalisation; entropy coefficient 0, value
coefficient 0.5; Adam (eps 1e-5) after a global-norm clip of 0.5; the learning rate annealed linearly to 0 over the
run. It imports only numpy, jax, optax and envpool (no minionsrl), so it is an independent peer.

Defaults are our ``mujoco`` preset at 8 actors × 512 steps ("equal work" with ``minionsrl train``): a batch of
8 envs × 512 steps, minibatches of 64 samples, 10 epochs, so the same batch and the same SGD steps as ours.

How it runs: ``envpool.make_gymnasium(env_id, num_envs=N, batch_size=N, num_threads=K)`` (synchronous; all N envs
step in each call); one jitted policy call per env step (sampling, log-prob and value for all N envs at once); the
whole update (epochs × minibatches, each epoch reshuffled) is one jitted program made of ``jax.lax.scan`` loops,
PureJaxRL style. Both programs are compiled ahead of the loop and timed apart, so the loop's steps/s has neither
start-up nor compilation in it.

EnvPool's semantics (docs/archive/envpool-study-2026-11-28.md), and what this file does with them:

- **Autoreset** is next-step: the ``step()`` after a done would be a reset that ignores its action and returns reward
  0. We do not let that happen: right after a step in which env *i* ended, we call ``reset(env_id=[i...])``, so
  that env's next ``step()`` is a real step and no transition is wasted or has to be dropped (the loop of a
  Gymnasium vector env in same-step mode, and minionsrl's "reset after done").
- **Truncation** (the 1,000-step limit): EnvPool returns the real final observation on the done step. A truncated
  transition is bootstrapped with V(final observation), as minionsrl does; the CleanRL-era Gymnasium recipe treats
  it as a termination (no bootstrap). GAE: δ_t = r_t + γ·V_next·(1 − terminated_t) − V_t, where V_next is
  V(final obs) on a truncation and V(s_{t+1}) otherwise, and the λ-trace is cut at every episode end.
- **Seeding**: fixed when the pool is made (env *i* gets seed + i); the evaluation pool gets seed + 10,000.
- **Rewards** are float32; returns are summed in float64.

Normalisation statistics are pooled over the N envs (one running mean/std of observations, one of the discounted
return, updated with each step's N values), as minionsrl merges its actors' statistics, where CleanRL's per-env
Gymnasium wrappers keep one set per env. Each observation the envs return (final and reset ones included) is
counted once, as the wrapper counts it; the discounted return restarts at a termination only (Gymnasium 1.x's
``NormalizeReward``). The evaluation uses the training statistics, frozen.

Output: JSON lines on stdout (and appended to ``--out`` when given): ``start`` (set-up and compile seconds),
``update`` per update (env steps, loop wall seconds, raw returns and lengths of the training episodes that ended in
it), and ``done`` (the loop's steps/s, last-100 training return, the deterministic evaluation: ``--eval-episodes``
episodes, one per env of a fresh pool, mean action). ``--raw`` instead times random-action stepping of the same
pool (the env engine's ceiling) and prints one ``raw`` line.

    .venv/bin/python bench/peer_ppo.py [--total-timesteps 1000000] [--seed 1] [--num-envs 8] [--num-steps 512]
        [--minibatch-size 64] [--update-epochs 10] [--num-threads 2] [--out FILE]
    .venv/bin/python bench/peer_ppo.py --raw [--raw-steps 100000] [--num-envs 8] [--num-threads 2]
"""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()

import argparse  # noqa: E402  (the clock above starts before the imports, which are part of the start-up)
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

# CleanRL's ppo_continuous_action.py defaults (its minibatch: 2,048 / 32 = 64 samples), except the batch: CleanRL's
# is 1 env × 2,048 steps, ours (the mujoco preset at 8 actors) 8 × 512, the equal work of ``minionsrl train``
DEFAULTS: dict[str, Any] = {
    "env-id": "Hopper-v5", "seed": 1, "total-timesteps": 1_000_000, "num-envs": 8, "num-steps": 512,
    "minibatch-size": 64, "update-epochs": 10, "learning-rate": 3e-4, "gamma": 0.99, "gae-lambda": 0.95,
    "clip-coef": 0.2, "ent-coef": 0.0, "vf-coef": 0.5, "max-grad-norm": 0.5, "clip-obs": 10.0, "clip-reward": 10.0,
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in DEFAULTS.items():
        p.add_argument(f"--{name}", type=type(default), default=default)
    p.add_argument("--no-anneal-lr", dest="anneal_lr", action="store_false", help="a constant learning rate")
    # 2 was the faster on this 2-core machine (2026-11-28, load 4-5, interleaved pairs): training 2,638 / 2,674
    # steps/s against 1 thread's 2,005 / 2,432; raw random-action stepping 7,431 / 4,965 against 3,080 / 3,880
    p.add_argument("--num-threads", type=int, default=2, help="EnvPool's worker threads")
    p.add_argument("--xla-threads", type=int, default=1, choices=(0, 1),
                   help="1: one XLA compute thread, as our learner runs (0: XLA's default, one per core)")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--out", default=None, help="also append the JSON lines to this file")
    p.add_argument("--quiet", action="store_true", help="print only the start and done lines")
    p.add_argument("--raw", action="store_true", help="time random-action stepping of the pool only")
    p.add_argument("--raw-steps", type=int, default=100_000)
    args = p.parse_args(argv)
    batch = args.num_envs * args.num_steps
    if batch % args.minibatch_size:
        p.error(f"the batch ({args.num_envs} × {args.num_steps} = {batch}) is not a multiple of --minibatch-size")
    return args


class Emit:
    """JSON lines to stdout and, optionally, appended (flushed at once) to a file."""

    def __init__(self, path: str | None, quiet: bool) -> None:
        self.path, self.quiet = (Path(path) if path else None), quiet
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, record: dict[str, Any]) -> None:
        line = json.dumps(record)
        if not self.quiet or record["kind"] != "update":
            print(line, flush=True)
        if self.path:
            with self.path.open("a") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())


class RunningMeanStd:
    """Running mean and variance (Chan et al.'s parallel update), started as Gymnasium's: count 1e-4."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        import numpy as np

        self.mean, self.var, self.count = np.zeros(shape), np.ones(shape), 1e-4

    def update(self, x) -> None:
        b_mean, b_var, b_count = x.mean(axis=0), x.var(axis=0), x.shape[0]
        delta, total = b_mean - self.mean, self.count + b_count
        self.mean = self.mean + delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta ** 2 * self.count * b_count / total
        self.var, self.count = m2 / total, total


def make_pool(args: argparse.Namespace, num_envs: int, seed: int):
    import envpool

    return envpool.make_gymnasium(args.env_id, num_envs=num_envs, batch_size=num_envs,
                                  num_threads=args.num_threads, seed=seed)


def raw_main(args: argparse.Namespace, emit: Emit) -> None:
    """Random actions through the same pool: the engine's steps/s with no policy and no learning."""
    import numpy as np

    env = make_pool(args, args.num_envs, args.seed)
    rng = np.random.default_rng(args.seed)
    low, high = env.action_space.low, env.action_space.high
    shape = (args.num_envs, *env.action_space.shape)
    env.reset()
    for _ in range(50):  # warm-up
        env.step(rng.uniform(low, high, shape))
    n = max(1, args.raw_steps // args.num_envs)
    actions = rng.uniform(low, high, (n, *shape))
    cpu0, t0 = time.process_time(), time.perf_counter()
    for a in actions:
        _, _, term, trunc, _ = env.step(a)
        done = term | trunc
        if done.any():
            env.reset(env_id=np.nonzero(done)[0])
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    steps = n * args.num_envs
    emit({"kind": "raw", "env_id": args.env_id, "num_envs": args.num_envs, "num_threads": args.num_threads,
          "env_steps": steps, "wall_s": wall, "cpu_s": cpu, "steps_per_s": steps / wall})


def train_main(args: argparse.Namespace, emit: Emit) -> None:
    if args.xla_threads == 1 and "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    jax.config.update("jax_default_matmul_precision", "float32")
    n_envs, n_steps = args.num_envs, args.num_steps
    batch = n_envs * n_steps
    n_mb = batch // args.minibatch_size
    n_updates = max(1, -(-args.total_timesteps // batch))  # rounded up, as minionsrl stops (CleanRL: down)
    gamma, lam, clip = args.gamma, args.gae_lambda, args.clip_coef

    env = make_pool(args, n_envs, args.seed)
    obs_dim = env.observation_space.shape[0]
    act_dim = env.action_space.shape[0]
    a_low, a_high = env.action_space.low, env.action_space.high

    # -- networks: plain JAX, a list of (W, b) per MLP ------------------------------------------------------------
    def mlp_init(key, sizes: list[int], head_gain: float):
        layers = []
        keys = jax.random.split(key, len(sizes) - 1)
        for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True)):
            gain = head_gain if i == len(sizes) - 2 else float(np.sqrt(2.0))
            w = jax.nn.initializers.orthogonal(gain)(k, (n_in, n_out), jnp.float32)
            layers.append((w, jnp.zeros((n_out,), jnp.float32)))
        return layers

    def mlp(layers, x):
        for w, b in layers[:-1]:
            x = jnp.tanh(x @ w + b)
        w, b = layers[-1]
        return x @ w + b

    k_actor, k_critic, key = jax.random.split(jax.random.PRNGKey(args.seed), 3)
    params = {"actor": mlp_init(k_actor, [obs_dim, 64, 64, act_dim], 0.01),
              "critic": mlp_init(k_critic, [obs_dim, 64, 64, 1], 1.0),
              "log_std": jnp.zeros((act_dim,), jnp.float32)}

    def log_prob(mean, log_std, a):
        return jnp.sum(-0.5 * ((a - mean) / jnp.exp(log_std)) ** 2 - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)

    def value(p, obs):
        return mlp(p["critic"], obs)[..., 0]

    def act(p, obs, key):
        """One env step's policy call for all envs: [sampled action, its log-prob, V(obs)] in one array (one copy
        to the host), and the next key (stays on the device)."""
        key, sub = jax.random.split(key)
        mean = mlp(p["actor"], obs)
        a = mean + jnp.exp(p["log_std"]) * jax.random.normal(sub, mean.shape)
        return jnp.concatenate([a, log_prob(mean, p["log_std"], a)[:, None], value(p, obs)[:, None]], axis=1), key

    tx = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.scale_by_adam(eps=1e-5))
    opt_state = tx.init(params)

    def loss_fn(p, mb):
        mean = mlp(p["actor"], mb["obs"])
        new_logp = log_prob(mean, p["log_std"], mb["actions"])
        entropy = jnp.sum(p["log_std"] + 0.5 * jnp.log(2 * jnp.pi * jnp.e))
        ratio = jnp.exp(new_logp - mb["logp"])
        adv = mb["adv"]
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
        pg_loss = jnp.maximum(-adv * ratio, -adv * jnp.clip(ratio, 1 - clip, 1 + clip)).mean()
        v = value(p, mb["obs"])
        v_clipped = mb["values"] + jnp.clip(v - mb["values"], -clip, clip)
        v_loss = 0.5 * jnp.maximum((v - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2).mean()
        return pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss

    def update(p, opt_state, roll, last_obs, lr, key):
        """GAE over the rollout, then epochs × minibatches of SGD: one program."""
        v_next = jnp.concatenate([roll["values"][1:], value(p, last_obs)[None]], axis=0)
        v_final = value(p, roll["final_obs"])  # V(final obs): used on truncated steps only
        v_next = jnp.where(roll["truncated"], v_final, v_next)
        not_term = 1.0 - roll["terminated"]
        not_done = 1.0 - jnp.maximum(roll["terminated"], roll["truncated"])
        deltas = roll["rewards"] + gamma * v_next * not_term - roll["values"]

        def gae_step(carry, x):
            delta, cont = x
            carry = delta + gamma * lam * cont * carry
            return carry, carry

        _, adv = jax.lax.scan(gae_step, jnp.zeros((n_envs,), jnp.float32), (deltas, not_done), reverse=True)
        flat = {"obs": roll["obs"].reshape(batch, obs_dim), "actions": roll["actions"].reshape(batch, act_dim),
                "logp": roll["logp"].reshape(batch), "values": roll["values"].reshape(batch),
                "adv": adv.reshape(batch), "returns": (adv + roll["values"]).reshape(batch)}

        def sgd_step(state, mb):
            p, opt_state = state
            loss, grads = jax.value_and_grad(loss_fn)(p, mb)
            updates, opt_state = tx.update(grads, opt_state, p)
            p = jax.tree_util.tree_map(lambda w, u: w - lr * u, p, updates)
            return (p, opt_state), loss

        def epoch(carry, _):
            p, opt_state, key = carry
            key, sub = jax.random.split(key)
            perm = jax.random.permutation(sub, batch)
            mbs = jax.tree_util.tree_map(lambda x: x[perm].reshape(n_mb, args.minibatch_size, *x.shape[1:]), flat)
            (p, opt_state), losses = jax.lax.scan(sgd_step, (p, opt_state), mbs)
            return (p, opt_state, key), losses.mean()

        (p, opt_state, key), losses = jax.lax.scan(epoch, (p, opt_state, key), None, length=args.update_epochs)
        return p, opt_state, key, losses.mean()

    # -- compile both programs ahead of the loop (timed apart) ---------------------------------------------------
    setup_s = time.perf_counter() - T_PROCESS
    t_compile = time.perf_counter()
    f32 = np.float32
    obs0 = np.zeros((n_envs, obs_dim), f32)
    act_c = jax.jit(act).lower(params, obs0, key).compile()
    roll_spec = {"obs": np.zeros((n_steps, n_envs, obs_dim), f32), "actions": np.zeros((n_steps, n_envs, act_dim), f32),
                 "logp": np.zeros((n_steps, n_envs), f32), "values": np.zeros((n_steps, n_envs), f32),
                 "rewards": np.zeros((n_steps, n_envs), f32), "terminated": np.zeros((n_steps, n_envs), f32),
                 "truncated": np.zeros((n_steps, n_envs), f32), "final_obs": np.zeros((n_steps, n_envs, obs_dim), f32)}
    update_c = jax.jit(update).lower(params, opt_state, roll_spec, obs0, f32(0.0), key).compile()
    compile_s = time.perf_counter() - t_compile
    emit({"kind": "start", "env_id": args.env_id, "seed": args.seed, "setup_s": setup_s, "compile_s": compile_s,
          "config": {k: v for k, v in vars(args).items() if k not in ("out", "quiet", "raw", "raw_steps")},
          "batch": batch, "minibatches": n_mb, "updates": n_updates, "t": time.time()})

    # -- the training loop ---------------------------------------------------------------------------------------
    obs_rms, ret_rms = RunningMeanStd((obs_dim,)), RunningMeanStd(())
    disc_ret = np.zeros(n_envs)

    def norm_obs(x, update_stats: bool = True):
        if update_stats:
            obs_rms.update(x)
        return np.clip((x - obs_rms.mean) / np.sqrt(obs_rms.var + 1e-8), -args.clip_obs, args.clip_obs).astype(f32)

    buf = {k: np.zeros_like(v) for k, v in roll_spec.items()}
    ep_ret, ep_len = np.zeros(n_envs), np.zeros(n_envs, dtype=np.int64)
    recent: list[float] = []
    cpu0, t_loop = time.process_time(), time.perf_counter()
    raw, _ = env.reset()
    obs = norm_obs(raw)
    env_steps = 0
    for u in range(n_updates):
        t_sample = time.perf_counter()
        returns, lengths = [], []
        for t in range(n_steps):
            out, key = act_c(params, obs, key)
            out = np.asarray(out)
            a, logp, v = out[:, :act_dim], out[:, act_dim], out[:, act_dim + 1]
            raw, r, term, trunc, _ = env.step(np.clip(a, a_low, a_high))
            r = r.astype(np.float64)
            nxt = norm_obs(raw)  # the final observation on a done step: kept for V(final obs) on a truncation
            disc_ret = disc_ret * gamma * (1.0 - term) + r
            ret_rms.update(disc_ret)
            scaled = np.clip(r / np.sqrt(ret_rms.var + 1e-8), -args.clip_reward, args.clip_reward)
            buf["obs"][t], buf["actions"][t], buf["logp"][t], buf["values"][t] = obs, a, logp, v
            buf["rewards"][t], buf["terminated"][t], buf["truncated"][t] = scaled, term, trunc & ~term
            buf["final_obs"][t] = nxt
            ep_ret += r
            ep_len += 1
            done = term | trunc
            if done.any():
                ids = np.nonzero(done)[0]
                returns += ep_ret[ids].tolist()
                lengths += ep_len[ids].tolist()
                ep_ret[ids], ep_len[ids] = 0.0, 0
                reset_raw, info = env.reset(env_id=ids)  # the next step() of these envs is a real one
                nxt[info["env_id"]] = norm_obs(reset_raw)
            obs = nxt
        env_steps += batch
        t_learn = time.perf_counter()
        lr = args.learning_rate * (1.0 - u / n_updates if args.anneal_lr else 1.0)
        params, opt_state, key, loss = update_c(params, opt_state, buf, obs, f32(lr), key)
        loss = float(loss)  # waits for the update
        now = time.perf_counter()
        recent = (recent + returns)[-100:]
        emit({"kind": "update", "update": u + 1, "env_steps": env_steps, "wall_s": now - t_loop,
              "sample_s": t_learn - t_sample, "learn_s": now - t_learn, "loss": loss, "lr": lr,
              "returns": [round(x, 3) for x in returns], "lengths": lengths})
    loop_s = time.perf_counter() - t_loop
    cpu_s = time.process_time() - cpu0

    # -- deterministic evaluation: one episode per env of a fresh pool, mean action, frozen statistics -----------
    t_eval = time.perf_counter()
    n_eval = args.eval_episodes
    eval_returns: list[float] = []
    if n_eval:
        ev = make_pool(args, n_eval, args.seed + 10_000)
        mean_c = jax.jit(lambda p, o: mlp(p["actor"], o))
        raw, _ = ev.reset()
        totals, alive = np.zeros(n_eval), np.ones(n_eval, dtype=bool)
        while alive.any():
            a = np.asarray(mean_c(params, norm_obs(raw, update_stats=False)))
            raw, r, term, trunc, _ = ev.step(np.clip(a, a_low, a_high))
            totals += np.where(alive, r.astype(np.float64), 0.0)
            alive &= ~(term | trunc)  # envs that ended autoreset on their next step; their rewards are not counted
        eval_returns = totals.tolist()
    emit({"kind": "done", "env_id": args.env_id, "seed": args.seed, "env_steps": env_steps, "updates": n_updates,
          "setup_s": setup_s, "compile_s": compile_s, "loop_s": loop_s, "loop_cpu_s": cpu_s,
          "steps_per_s": env_steps / loop_s, "train_return_last100": float(np.mean(recent)) if recent else None,
          "episodes_last100": len(recent), "eval_return": float(np.mean(eval_returns)) if eval_returns else None,
          "eval_returns": eval_returns, "eval_s": time.perf_counter() - t_eval,
          "process_s": time.perf_counter() - T_PROCESS, "t": time.time()})


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    emit = Emit(args.out, args.quiet)
    (raw_main if args.raw else train_main)(args, emit)


if __name__ == "__main__":
    main(sys.argv[1:])
