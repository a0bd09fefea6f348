"""The rollout functions' NumPy policy must compute what the learner's torch ActorCritic computes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from minionsrl.function.envs import EnvSpec, make_env
from minionsrl.function.numpy_policy import NumpyPolicy, PolicyArch
from minionsrl.function.rollout import rollout
from minionsrl.learner.networks import ActorCritic, snapshot_of

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


def _compare(policy: ActorCritic, obs: np.ndarray, actions: np.ndarray) -> None:
    numpy_policy = NumpyPolicy(policy.arch, policy.numpy_params())
    heads, values = numpy_policy.forward(obs)
    logp = numpy_policy.log_prob(heads, actions)
    with torch.no_grad():
        t_logp, _, t_value = policy.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
        t_head = policy.actor(torch.from_numpy(obs))
    assert heads.shape == (BATCH, policy.arch.action_dim) and values.shape == (BATCH,) and logp.shape == (BATCH,)
    np.testing.assert_allclose(heads, t_head.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(values, t_value.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(logp, t_logp.numpy(), atol=1e-5, rtol=1e-5)
    # a single observation (no batch axis) gives the same numbers as its row of the batch
    h0, v0 = numpy_policy.forward(obs[0])
    np.testing.assert_allclose(h0, heads[0], atol=1e-6)
    assert float(v0) == pytest.approx(float(values[0]), abs=1e-6)


def _train_a_little(policy: ActorCritic, obs: np.ndarray, actions: np.ndarray, steps: int = 5) -> None:
    opt = torch.optim.Adam(policy.parameters(), lr=0.05)
    target = torch.randn(len(obs))
    for _ in range(steps):
        logp, entropy, value = policy.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
        loss = -(logp * target).mean() + ((value - target) ** 2).mean() - 0.1 * entropy.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("arch", [DISCRETE, CONTINUOUS], ids=["discrete", "continuous"])
def test_numpy_matches_torch_at_init(arch):
    torch.manual_seed(0)
    policy = ActorCritic(arch)
    obs, actions = _batch(arch, np.random.default_rng(1))
    _compare(policy, obs, actions)


@pytest.mark.parametrize("arch", [DISCRETE, CONTINUOUS], ids=["discrete", "continuous"])
def test_numpy_matches_torch_after_optimizer_steps(arch):
    torch.manual_seed(1)
    policy = ActorCritic(arch)
    obs, actions = _batch(arch, np.random.default_rng(2))
    before = {k: v.copy() for k, v in policy.numpy_params().items()}
    _train_a_little(policy, obs, actions)
    after = policy.numpy_params()
    assert any(np.abs(after[k] - before[k]).max() > 1e-3 for k in before)  # the weights really moved
    if not arch.discrete:
        assert np.abs(after["log_std"]).max() > 1e-3
    obs2, actions2 = _batch(arch, np.random.default_rng(3))
    _compare(policy, obs2, actions2)


def test_numpy_matches_torch_with_random_log_std_and_weights():
    torch.manual_seed(2)
    policy = ActorCritic(PolicyArch(obs_dim=17, action_dim=6, discrete=False, hidden=(32, 16, 8)))
    with torch.no_grad():
        for p in policy.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
        policy.log_std.copy_(torch.linspace(-1.5, 0.8, 6).reshape(1, 6))
    obs = (np.random.default_rng(4).standard_normal((BATCH, 17))).astype(np.float32)
    actions = (np.random.default_rng(5).standard_normal((BATCH, 6))).astype(np.float32)
    _compare(policy, obs, actions)


def test_numpy_discrete_log_probs_are_a_distribution():
    torch.manual_seed(3)
    policy = ActorCritic(PolicyArch(4, 5, True, (16,)))
    with torch.no_grad():
        for p in policy.parameters():
            p.copy_(torch.randn_like(p))
    numpy_policy = NumpyPolicy(policy.arch, policy.numpy_params())
    obs = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    heads, _ = numpy_policy.forward(obs)
    probs = np.stack([np.exp(numpy_policy.log_prob(heads, np.full(10, a))) for a in range(5)], axis=1)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize(("env_id", "arch"), [("CartPole-v1", PolicyArch(4, 2, True, (64, 64))),
                                              ("Pendulum-v1", PolicyArch(3, 1, False, (64, 64)))])
def test_rollout_logprobs_and_values_match_torch(env_id, arch):
    """What a rollout function records (sampled with NumPy) is what the learner recomputes in torch."""
    torch.manual_seed(4)
    policy = ActorCritic(arch)
    snap = snapshot_of(policy, None, 0, 10.0)
    env = make_env(EnvSpec(env_id))
    try:
        frag = rollout(env, snap, snap.numpy_policy(), 64, seed=11, gamma=0.99)
    finally:
        env.close()
    with torch.no_grad():
        logp, _, value = policy.evaluate(torch.from_numpy(frag.obs), torch.from_numpy(frag.actions))
    np.testing.assert_allclose(frag.logprobs, logp.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(frag.values, value.numpy(), atol=1e-5, rtol=1e-5)


def test_sampled_discrete_actions_follow_the_policy():
    """Gumbel-max sampling in the rollout matches the categorical probabilities of the policy."""
    torch.manual_seed(5)
    policy = ActorCritic(PolicyArch(2, 3, True, (8,)))
    with torch.no_grad():  # logits that do not depend on the observation: bias only
        for p in policy.actor.parameters():
            p.zero_()
        policy.actor[-1].bias.copy_(torch.tensor([0.0, 1.0, -1.0]))
    snap = snapshot_of(policy, None, 0, 10.0)
    env = make_env(EnvSpec("custom_env:CounterEnv", {"length": 1000}))
    try:
        frag = rollout(env, snap, snap.numpy_policy(), 3000, seed=0, gamma=0.99)
    finally:
        env.close()
    freq = np.bincount(frag.actions, minlength=3) / len(frag.actions)
    expected = np.exp([0.0, 1.0, -1.0]) / np.exp([0.0, 1.0, -1.0]).sum()
    np.testing.assert_allclose(freq, expected, atol=0.03)


def test_learner_side_does_import_torch():
    """Guard for the check above: the probe sees torch when it is imported."""
    code = "import sys, minionsrl.learner.networks; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "True"
