"""The learner's actor-critic in JAX (CleanRL's architecture and initialisation).

Parameters are a flat ``dict`` of arrays named and laid out exactly as rollout functions read them
(:mod:`minionsrl.function.numpy_policy`: ``actor.0.weight`` of shape ``(out, in)``, ``conv.0.weight`` of
shape ``(out, in, kh, kw)``, ``log_std``, …), so publishing a policy or checkpointing it is a copy, not
a conversion. The forward passes are pure functions of ``(arch, params, inputs)``: the update compiles
them into one program (:mod:`minionsrl.learner.engine`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from minionsrl.function.fragment import PolicySnapshot
from minionsrl.function.normalization import RunningMeanStd
from minionsrl.function.numpy_policy import (
    LOG_2PI,
    NATURE_CONVS,
    NATURE_DENSE,
    PolicyArch,
    Weights,
    conv_side,
    linear_params,
    mlp_layers,
    mlp_params,
    orthogonal,
)

Params = dict[str, jax.Array]


def dense(params: Params, name: str, x: jax.Array) -> jax.Array:
    """``x @ W.T + b`` for the layer ``name``."""
    return x @ params[f"{name}.weight"].T + params[f"{name}.bias"]


def mlp(params: Params, name: str, x: jax.Array) -> jax.Array:
    """The tanh MLP ``name`` (as made by :func:`mlp_params`) applied to ``x``."""
    layers = mlp_layers(params, name)
    for i in range(layers - 1):
        x = jnp.tanh(dense(params, f"{name}.{i}", x))
    return dense(params, f"{name}.{layers - 1}", x)


def init_params(arch: PolicyArch, seed: int) -> Weights:
    """Initial weights for ``arch`` from ``seed``, as NumPy arrays in the published layout."""
    actor, critic, cnn = np.random.default_rng(seed).spawn(3)
    if arch.image:
        return _cnn_params(cnn, arch)
    params = {**mlp_params(actor, "actor", (arch.obs_dim, *arch.hidden, arch.action_dim), 0.01),
              **mlp_params(critic, "critic", (arch.obs_dim, *arch.hidden, 1), 1.0)}
    if not arch.discrete:  # a state-independent log-std, initialised to 0 (CleanRL)
        params["log_std"] = np.zeros(arch.action_dim, np.float32)
    return params


def _cnn_params(rng: np.random.Generator, arch: PolicyArch) -> Weights:
    channels = arch.obs_shape[0]
    params: Weights = {}
    for i, (out, k, _) in enumerate(NATURE_CONVS):
        flat = orthogonal(rng, out, channels * k * k, math.sqrt(2))  # torch orthogonalises (out, in·k·k)
        params[f"conv.{i}.weight"] = flat.reshape(out, channels, k, k)
        params[f"conv.{i}.bias"] = np.zeros(out, np.float32)
        channels = out
    params |= linear_params(rng, "dense", channels * conv_side(arch.obs_shape[1]) ** 2, NATURE_DENSE, math.sqrt(2))
    params |= linear_params(rng, "actor", NATURE_DENSE, arch.action_dim, 0.01)
    params |= linear_params(rng, "critic", NATURE_DENSE, 1, 1.0)
    return params


def _conv(x: jax.Array, w: jax.Array, stride: int) -> jax.Array:
    """A valid NHWC convolution with a torch-layout kernel ``(out, in, k, k)``, as im2col and one matmul:
    XLA:CPU runs this several times faster than ``lax.conv`` inside a scanned update (BENCHMARKS §8)."""
    n_out, c, k, _ = w.shape
    b, h, wd, _ = x.shape
    ho, wo = (h - k) // stride + 1, (wd - k) // stride + 1
    cols = jnp.stack([x[:, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride, :]
                      for i in range(k) for j in range(k)], axis=3)  # (b, ho, wo, k·k, C): (kh, kw, C) order
    cols = cols.reshape(b * ho * wo, k * k * c)
    if cols.dtype != jnp.float32:  # frames are gathered as uint8 (4× less to move) and scaled after
        cols = cols.astype(jnp.float32) / 255.0
    kernel = w.transpose(2, 3, 1, 0).reshape(k * k * c, n_out)
    return (cols @ kernel).reshape(b, ho, wo, n_out)


def _cnn_trunk(params: Params, obs: jax.Array) -> jax.Array:
    x = obs.transpose(0, 2, 3, 1)  # uint8 (B, C, H, W) → NHWC
    for i, (_, _, stride) in enumerate(NATURE_CONVS):
        x = jax.nn.relu(_conv(x, params[f"conv.{i}.weight"], stride) + params[f"conv.{i}.bias"])
    x = x.transpose(0, 3, 1, 2).reshape(x.shape[0], -1)  # flattened in torch's CHW order, as published
    return jax.nn.relu(dense(params, "dense", x))


def value(arch: PolicyArch, params: Params, obs: jax.Array) -> jax.Array:
    """V(obs) for a batch of observations."""
    if arch.image:
        return dense(params, "critic", _cnn_trunk(params, obs))[:, 0]
    return mlp(params, "critic", obs)[:, 0]


def evaluate(arch: PolicyArch, params: Params, obs: jax.Array, actions: jax.Array) -> tuple[jax.Array, ...]:
    """(log-prob of ``actions``, entropy, value) for a batch of observations."""
    if arch.image:
        hidden = _cnn_trunk(params, obs)
        head, values = dense(params, "actor", hidden), dense(params, "critic", hidden)[:, 0]
    else:
        head, values = mlp(params, "actor", obs), mlp(params, "critic", obs)[:, 0]
    if arch.discrete:
        logits = jax.nn.log_softmax(head, axis=-1)
        logp = jnp.take_along_axis(logits, actions.astype(jnp.int32)[:, None], axis=-1)[:, 0]
        entropy = -(jnp.exp(logits) * logits).sum(-1)
    else:
        log_std = jnp.broadcast_to(params["log_std"], head.shape)
        z = (actions - head) * jnp.exp(-log_std)
        logp = (-0.5 * z**2 - log_std - 0.5 * LOG_2PI).sum(-1)
        entropy = (0.5 + 0.5 * LOG_2PI + log_std).sum(-1)
    return logp, entropy, values


def snapshot_of(arch: PolicyArch, params: Params | dict[str, np.ndarray], obs_rms: RunningMeanStd | None,
                version: int, clip_obs: float) -> PolicySnapshot:
    """The policy as rollout functions receive it: NumPy weights plus normalisation statistics."""
    return PolicySnapshot(
        version=version, arch=arch, params={k: np.asarray(v, dtype=np.float32) for k, v in params.items()},
        obs_mean=None if obs_rms is None else obs_rms.mean.copy(),
        obs_var=None if obs_rms is None else obs_rms.var.copy(), clip_obs=clip_obs,
    )
