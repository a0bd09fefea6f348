"""V-trace: a hand-worked example, the on-policy reduction to n-step returns / GAE, clipping, boundaries,
and the learner batch built on it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minionsrl.config import learner_settings
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.rollout import rollout
from minionsrl.learner import networks
from minionsrl.learner.impala import impala_loss, vtrace, vtrace_batch
from minionsrl.learner.networks import init_params, snapshot_of
from minionsrl.learner.ppo import LossParams, compute_gae, gae_batch


def _row(*xs):
    return np.array([xs], dtype=np.float64)


def _no_ends(steps: int, n: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((n, steps), bool), np.zeros((n, steps), bool), np.zeros((n, steps), np.float32)


def test_hand_worked_example():
    # gamma 0.9; pi/mu = 2, 0.5, 1 -> rho = c = 1, 0.5, 1 (clipped at 1)
    # delta = rho (r + g V' - V): 1*(1 + .9*1 - .5) = 1.4, .5*(0 + .9*1.5 - 1) = .175, 1*(2 + .9*2 - 1.5) = 2.3
    # v2 = 1.5 + 2.3 = 3.8; v1 = 1 + .175 + .9*.5*2.3 = 2.21; v0 = .5 + 1.4 + .9*1*1.21 = 2.989
    # A_s = rho_s (r_s + g v_{s+1} - V_s): 1*(1 + .9*2.21 - .5) = 2.489, .5*(.9*3.8 - 1) = 1.21, 2.3
    term, trunc, tv = _no_ends(3)
    vs, adv = vtrace(_row(1, 0, 2), _row(0.5, 1.0, 1.5), term, trunc, tv, np.array([2.0]),
                     np.log(_row(2.0, 0.5, 1.0)), gamma=0.9)
    np.testing.assert_allclose(vs[0], [2.989, 2.21, 3.8], rtol=1e-6)
    np.testing.assert_allclose(adv[0], [2.489, 1.21, 2.3], rtol=1e-6)


def test_hand_worked_example_with_termination_and_truncation():
    # step 0 terminates (bootstrap 0, trace cut); step 1 is truncated with V(final) = 4; step 2 runs to the cut
    term = np.array([[True, False, False]])
    trunc = np.array([[False, True, False]])
    tv = np.array([[0.0, 4.0, 0.0]], np.float32)
    vs, adv = vtrace(_row(1, 1, 1), _row(3, 3, 3), term, trunc, tv, np.array([10.0]), np.zeros((1, 3)), gamma=0.5)
    np.testing.assert_allclose(vs[0], [1.0, 3.0, 6.0])  # r, r + .5*4, r + .5*10
    np.testing.assert_allclose(adv[0], [-2.0, 0.0, 3.0])


def _random_fragments(rng: np.random.Generator, n: int = 3, steps: int = 40):
    rewards = rng.normal(size=(n, steps))
    values = rng.normal(size=(n, steps)).astype(np.float32)
    term = rng.random((n, steps)) < 0.08
    trunc = (rng.random((n, steps)) < 0.05) & ~term
    tv = np.where(trunc, rng.normal(size=(n, steps)), 0.0).astype(np.float32)
    return rewards, values, term, trunc, tv, rng.normal(size=n)


@pytest.mark.parametrize("seed", range(5))
def test_on_policy_reduces_to_gae_lambda_one_and_n_step_returns(seed):
    rewards, values, term, trunc, tv, boot = _random_fragments(np.random.default_rng(seed))
    vs, adv = vtrace(rewards, values, term, trunc, tv, boot, np.zeros_like(rewards), gamma=0.97)
    gae_adv, gae_ret = compute_gae(rewards, values, term, trunc, tv, boot, 0.97, 1.0)
    np.testing.assert_allclose(vs, gae_ret, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv, gae_adv, rtol=1e-5, atol=1e-5)
    # and the n-step return, summed directly: discounted rewards to the episode's end or the cut
    n, steps = rewards.shape
    for i in range(n):
        for s in range(steps):
            ret, disc = 0.0, 1.0
            for t in range(s, steps):
                ret += disc * rewards[i, t]
                disc *= 0.97
                if term[i, t]:
                    break
                if trunc[i, t]:
                    ret += disc * tv[i, t]
                    break
            else:
                ret += disc * boot[i]
            assert vs[i, s] == pytest.approx(ret, rel=1e-5, abs=1e-5)


def test_on_policy_with_lambda_gives_gae_lambda_targets():
    rewards, values, term, trunc, tv, boot = _random_fragments(np.random.default_rng(9))
    vs, _ = vtrace(rewards, values, term, trunc, tv, boot, np.zeros_like(rewards), gamma=0.99, lam=0.9)
    _, gae_ret = compute_gae(rewards, values, term, trunc, tv, boot, 0.99, 0.9)
    np.testing.assert_allclose(vs, gae_ret, rtol=1e-5, atol=1e-5)


def test_importance_weights_are_clipped():
    term, trunc, tv = _no_ends(2)
    rewards, values = _row(1, 1), _row(0, 0)
    big = np.log(_row(50.0, 50.0))
    clipped = vtrace(rewards, values, term, trunc, tv, np.array([0.0]), big, gamma=0.9)
    at_one = vtrace(rewards, values, term, trunc, tv, np.array([0.0]), np.zeros((1, 2)), gamma=0.9)
    np.testing.assert_allclose(clipped[0], at_one[0])  # rho_bar = c_bar = 1: the same as on-policy
    looser = vtrace(rewards, values, term, trunc, tv, np.array([0.0]), big, gamma=0.9, rho_bar=2.0, c_bar=2.0)
    assert looser[1][0, 1] == pytest.approx(2.0)  # rho = 2 on the last step's delta of 1
    small = vtrace(rewards, values, term, trunc, tv, np.array([0.0]), np.log(_row(0.1, 0.1)), gamma=0.9)
    assert small[1][0, 1] == pytest.approx(0.1)  # unlikely actions under pi count less


CART = PolicyArch(4, 2, True, (16, 16))


def _weights(seed: int) -> dict[str, jax.Array]:
    return {k: jnp.asarray(v) for k, v in init_params(CART, seed).items()}


def _cart_fragments(weights, steps=32, n=2):
    from minionsrl.function.envs import EnvSpec, make_env

    snap = snapshot_of(CART, weights, None, 0, 10.0)
    env = make_env(EnvSpec("CartPole-v1"))
    return [rollout(env, snap, snap.numpy_policy(), steps, seed, 0.99) for seed in range(n)]


def test_vtrace_batch_on_policy_matches_the_gae_batch():
    weights = _weights(0)
    frags = _cart_fragments(weights)
    vb = vtrace_batch(frags, CART, weights, 0.99, 1.0, None, 10.0, 1.0, 1.0)
    gb = gae_batch(frags, 0.99, 1.0, None)
    np.testing.assert_allclose(vb.returns, gb.returns, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(vb.advantages, gb.advantages, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(vb.logprobs, gb.logprobs, rtol=1e-5, atol=1e-5)


@pytest.mark.integration
def test_vtrace_batch_off_policy_uses_the_learner_values_and_ratios():
    frags = _cart_fragments(_weights(0))
    learner = _weights(1)  # other weights: the behaviour policy is stale
    vb = vtrace_batch(frags, CART, learner, 0.99, 1.0, None, 10.0, 1.0, 1.0)
    logp, _, values = networks.evaluate(CART, learner, jnp.asarray(vb.obs), jnp.asarray(vb.actions))
    np.testing.assert_allclose(vb.values, np.asarray(values), rtol=1.3e-6, atol=1e-5)
    np.testing.assert_allclose(vb.logprobs, np.asarray(logp), rtol=1.3e-6, atol=1e-5)
    assert not np.allclose(vb.logprobs, np.concatenate([f.logprobs for f in frags]))
    data = {k: jnp.asarray(v) for k, v in vb.arrays().items()}
    params = LossParams.of(learner_settings())
    grads = jax.grad(lambda q: impala_loss(CART, q, data, jnp.ones(len(vb)), params, 0.0).loss)(learner)
    assert grads.keys() == learner.keys()
    assert all(np.isfinite(np.asarray(g)).all() and np.abs(np.asarray(g)).max() > 0 for g in grads.values())
