"""Policy inference in NumPy, the way rollout functions run it (no torch import: cold starts stay short).

The learner's torch :class:`~minionsrl.policy.ActorCritic` exports its weights in the layout read
here. Actor and critic towers are fused into one wider network (first layers side by side, deeper
layers block-diagonal) so one step costs three small matmuls instead of six.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from minionsrl.envs import EnvInfo

LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class PolicyArch:
    """Shape of the actor-critic MLP; travels in the published policy's metadata."""

    obs_dim: int
    action_dim: int
    discrete: bool
    hidden: tuple[int, ...]

    def to_json(self) -> dict:
        return {"obs_dim": self.obs_dim, "action_dim": self.action_dim, "discrete": self.discrete,
                "hidden": list(self.hidden)}

    @classmethod
    def of(cls, info: EnvInfo, hidden: Sequence[int]) -> PolicyArch:
        """The architecture for an environment's spaces (observations flattened)."""
        return cls(int(np.prod(info.obs_shape)), info.action_dim, info.discrete, tuple(hidden))

    @classmethod
    def from_json(cls, data: dict) -> PolicyArch:
        return cls(int(data["obs_dim"]), int(data["action_dim"]), bool(data["discrete"]),
                   tuple(int(h) for h in data["hidden"]))


class NumpyPolicy:
    """Fused actor-critic forward pass, action sampling and log-probabilities in NumPy."""

    def __init__(self, arch: PolicyArch, params: dict[str, np.ndarray]) -> None:
        self.arch = arch
        n_layers = len(arch.hidden) + 1
        self.weights: list[np.ndarray] = []
        self.biases: list[np.ndarray] = []
        for i in range(n_layers):
            wa, wc = params[f"actor.{i}.weight"].T, params[f"critic.{i}.weight"].T  # (in, out)
            ba, bc = params[f"actor.{i}.bias"], params[f"critic.{i}.bias"]
            if i == 0:
                w = np.concatenate([wa, wc], axis=1)
            else:
                w = np.zeros((wa.shape[0] + wc.shape[0], wa.shape[1] + wc.shape[1]), dtype=np.float32)
                w[: wa.shape[0], : wa.shape[1]] = wa
                w[wa.shape[0] :, wa.shape[1] :] = wc
            self.weights.append(np.ascontiguousarray(w, dtype=np.float32))
            self.biases.append(np.concatenate([ba, bc]).astype(np.float32))
        self.log_std = None if arch.discrete else params["log_std"].astype(np.float32).reshape(-1)
        self.std = None if self.log_std is None else np.exp(self.log_std)

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (action head, value) for one observation ``(obs_dim,)`` or a batch ``(B, obs_dim)``.

        The head is the logits (discrete) or the Gaussian mean (continuous).
        """
        h = obs
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w + b
            if i < last:
                h = np.tanh(h)
        return h[..., :-1], h[..., -1]

    def log_prob(self, heads: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` under the distributions given by ``heads`` (batched)."""
        if self.arch.discrete:
            heads = heads.astype(np.float64)
            top = heads.max(axis=-1, keepdims=True)
            lse = top[..., 0] + np.log(np.exp(heads - top).sum(axis=-1))
            chosen = np.take_along_axis(heads, actions.astype(np.int64)[..., None], axis=-1)[..., 0]
            return (chosen - lse).astype(np.float32)
        z = (actions.astype(np.float64) - heads) / self.std
        logp = -0.5 * (z**2).sum(axis=-1) - self.log_std.astype(np.float64).sum() - 0.5 * z.shape[-1] * LOG_2PI
        return logp.astype(np.float32)
