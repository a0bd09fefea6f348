"""The learner's actor-critic in torch (CleanRL's architecture and initialisation)."""

from __future__ import annotations

import itertools
import math
from typing import TypeVar

import numpy as np
import torch
from torch import nn

from minionsrl.function.fragment import PolicySnapshot
from minionsrl.function.normalization import RunningMeanStd
from minionsrl.function.numpy_policy import NATURE_CONVS, NATURE_DENSE, PolicyArch

LOG_2PI = math.log(2.0 * math.pi)


Init = TypeVar("Init", nn.Linear, nn.Conv2d)


def orthogonal(module: Init, std: float) -> Init:
    """Initialise ``module`` in place: orthogonal weights with gain ``std``, zero bias (CleanRL)."""
    nn.init.orthogonal_(module.weight, std)
    nn.init.constant_(module.bias, 0.0)
    return module


def layer(n_in: int, n_out: int, std: float) -> nn.Linear:
    """A linear layer with orthogonal weights (gain ``std``) and zero bias."""
    return orthogonal(nn.Linear(n_in, n_out), std)


def mlp(n_in: int, hidden: tuple[int, ...], n_out: int, last_std: float, build_first: bool = False) -> nn.Sequential:
    """Tanh MLP: hidden layers with gain √2, the last with ``last_std``.

    ``build_first`` creates every layer before initialising any. The values are drawn in another
    order from torch's global generator, so the same seed gives other weights: the learned
    scheduler's networks (and its shipped artefact) were made that way.
    """
    sizes = (n_in, *hidden, n_out)
    shapes = list(itertools.pairwise(sizes))
    gains = [math.sqrt(2)] * len(hidden) + [last_std]
    if build_first:
        linears = [nn.Linear(a, b) for a, b in shapes]
        for lin, gain in zip(linears, gains, strict=True):
            orthogonal(lin, gain)
    else:
        linears = [layer(a, b, gain) for (a, b), gain in zip(shapes, gains, strict=True)]
    modules: list[nn.Module] = []
    for lin in linears[:-1]:
        modules += [lin, nn.Tanh()]
    return nn.Sequential(*modules, linears[-1])


class ActorCritic(nn.Module):
    """Separate tanh MLP towers for actor and critic; categorical or diagonal-Gaussian head.

    The Gaussian has a state-independent log-std parameter, initialised to 0 (CleanRL).
    """

    def __init__(self, arch: PolicyArch) -> None:
        super().__init__()
        self.arch = arch
        self.actor = mlp(arch.obs_dim, arch.hidden, arch.action_dim, 0.01)
        self.critic = mlp(arch.obs_dim, arch.hidden, 1, 1.0)
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

    def numpy_params(self) -> dict[str, np.ndarray]:
        """Weights in the layout :class:`~minionsrl.function.numpy_policy.NumpyPolicy` reads."""
        out: dict[str, np.ndarray] = {}
        for tower in ("actor", "critic"):
            linears = [m for m in getattr(self, tower) if isinstance(m, nn.Linear)]
            for i, lin in enumerate(linears):
                out[f"{tower}.{i}.weight"] = lin.weight.detach().cpu().numpy().astype(np.float32)
                out[f"{tower}.{i}.bias"] = lin.bias.detach().cpu().numpy().astype(np.float32)
        if not self.arch.discrete:
            out["log_std"] = self.log_std.detach().cpu().numpy().astype(np.float32).reshape(-1)
        return out


class CNNActorCritic(nn.Module):
    """The Nature CNN with a categorical actor head and a value head on a shared trunk (CleanRL's
    ``ppo_atari.py``): uint8 frame stacks in, scaled by 1/255 inside the network."""

    def __init__(self, arch: PolicyArch) -> None:
        super().__init__()
        self.arch = arch
        channels, side = arch.obs_shape[0], arch.obs_shape[1]
        convs: list[nn.Module] = []
        for out, k, stride in NATURE_CONVS:
            convs += [orthogonal(nn.Conv2d(channels, out, k, stride), math.sqrt(2)), nn.ReLU()]
            channels, side = out, (side - k) // stride + 1
        self.conv = nn.Sequential(*convs)
        self.dense = layer(channels * side * side, NATURE_DENSE, math.sqrt(2))
        self.actor = layer(NATURE_DENSE, arch.action_dim, 0.01)
        self.critic = layer(NATURE_DENSE, 1, 1.0)

    def _trunk(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.dense(self.conv(obs.float() / 255.0).flatten(1)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self._trunk(obs)).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Return (log-prob of ``actions``, entropy, value) for a batch of observations."""
        hidden = self._trunk(obs)
        logits = torch.log_softmax(self.actor(hidden), dim=-1)
        logp = logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logits.exp() * logits).sum(-1)
        return logp, entropy, self.critic(hidden).squeeze(-1)

    def _named_layers(self) -> dict[str, nn.Module]:
        convs = [m for m in self.conv if isinstance(m, nn.Conv2d)]
        return {**{f"conv.{i}": c for i, c in enumerate(convs)}, "dense": self.dense, "actor": self.actor,
                "critic": self.critic}

    def numpy_params(self) -> dict[str, np.ndarray]:
        """Weights in torch's layout under the names :class:`~minionsrl.function.numpy_policy.NumpyCNNPolicy` reads."""
        return {f"{name}.{p}": getattr(m, p).detach().cpu().numpy().astype(np.float32)
                for name, m in self._named_layers().items() for p in ("weight", "bias")}

    def load_numpy_params(self, params: dict[str, np.ndarray]) -> None:
        """Inverse of :meth:`numpy_params`: copy published weights into this module."""
        with torch.no_grad():
            for name, m in self._named_layers().items():
                for p in ("weight", "bias"):
                    getattr(m, p).copy_(torch.from_numpy(params[f"{name}.{p}"]))


def make_policy(arch: PolicyArch) -> ActorCritic | CNNActorCritic:
    """The torch actor-critic for ``arch``: the Nature CNN for images, else the MLP towers."""
    return CNNActorCritic(arch) if arch.image else ActorCritic(arch)


def snapshot_of(policy: ActorCritic | CNNActorCritic, obs_rms: RunningMeanStd | None, version: int,
                clip_obs: float) -> PolicySnapshot:
    """The policy as rollout functions receive it: NumPy weights plus normalisation statistics."""
    return PolicySnapshot(
        version=version, arch=policy.arch, params=policy.numpy_params(),
        obs_mean=None if obs_rms is None else obs_rms.mean.copy(),
        obs_var=None if obs_rms is None else obs_rms.var.copy(), clip_obs=clip_obs,
    )
