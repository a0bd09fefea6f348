"""bench/gae_window.py: long fragments with GAE cut every W steps get exactly the advantages of W-step fragments."""

from __future__ import annotations

import numpy as np
from conftest import load_bench

from minionsrl.learner.advantages import compute_gae

gae_window = load_bench("gae_window")


def _fragments(n: int, steps: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(n, steps))
    values = rng.normal(size=(n, steps)).astype(np.float32)
    terminated = rng.random((n, steps)) < 0.03
    truncated = ~terminated & (rng.random((n, steps)) < 0.02)
    trunc_values = rng.normal(size=(n, steps)).astype(np.float32)
    last_values = rng.normal(size=n).astype(np.float32)
    return rewards, values, terminated, truncated, trunc_values, last_values


def test_a_cut_every_w_steps_is_fragments_of_w_steps() -> None:
    n, steps, w = 3, 64, 16
    rewards, values, term, trunc, trunc_values, last_values = _fragments(n, steps)
    adv, ret = gae_window.windowed(compute_gae, w)(rewards, values, term, trunc, trunc_values, last_values, 0.99, 0.95)
    # the same steps as n * steps / w fragments of w steps, each bootstrapping with the next step's value
    pieces = lambda a: a.reshape(n * steps // w, w)  # noqa: E731
    boot = np.concatenate([values[:, w::w], last_values[:, None]], axis=1).reshape(-1)
    adv_w, ret_w = compute_gae(pieces(rewards), pieces(values), pieces(term), pieces(trunc), pieces(trunc_values),
                               boot, 0.99, 0.95)
    # to float32 rounding: a fragment's own last step bootstraps in float64, an inner step in the values' float32
    np.testing.assert_allclose(adv, adv_w.reshape(n, steps), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, ret_w.reshape(n, steps), rtol=1e-5, atol=1e-6)
    plain, _ = compute_gae(rewards, values, term, trunc, trunc_values, last_values, 0.99, 0.95)
    assert not np.allclose(adv, plain)  # the cut changed the advantages


def test_a_window_of_the_whole_fragment_changes_nothing() -> None:
    args = _fragments(2, 32, seed=1)
    np.testing.assert_array_equal(gae_window.windowed(compute_gae, 32)(*args, 0.99, 0.95)[0],
                                  compute_gae(*args, 0.99, 0.95)[0])
