"""The rollout functions' NumPy policy must compute what the learner's JAX networks compute."""

from __future__ import annotations

import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from minionsrl.config import learner_settings
from minionsrl.function.envs import EnvSpec, make_env
from minionsrl.function.numpy_policy import NumpyPolicy, PolicyArch
from minionsrl.function.rollout import rollout
from minionsrl.learner import networks
from minionsrl.learner.batch import Batch
from minionsrl.learner.engine import SGDEngine
from minionsrl.learner.networks import init_params, snapshot_of
from minionsrl.learner.ppo import ppo_loss

DISCRETE = PolicyArch(obs_dim=4, action_dim=2, discrete=True, hidden=(64, 64))  # CartPole
CONTINUOUS = PolicyArch(obs_dim=11, action_dim=3, discrete=False, hidden=(64, 64))  # Hopper
BATCH = 256


def _batch(arch: PolicyArch, rng: np.random.Generator, scale: float = 2.0):
    obs = (rng.standard_normal((BATCH, arch.obs_dim)) * scale).astype(np.float32)
    if arch.discrete:
        actions = rng.integers(0, arch.action_dim, size=BATCH).astype(np.int64)
    else:
        actions = (rng.standard_normal((BATCH, arch.action_dim)) * 1.5).astype(np.float32)
    return obs, actions


def _random_params(arch: PolicyArch, rng: np.random.Generator, scale: float) -> dict[str, np.ndarray]:
    """Weights of the published shapes, every entry drawn from N(0, scale²)."""
    return {k: (rng.standard_normal(v.shape) * scale).astype(np.float32) for k, v in init_params(arch, 0).items()}


def _compare(arch: PolicyArch, params: dict, obs: np.ndarray, actions: np.ndarray) -> None:
    """The NumPy policy built from the published weights against the learner's :func:`networks.evaluate`."""
    numpy_policy = snapshot_of(arch, params, None, 0, 10.0).numpy_policy()
    heads, values = numpy_policy.forward(obs)
    logp = numpy_policy.log_prob(heads, actions)
    weights = {k: jnp.asarray(v) for k, v in params.items()}
    j_logp, _, j_value = networks.evaluate(arch, weights, jnp.asarray(obs), jnp.asarray(actions))
    j_head = networks.mlp(weights, "actor", jnp.asarray(obs))
    assert heads.shape == (BATCH, arch.action_dim) and values.shape == (BATCH,) and logp.shape == (BATCH,)
    np.testing.assert_allclose(heads, np.asarray(j_head), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(values, np.asarray(j_value), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(logp, np.asarray(j_logp), atol=1e-5, rtol=1e-5)
    # a single observation (no batch axis) gives the same numbers as its row of the batch
    h0, v0 = numpy_policy.forward(obs[0])
    np.testing.assert_allclose(h0, heads[0], atol=1e-6)
    assert float(v0) == pytest.approx(float(values[0]), abs=1e-6)


def _train_a_little(arch: PolicyArch, params: dict, obs: np.ndarray, actions: np.ndarray,
                    updates: int = 3) -> dict[str, np.ndarray]:
    """A few PPO updates (4 epochs of 2 minibatches each) on a batch with random advantages and returns."""
    ppo = SGDEngine(arch, params, learner_settings(learning_rate=0.01, minibatch_size=128), ppo_loss)
    logp, _, values = networks.evaluate(arch, ppo.weights, jnp.asarray(obs), jnp.asarray(actions))
    rng = np.random.default_rng(7)
    batch = Batch(obs, actions, np.asarray(logp), rng.standard_normal(len(obs)).astype(np.float32),
                  rng.standard_normal(len(obs)).astype(np.float32), np.asarray(values))
    for _ in range(updates):
        ppo.update(batch, rng)
    return ppo.numpy_weights()


@pytest.mark.parametrize("arch", [DISCRETE, CONTINUOUS], ids=["discrete", "continuous"])
def test_numpy_matches_jax_at_init(arch):
    obs, actions = _batch(arch, np.random.default_rng(1))
    _compare(arch, init_params(arch, 0), obs, actions)


@pytest.mark.integration
@pytest.mark.parametrize("arch", [DISCRETE, CONTINUOUS], ids=["discrete", "continuous"])
def test_numpy_matches_jax_after_ppo_updates(arch):
    before = init_params(arch, 1)
    obs, actions = _batch(arch, np.random.default_rng(2))
    after = _train_a_little(arch, before, obs, actions)
    assert set(after) == set(before)
    assert any(np.abs(after[k] - before[k]).max() > 1e-3 for k in before)  # the weights really moved
    if not arch.discrete:
        assert np.abs(after["log_std"]).max() > 1e-3
    obs2, actions2 = _batch(arch, np.random.default_rng(3))
    _compare(arch, after, obs2, actions2)


@pytest.mark.integration  # compiles the JAX policy for several random draws: over a second
def test_numpy_matches_jax_with_random_log_std_and_weights():
    arch = PolicyArch(obs_dim=17, action_dim=6, discrete=False, hidden=(32, 16, 8))
    params = _random_params(arch, np.random.default_rng(2), 0.3)
    params["log_std"] = np.linspace(-1.5, 0.8, 6, dtype=np.float32).reshape(params["log_std"].shape)
    obs = (np.random.default_rng(4).standard_normal((BATCH, 17))).astype(np.float32)
    actions = (np.random.default_rng(5).standard_normal((BATCH, 6))).astype(np.float32)
    _compare(arch, params, obs, actions)


def test_numpy_discrete_log_probs_are_a_distribution():
    arch = PolicyArch(4, 5, True, (16,))
    numpy_policy = NumpyPolicy(arch, _random_params(arch, np.random.default_rng(3), 1.0))
    obs = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    heads, _ = numpy_policy.forward(obs)
    probs = np.stack([np.exp(numpy_policy.log_prob(heads, np.full(10, a))) for a in range(5)], axis=1)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize(("env_id", "arch"), [("CartPole-v1", PolicyArch(4, 2, True, (64, 64))),
                                              ("Pendulum-v1", PolicyArch(3, 1, False, (64, 64)))])
def test_rollout_logprobs_and_values_match_jax(env_id, arch):
    """What a rollout function records (sampled with NumPy) is what the learner recomputes in JAX."""
    params = init_params(arch, 4)
    snap = snapshot_of(arch, params, None, 0, 10.0)
    env = make_env(EnvSpec(env_id))
    try:
        frag = rollout(env, snap, snap.numpy_policy(), 64, seed=11, gamma=0.99)
    finally:
        env.close()
    logp, _, value = networks.evaluate(arch, {k: jnp.asarray(v) for k, v in params.items()}, jnp.asarray(frag.obs),
                                       jnp.asarray(frag.actions))
    np.testing.assert_allclose(frag.logprobs, np.asarray(logp), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(frag.values, np.asarray(value), atol=1e-5, rtol=1e-5)


def test_sampled_discrete_actions_follow_the_policy():
    """Gumbel-max sampling in the rollout matches the categorical probabilities of the policy."""
    arch = PolicyArch(2, 3, True, (8,))
    params = init_params(arch, 5)
    for k in params:  # logits that do not depend on the observation: bias only
        if k.startswith("actor."):
            params[k] = np.zeros_like(params[k])
    params["actor.1.bias"] = np.array([0.0, 1.0, -1.0], np.float32)
    snap = snapshot_of(arch, params, None, 0, 10.0)
    env = make_env(EnvSpec("custom_env:CounterEnv", {"length": 1000}))
    try:
        frag = rollout(env, snap, snap.numpy_policy(), 3000, seed=0, gamma=0.99)
    finally:
        env.close()
    freq = np.bincount(frag.actions, minlength=3) / len(frag.actions)
    expected = np.exp([0.0, 1.0, -1.0]) / np.exp([0.0, 1.0, -1.0]).sum()
    np.testing.assert_allclose(freq, expected, atol=0.03)


@pytest.mark.integration
def test_learner_side_imports_jax_and_not_torch():
    """The learner's networks need JAX only; the probe sees JAX (so it would see torch if it were imported)."""
    code = "import sys, minionsrl.learner.networks; print(sorted(m for m in ('jax', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "['jax']"


@pytest.mark.integration
def test_the_learner_runtime_computes_matmuls_at_full_float32_precision():
    """After the learner's runtime is configured, every matmul it compiles asks for full float32 precision: on a GPU
    JAX would otherwise run them in TF32, and the update's log-probabilities would not be the functions' float32
    ones. (On a CPU the results are the same either way.) In a fresh interpreter: the setting is process-wide."""
    code = ("import jax, jax.numpy as jnp\n"
            "from minionsrl.function.numpy_policy import PolicyArch\n"
            "from minionsrl.learner import networks, runtime\n"
            "runtime.configure(2)\n"
            "arch = PolicyArch(4, 2, True, (8,))\n"
            "params = {k: jnp.asarray(v) for k, v in networks.init_params(arch, 0).items()}\n"
            "text = jax.jit(networks.evaluate, static_argnums=0).lower(arch, params, jnp.zeros((3, 4)),\n"
            "                                                          jnp.zeros(3, jnp.int32)).as_text()\n"
            "print(jax.config.jax_default_matmul_precision, text.count('dot_general'),\n"
            "      text.count('precision = [HIGHEST, HIGHEST]'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    precision, dots, highest = out.stdout.split()
    assert precision == "float32" and int(dots) == int(highest) == 4  # two layers in each of two towers


@pytest.mark.integration
@pytest.mark.parametrize(("jax_first", "gpu"), [(False, False), (True, False), (False, True)])
def test_the_learner_runtime_warns_when_jax_ran_before_it(jax_first, gpu):
    """Set up first, the learner gets one XLA compute thread, whose wait for a CPU the round's clock subtracts; if JAX
    made its client earlier (an API user's own computation), its several threads would each count the update's
    wait, and the user is told so, with the fix. A learner on a GPU gets clients made with every core (its update is
    not on XLA:CPU's threads; one core would size the GPU compiler's threads too), and no warning. In a fresh
    interpreter: the client is process-wide."""
    if gpu and (os.cpu_count() or 1) < 2:
        pytest.skip("one core: a pool made with every core has one thread too")
    code = ("import os, warnings, jax\n"
            f"if {jax_first}: jax.numpy.zeros(1).block_until_ready()\n"
            "from minionsrl.learner import runtime\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            f"    runtime.configure(1, gpu={gpu})\n"
            "jax.numpy.zeros(1).block_until_ready()  # the client, if the set-up did not make it\n"
            "names = [open(f'/proc/self/task/{t}/comm').read() for t in os.listdir('/proc/self/task')]\n"
            "print(sum(n.startswith('tf_XLAEigen') for n in names), len(caught))\n"
            "print(*(str(w.message) for w in caught))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    counts, message = out.stdout.split("\n", 1)
    threads, warned = map(int, counts.split())
    assert (threads > 1, warned) == (jax_first or gpu, int(jax_first))
    assert ("XLA_FLAGS=--xla_cpu_multi_thread_eigen=false" in message) == jax_first
