"""The learner's actor-critic in torch (CleanRL's architecture and initialisation)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from minionsrl.fragment import PolicySnapshot
from minionsrl.normalization import RunningMeanStd
from minionsrl.numpy_policy import PolicyArch

LOG_2PI = math.log(2.0 * math.pi)


def _layer(n_in: int, n_out: int, std: float) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def _mlp(n_in: int, hidden: tuple[int, ...], n_out: int, last_std: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [_layer(n_in, h, math.sqrt(2)), nn.Tanh()]
        n_in = h
    layers.append(_layer(n_in, n_out, last_std))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Separate tanh MLP towers for actor and critic; categorical or diagonal-Gaussian head.

    The Gaussian has a state-independent log-std parameter, initialised to 0 (CleanRL).
    """

    def __init__(self, arch: PolicyArch) -> None:
        super().__init__()
        self.arch = arch
        self.actor = _mlp(arch.obs_dim, arch.hidden, arch.action_dim, 0.01)
        self.critic = _mlp(arch.obs_dim, arch.hidden, 1, 1.0)
        if not arch.discrete:
            self.log_std = nn.Parameter(torch.zeros(1, arch.action_dim))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Return (log-prob of ``actions``, entropy, value) for a batch of observations."""
        head = self.actor(obs)
        if self.arch.discrete:
            logits = torch.log_softmax(head, dim=-1)
            logp = logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logits.exp() * logits).sum(-1)
        else:
            log_std = self.log_std.expand_as(head)
            z = (actions - head) * torch.exp(-log_std)
            logp = (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)
            entropy = (0.5 + 0.5 * LOG_2PI + log_std).sum(-1)
        return logp, entropy, self.value(obs)

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """Greedy action: argmax of the logits, or the Gaussian mean."""
        head = self.actor(obs)
        return head.argmax(-1) if self.arch.discrete else head

    def numpy_params(self) -> dict[str, np.ndarray]:
        """Weights in the layout :class:`~minionsrl.numpy_policy.NumpyPolicy` reads."""
        out: dict[str, np.ndarray] = {}
        for tower in ("actor", "critic"):
            linears = [m for m in getattr(self, tower) if isinstance(m, nn.Linear)]
            for i, lin in enumerate(linears):
                out[f"{tower}.{i}.weight"] = lin.weight.detach().cpu().numpy().astype(np.float32)
                out[f"{tower}.{i}.bias"] = lin.bias.detach().cpu().numpy().astype(np.float32)
        if not self.arch.discrete:
            out["log_std"] = self.log_std.detach().cpu().numpy().astype(np.float32).reshape(-1)
        return out


def snapshot_of(policy: ActorCritic, obs_rms: RunningMeanStd | None, version: int, clip_obs: float) -> PolicySnapshot:
    """The policy as rollout functions receive it: NumPy weights plus normalisation statistics."""
    return PolicySnapshot(
        version=version, arch=policy.arch, params=policy.numpy_params(),
        obs_mean=None if obs_rms is None else obs_rms.mean.copy(),
        obs_var=None if obs_rms is None else obs_rms.var.copy(), clip_obs=clip_obs,
    )
