"""Generalised advantage estimation with terminations, time-limit truncations and fragment cuts."""

from __future__ import annotations

import numpy as np
import pytest
from oracles import gae_step_loop as step_loop  # the step-by-step loop compute_gae ran until 2026-11-27

from minionsrl.learner.ppo import compute_gae

GAMMA, LAM = 0.9, 0.8  # gamma * lambda = 0.72


def _hand_example():
    # Two fragments (n=2) of T=3 steps.
    # Row 0: the episode terminates at t=1; t=2 starts a new episode that is cut by the fragment end.
    #   t=2 (cut):        delta = 3 + 0.9 * last_value(2.0) - 1.5 = 3.3                A2 = 3.3
    #   t=1 (terminated): delta = 2 + 0.9 * 0 - 1.0 = 1.0 (trunc_value 99 ignored)      A1 = 1.0 (chain cut)
    #   t=0:              delta = 1 + 0.9 * V1(1.0) - 0.5 = 1.4                         A0 = 1.4 + 0.72 * 1.0 = 2.12
    #   returns = A + V = [2.62, 2.0, 4.8]
    # Row 1: a time limit truncates the episode at t=1 with V(final obs) = 4.0; t=2 is cut.
    #   t=2 (cut):        delta = 2 + 0.9 * last_value(-1.0) - 0.5 = 0.6                A2 = 0.6
    #   t=1 (truncated):  delta = 0 + 0.9 * trunc_value(4.0) - 2.0 = 1.6                A1 = 1.6 (chain cut)
    #   t=0:              delta = 1 + 0.9 * V1(2.0) - 1.0 = 1.8 (trunc_value 50 ignored) A0 = 1.8 + 0.72 * 1.6 = 2.952
    #   returns = [3.952, 3.6, 1.1]
    rewards = np.array([[1.0, 2.0, 3.0], [1.0, 0.0, 2.0]])
    values = np.array([[0.5, 1.0, 1.5], [1.0, 2.0, 0.5]], dtype=np.float32)
    terminated = np.array([[False, True, False], [False, False, False]])
    truncated = np.array([[False, False, False], [False, True, False]])
    trunc_values = np.array([[0.0, 99.0, 0.0], [50.0, 4.0, 0.0]], dtype=np.float32)
    last_values = np.array([2.0, -1.0])
    return rewards, values, terminated, truncated, trunc_values, last_values


def test_hand_worked_example():
    adv, ret = compute_gae(*_hand_example(), GAMMA, LAM)
    np.testing.assert_allclose(adv, [[2.12, 1.0, 3.3], [2.952, 1.6, 0.6]], rtol=1e-6)
    np.testing.assert_allclose(ret, [[2.62, 2.0, 4.8], [3.952, 3.6, 1.1]], rtol=1e-6)
    assert adv.dtype == np.float32 and ret.dtype == np.float32
    assert adv.shape == ret.shape == (2, 3)


def _reference(rewards, values, terminated, truncated, trunc_values, last_values, gamma, lam):
    """Straightforward per-step loop, one fragment at a time."""
    n, steps = rewards.shape
    adv = np.zeros((n, steps))
    for i in range(n):
        gae = 0.0
        for t in reversed(range(steps)):
            if terminated[i, t]:
                boot, cont = 0.0, 0.0
            elif truncated[i, t]:
                boot, cont = trunc_values[i, t], 0.0
            else:
                boot = last_values[i] if t == steps - 1 else values[i, t + 1]
                cont = 1.0
            gae = rewards[i, t] + gamma * boot - values[i, t] + gamma * lam * cont * gae
            adv[i, t] = gae
    return adv


@pytest.mark.parametrize("seed", range(5))
def test_matches_reference_on_random_fragments(seed):
    rng = np.random.default_rng(seed)
    n, steps = 4, 37
    rewards = rng.standard_normal((n, steps))
    values = rng.standard_normal((n, steps)).astype(np.float32)
    terminated = rng.random((n, steps)) < 0.08
    truncated = (rng.random((n, steps)) < 0.08) & ~terminated
    trunc_values = np.where(truncated, rng.standard_normal((n, steps)), 0.0).astype(np.float32)
    last_values = rng.standard_normal(n)
    gamma, lam = rng.uniform(0.8, 1.0), rng.uniform(0.0, 1.0)
    args = (rewards, values, terminated, truncated, trunc_values, last_values)
    adv, ret = compute_gae(*args, gamma, lam)
    expected = _reference(*args, gamma, lam)
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, expected + values, rtol=1e-5, atol=1e-5)


def test_lambda_one_is_discounted_return_minus_value():
    rewards = np.array([[1.0, 1.0, 1.0, 1.0]])
    values = np.array([[0.3, -0.2, 0.7, 0.1]], dtype=np.float32)
    none = np.zeros((1, 4), dtype=bool)
    adv, ret = compute_gae(rewards, values, none, none, np.zeros((1, 4), np.float32), np.array([5.0]), 0.5, 1.0)
    # returns: G3 = 1 + 0.5*5 = 3.5, G2 = 1 + 0.5*3.5 = 2.75, G1 = 2.375, G0 = 2.1875
    np.testing.assert_allclose(ret[0], [2.1875, 2.375, 2.75, 3.5], rtol=1e-6)
    np.testing.assert_allclose(adv[0], ret[0] - values[0], rtol=1e-6)


def test_lambda_zero_is_one_step_td():
    rewards, values, terminated, truncated, trunc_values, last_values = _hand_example()
    adv, _ = compute_gae(rewards, values, terminated, truncated, trunc_values, last_values, GAMMA, 0.0)
    np.testing.assert_allclose(adv, [[1.4, 1.0, 3.3], [1.8, 1.6, 0.6]], rtol=1e-6)


def test_terminated_bootstraps_zero_truncated_bootstraps_trunc_value():
    rewards = np.zeros((2, 1))
    values = np.zeros((2, 1), dtype=np.float32)
    trunc_values = np.full((2, 1), 10.0, dtype=np.float32)
    last_values = np.array([7.0, 7.0])
    adv, _ = compute_gae(rewards, values, np.array([[True], [False]]), np.array([[False], [True]]),
                         trunc_values, last_values, 0.5, 0.9)
    assert adv[0, 0] == 0.0  # terminated: neither trunc_value nor last_value
    assert adv[1, 0] == pytest.approx(5.0)  # truncated: 0.5 * trunc_value, not last_value
    adv, _ = compute_gae(rewards, values, np.zeros((2, 1), bool), np.zeros((2, 1), bool), trunc_values,
                         last_values, 0.5, 0.9)
    np.testing.assert_allclose(adv[:, 0], [3.5, 3.5])  # neither: the cut bootstraps with last_value


@pytest.mark.parametrize("flag", ["terminated", "truncated"])
def test_chain_does_not_cross_episode_boundary(flag):
    """Advantages up to a boundary ignore everything after it (rewards, values, the cut's bootstrap)."""
    rng = np.random.default_rng(0)
    steps, boundary = 10, 4
    rewards = rng.standard_normal((1, steps))
    values = rng.standard_normal((1, steps)).astype(np.float32)
    done = np.zeros((1, steps), dtype=bool)
    done[0, boundary] = True
    none = np.zeros_like(done)
    terminated, truncated = (done, none) if flag == "terminated" else (none, done)
    trunc_values = np.where(truncated, 1.5, 0.0).astype(np.float32)
    adv1, _ = compute_gae(rewards, values, terminated, truncated, trunc_values, np.array([0.3]), 0.99, 0.95)
    rewards2, values2 = rewards.copy(), values.copy()
    rewards2[0, boundary + 1 :] += 100.0
    values2[0, boundary + 1 :] -= 50.0
    adv2, _ = compute_gae(rewards2, values2, terminated, truncated, trunc_values, np.array([-9.0]), 0.99, 0.95)
    np.testing.assert_array_equal(adv1[0, : boundary + 1], adv2[0, : boundary + 1])
    assert not np.allclose(adv1[0, boundary + 1 :], adv2[0, boundary + 1 :])


def test_fragments_are_independent():
    args = _hand_example()
    adv, _ = compute_gae(*args, GAMMA, LAM)
    flipped = tuple(a[::-1].copy() for a in args)
    adv_flipped, _ = compute_gae(*flipped, GAMMA, LAM)
    np.testing.assert_array_equal(adv_flipped, adv[::-1])


@pytest.mark.parametrize("values_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("last_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(8, 512), (128, 32), (3, 1)])
def test_bit_identical_to_the_step_loop_it_replaced(values_dtype, last_dtype, shape):
    """Vectorising the step-independent part changed no run's numbers: every bit as the loop, in its dtypes."""
    rng = np.random.default_rng(sum(shape))
    terminated = rng.random(shape) < 0.02
    truncated = (rng.random(shape) < 0.02) & ~terminated
    args = (rng.standard_normal(shape) * 3, rng.standard_normal(shape).astype(values_dtype), terminated, truncated,
            rng.standard_normal(shape).astype(values_dtype), rng.standard_normal(shape[0]).astype(last_dtype),
            0.99, 0.95)
    for ours, loop in zip(compute_gae(*args), step_loop(*args), strict=True):
        assert ours.dtype == loop.dtype == np.float32
        np.testing.assert_array_equal(ours, loop)
