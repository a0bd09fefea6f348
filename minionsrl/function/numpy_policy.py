"""Policy inference and initial weights in NumPy, the way rollout functions run it (no framework import: cold
starts stay short).

The learner's JAX networks (:mod:`minionsrl.learner.networks`) keep their weights in the layout read
here. Actor and critic towers are fused into one wider network (first layers side by side, deeper
layers block-diagonal) so one step costs three small matmuls instead of six.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from minionsrl.function.normalization import clip

if TYPE_CHECKING:
    from minionsrl.function.envs import EnvInfo

LOG_2PI = math.log(2.0 * math.pi)

# Initial weights are made in NumPy, the learner's and the learned scheduler's: in JAX, op by op, every layer's
# shape compiled half a dozen small programs (0.7 s of a CartPole process's start-up) for arrays made once.
Weights = dict[str, np.ndarray]


def orthogonal(rng: np.random.Generator, n_out: int, n_in: int, gain: float) -> np.ndarray:
    """An ``(out, in)`` orthogonal matrix scaled by ``gain``, as torch's ``nn.init.orthogonal_`` (CleanRL) makes it:
    the QR decomposition of a Gaussian matrix, Q's columns signed by R's diagonal so that Q is uniformly
    distributed (Saxe et al. 2014), transposed when the matrix is wide."""
    q, r = np.linalg.qr(rng.standard_normal((max(n_out, n_in), min(n_out, n_in))))
    q *= np.sign(np.diag(r))
    return (gain * (q if n_out >= n_in else q.T)).astype(np.float32)


def linear_params(rng: np.random.Generator, name: str, n_in: int, n_out: int, gain: float) -> Weights:
    """``name.weight`` (orthogonal, gain ``gain``, torch's ``(out, in)`` layout) and a zero ``name.bias``."""
    return {f"{name}.weight": orthogonal(rng, n_out, n_in, gain), f"{name}.bias": np.zeros(n_out, np.float32)}


def mlp_params(rng: np.random.Generator, name: str, sizes: tuple[int, ...], last_std: float) -> Weights:
    """A tanh MLP ``sizes[0] → … → sizes[-1]`` as ``name.{i}.weight/bias``: hidden layers with gain √2, the
    last with ``last_std``."""
    gains = [math.sqrt(2)] * (len(sizes) - 2) + [last_std]
    out: Weights = {}
    for i, gain in enumerate(gains):
        out |= linear_params(rng, f"{name}.{i}", sizes[i], sizes[i + 1], gain)
    return out


def mlp_layers(params: Mapping[str, object], name: str) -> int:
    """How many layers the MLP ``name`` in ``params`` has (as made by :func:`mlp_params`)."""
    return sum(1 for k in params if k.startswith(f"{name}.") and k.endswith(".weight"))


@dataclass(frozen=True)
class PolicyArch:
    """Shape of the actor-critic; travels in the published policy's metadata.

    ``net="mlp"``: tanh MLP towers over flattened float observations. ``net="cnn"``: the Nature CNN
    over uint8 image stacks ``obs_shape = (frames, 84, 84)`` (``hidden`` is unused).
    """

    obs_dim: int
    action_dim: int
    discrete: bool
    hidden: tuple[int, ...]
    net: str = "mlp"
    obs_shape: tuple[int, ...] = ()

    @property
    def image(self) -> bool:
        """Observations are uint8 image stacks (they travel and are stored as uint8)."""
        return self.net == "cnn"

    @property
    def step_obs_shape(self) -> tuple[int, ...]:
        """Shape of one step's observation as fragments carry it."""
        return self.obs_shape if self.image else (self.obs_dim,)

    def to_json(self) -> dict:
        return {"obs_dim": self.obs_dim, "action_dim": self.action_dim, "discrete": self.discrete,
                "hidden": list(self.hidden), "net": self.net, "obs_shape": list(self.obs_shape)}

    @classmethod
    def of(cls, info: EnvInfo, hidden: Sequence[int]) -> PolicyArch:
        """The architecture for an environment's spaces: the CNN for image stacks, else an MLP over
        flattened observations."""
        if len(info.obs_shape) == 3 and info.discrete:
            return cls(int(np.prod(info.obs_shape)), info.action_dim, True, (), "cnn", tuple(info.obs_shape))
        return cls(int(np.prod(info.obs_shape)), info.action_dim, info.discrete, tuple(hidden))

    @classmethod
    def from_json(cls, data: dict) -> PolicyArch:
        net = str(data.get("net", "mlp"))
        if net not in ("mlp", "cnn"):
            raise ValueError(f"unknown policy network {net!r}")
        return cls(int(data["obs_dim"]), int(data["action_dim"]), bool(data["discrete"]),
                   tuple(int(h) for h in data["hidden"]), net, tuple(int(d) for d in data.get("obs_shape", ())))


# The Nature CNN (Mnih et al. 2015): (out channels, kernel, stride) of the three convolutions, then a
# 512-unit dense layer; ReLU throughout, inputs scaled by 1/255.
NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
NATURE_DENSE = 512


def param_shapes(arch: PolicyArch) -> dict[str, tuple[int, ...]]:
    """The names and shapes of the weights of ``arch``: the layout this module reads, which the learner's
    networks keep and checkpoint."""
    shapes: dict[str, tuple[int, ...]] = {}
    if arch.image:
        channels = arch.obs_shape[0]
        for i, (out, k, _) in enumerate(NATURE_CONVS):
            shapes[f"conv.{i}.weight"], shapes[f"conv.{i}.bias"] = (out, channels, k, k), (out,)
            channels = out
        layers = [("dense", channels * conv_side(arch.obs_shape[1]) ** 2, NATURE_DENSE),
                  ("actor", NATURE_DENSE, arch.action_dim), ("critic", NATURE_DENSE, 1)]
    else:
        layers = []
        for tower, width in (("actor", arch.action_dim), ("critic", 1)):
            sizes = (arch.obs_dim, *arch.hidden, width)
            layers += [(f"{tower}.{i}", sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)]
        if not arch.discrete:
            shapes["log_std"] = (arch.action_dim,)
    for name, n_in, n_out in layers:
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (n_out, n_in), (n_out,)
    return shapes


def make_numpy_policy(arch: PolicyArch, params: dict[str, np.ndarray]) -> NumpyPolicy | NumpyCNNPolicy:
    """The NumPy inference policy for ``arch``."""
    return NumpyCNNPolicy(arch, params) if arch.image else NumpyPolicy(arch, params)


def tanh_mlp(x: np.ndarray, layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """A tanh MLP in NumPy: ``x @ w + b`` for each layer ``(w, b)`` (``w`` laid out ``(in, out)``), a tanh between
    them; the NumPy twin of :func:`minionsrl.learner.networks.mlp` (rollout functions and the learned scheduler
    run it without JAX)."""
    last = len(layers) - 1
    for i, (w, b) in enumerate(layers):
        x = x @ w + b
        if i < last:
            x = np.tanh(x)
    return x


class ActionHead:
    """The action distribution a policy's head parameterises: categorical over logits, or a Gaussian of
    state-independent ``log_std`` around the mean. Log-probabilities in float64, returned as float32."""

    def __init__(self, discrete: bool, log_std: np.ndarray | None = None) -> None:
        self.discrete = discrete
        self.log_std = None if discrete else np.asarray(log_std).astype(np.float32).reshape(-1)
        self.std = None if self.log_std is None else np.exp(self.log_std)

    def log_prob(self, heads: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` under the distributions given by ``heads`` (batched)."""
        if self.discrete:
            heads = heads.astype(np.float64)
            top = heads.max(axis=-1, keepdims=True)
            lse = top[..., 0] + np.log(np.exp(heads - top).sum(axis=-1))
            chosen = np.take_along_axis(heads, actions.astype(np.int64)[..., None], axis=-1)[..., 0]
            return (chosen - lse).astype(np.float32)
        z = (actions.astype(np.float64) - heads) / self.std
        logp = -0.5 * (z**2).sum(axis=-1) - self.log_std.astype(np.float64).sum() - 0.5 * z.shape[-1] * LOG_2PI
        return logp.astype(np.float32)


def exploration_noise(rng: np.random.Generator, shape: tuple[int, ...], discrete: bool,
                      std: np.ndarray | None) -> np.ndarray:
    """Exploration noise for heads of ``shape``, for :func:`choose_action`: Gumbel for discrete actions (Gumbel-max
    samples the categorical), Gaussian times the policy's ``std`` for continuous ones (float32)."""
    if discrete:
        return rng.gumbel(size=shape)
    return (rng.standard_normal(shape) * std).astype(np.float32)


def choose_action(head: np.ndarray, noise: np.ndarray | float, discrete: bool, low: np.ndarray | None,
                  high: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(the action as recorded, the action the env steps) from a policy's ``head`` (batched or not) and its
    exploration ``noise`` (0: the greedy action). Discrete: the argmax of the logits plus Gumbel noise, a sample
    of the categorical. Continuous: the mean plus Gaussian noise, clipped to ``[low, high]`` only for the env, so
    the recorded action keeps its log-probability under the unclipped Gaussian (CleanRL's way)."""
    if discrete:
        action = np.argmax(head + noise, axis=-1)
        return action, action
    action = head + noise
    return action, clip(action, low, high)


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
        self.layers = list(zip(self.weights, self.biases, strict=True))
        self.head = ActionHead(arch.discrete, None if arch.discrete else params["log_std"])
        self.log_std, self.std = self.head.log_std, self.head.std

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (action head, value) for one observation ``(obs_dim,)`` or a batch ``(B, obs_dim)``.

        The head is the logits (discrete) or the Gaussian mean (continuous).
        """
        h = tanh_mlp(obs, self.layers)
        return h[..., :-1], h[..., -1]

    def log_prob(self, heads: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` under the distributions given by ``heads`` (batched)."""
        return self.head.log_prob(heads, actions)


class NumpyCNNPolicy:
    """The Nature CNN actor-critic in NumPy: convolutions as one im2col matmul each, in NHWC layout.

    A strided convolution whose kernel is a multiple of its stride (8/4 and 4/2 here) runs as a stride-1 convolution
    over space-to-depth blocks (each ``stride × stride`` patch folded into the channels): its im2col then copies runs
    of whole channel vectors rather than one float at a time (the first convolution's strided window copy, 4 floats
    at a time, took 0.33 ms, more than the three convolutions' matmuls). Weights come in torch's layout and are
    reordered once here, so a step needs no transposes but the input's.
    """

    def __init__(self, arch: PolicyArch, params: dict[str, np.ndarray]) -> None:
        self.arch, self.head = arch, ActionHead(discrete=True)  # Atari: categorical
        self.log_std, self.std = None, None
        self.convs: list[_Conv] = []
        side = arch.obs_shape[1]
        for i, (_, k, stride) in enumerate(NATURE_CONVS):
            self.convs.append(_Conv.of(params[f"conv.{i}.weight"], params[f"conv.{i}.bias"], k, stride, side))
            side = self.convs[-1].out_side
        dense = params["dense.weight"]  # (512, C·H·W) in torch's CHW order
        channels = NATURE_CONVS[-1][0]
        dense = dense.reshape(-1, channels, side, side).transpose(0, 2, 3, 1).reshape(dense.shape[0], -1)
        self.dense_w = np.ascontiguousarray(dense.T, dtype=np.float32)
        self.dense_b = params["dense.bias"].astype(np.float32)
        # actor and critic heads fused into one matmul: logits then the value
        self.head_w = np.ascontiguousarray(np.concatenate([params["actor.weight"].T, params["critic.weight"].T],
                                                          axis=1), dtype=np.float32)
        self.head_b = np.concatenate([params["actor.bias"], params["critic.bias"]]).astype(np.float32)
        self.conv_scale = np.float32(1.0 / 255.0)

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits, value) for one uint8 stack ``(C, H, W)`` or a batch ``(B, C, H, W)``."""
        single = obs.ndim == 3
        x = (obs[None] if single else obs).transpose(0, 2, 3, 1)  # NHWC, still uint8: the first fold copies bytes
        for i, conv in enumerate(self.convs):
            x = conv(x, self.conv_scale if i == 0 else None)
        h = np.maximum(x.reshape(len(x), -1) @ self.dense_w + self.dense_b, 0.0)
        out = h @ self.head_w + self.head_b
        if single:
            out = out[0]
        return out[..., :-1], out[..., -1]

    def log_prob(self, heads: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` under the categorical distributions of ``heads`` (batched)."""
        return self.head.log_prob(heads, actions)


def conv_side(size: int) -> int:
    """The side of the Nature CNN's last feature maps for square frames of side ``size`` (valid convolutions)."""
    for _, k, stride in NATURE_CONVS:
        size = (size - k) // stride + 1
    return size


@dataclass(frozen=True)
class _Conv:
    """One valid convolution with ReLU, NHWC, as space-to-depth by ``fold`` (the stride when it divides the
    kernel, else 1), then a stride-1 im2col of ``q × q`` blocks and one matmul with ``w`` of shape
    (q·q·fold·fold·C, out). ``side`` is the input side the layer reads: the rows and columns past the last window
    are cropped before folding."""

    w: np.ndarray
    b: np.ndarray
    fold: int
    q: int
    out_side: int

    @classmethod
    def of(cls, weight: np.ndarray, bias: np.ndarray, k: int, stride: int, side: int) -> _Conv:
        """The layer of torch-layout ``weight`` (out, C, k, k) over inputs of side ``side``."""
        fold = stride if k % stride == 0 else 1
        if fold == 1 and stride != 1:
            raise ValueError(f"a {k}x{k} convolution of stride {stride}: the kernel is not a multiple of the stride")
        q, out_c, c = k // fold, weight.shape[0], weight.shape[1]
        # (out, C, qy, ry, qx, rx) -> rows ordered (qy, qx, ry, rx, C), as the folded im2col lays its columns out
        w = weight.reshape(out_c, c, q, fold, q, fold).transpose(2, 4, 3, 5, 1, 0).reshape(-1, out_c)
        return cls(np.ascontiguousarray(w, dtype=np.float32), bias.astype(np.float32), fold, q,
                   (side - k) // stride + 1)

    def __call__(self, x: np.ndarray, scale: np.float32 | None) -> np.ndarray:
        """The layer's output for NHWC ``x``; ``scale`` turns uint8 input into floats (the first layer)."""
        b, _, _, c = x.shape
        f, q, ho = self.fold, self.q, self.out_side
        if f > 1:  # fold f x f patches into the channels: (B, H/f, W/f, f·f·C)
            blocks = ho + q - 1
            x = x[:, : blocks * f, : blocks * f].reshape(b, blocks, f, blocks, f, c)
            x = x.transpose(0, 1, 3, 2, 4, 5).reshape(b, blocks, blocks, f * f * c)
        if scale is not None:
            x = x.astype(np.float32) * scale
        cols = np.concatenate([x[:, i: i + ho, j: j + ho] for i in range(q) for j in range(q)], axis=-1) \
            if q > 1 else x[:, :ho, :ho]
        y = cols.reshape(b * ho * ho, -1) @ self.w + self.b
        return np.maximum(y, 0.0, out=y).reshape(b, ho, ho, -1)
