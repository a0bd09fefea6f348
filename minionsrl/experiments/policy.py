"""A trained policy in code: ``minionsrl.load_policy(run_dir).act(obs)``, on NumPy alone; :func:`evaluate`.

The policy runs exactly as rollout functions run it: the run's weights in
:class:`~minionsrl.function.numpy_policy.NumpyPolicy` (or the Nature CNN), observations normalised with the
saved running statistics by the rollout function's own normaliser, continuous actions clipped to the action
space's bounds, discrete ones the argmax of the logits (deterministic) or a Gumbel-max draw (stochastic).
Neither JAX nor torch is imported: a trained policy deploys wherever a rollout function runs.

A run directory is data, not trusted code: its ``config.yaml`` is checked as ``minionsrl eval`` checks it
(every field's type and rule, the env id, the env's spaces), and the checkpoint's weights must have exactly
the names and shapes that config's network has. A custom entry point in the config is imported (it is code:
load only runs you trust to name modules).
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np

from minionsrl import config, files
from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.function.envs import EnvInfo, EnvSpec, env_info, make_env, search_for_env_code
from minionsrl.function.fragment import PolicySnapshot
from minionsrl.function.normalization import ObsNormalizer, RunningMeanStd
from minionsrl.function.numpy_policy import PolicyArch, choose_action, exploration_noise, param_shapes
from minionsrl.loop import checkpoint
from minionsrl.prepare import prepare_config

if TYPE_CHECKING:
    from minionsrl.loop.trainer import Trainer

__all__ = ["Policy", "Prediction", "current_policy", "evaluate", "load_policy"]


class Prediction(NamedTuple):
    """What :meth:`Policy.predict` returns, as Stable-Baselines3's ``predict`` does: ``action, state =
    policy.predict(obs)``. ``state`` is always None (the policies are feed-forward)."""

    action: Any
    state: None


WHICH = {"latest": checkpoint.LATEST, "best": checkpoint.BEST}  # a run dir's policies, by name
# How far below the best evaluation the last one may fall before loading the last round's policy says so: a tenth
# of the best's size (CartPole: 450 of 500). Evaluations are a few deterministic episodes: closer is noise.
WELL_BELOW = 0.1


def well_below(last_eval: float | None, best_eval: float | None) -> bool:
    """Whether the last evaluation fell well below the best (by more than :data:`WELL_BELOW` of the best's
    size): then the last round's policy is not the run's good one, and ``which="best"`` is."""
    if last_eval is None or best_eval is None or not (math.isfinite(last_eval) and math.isfinite(best_eval)):
        return False
    return best_eval - last_eval > WELL_BELOW * max(abs(best_eval), 1.0)


def worse_than_best(last_eval: float, best_eval: float, best_round: int, last_round: int) -> str:
    """What loading the last round's policy says when it is :func:`well_below` the best."""
    return (f"the last round's policy (round {last_round}) evaluated {last_eval:.1f} in the run's last evaluation, "
            f"well below the best evaluation, {best_eval:.1f} (round {best_round}): which=\"best\" (minionsrl eval "
            "--which best) loads that one")


class WorseThanBest(UserWarning):
    """``load_policy(run_dir)`` loaded the last round's policy, whose evaluation fell well below the run's best."""


def _missing(run_dir: Path, which: str) -> str:
    """What to say of a run dir without the checkpoint ``which`` names: not written yet, or gone from a finished run
    (which writes its latest one), and the other policy where that one is there."""
    name, other = WHICH[which], next(w for w in WHICH if w != which)
    if which == "latest" and (run_dir / files.SUMMARY).exists():
        said = f"has lost its checkpoint {name} (a finished run wrote it: restore it from a copy)"
    else:
        said = f"has no checkpoint yet ({name})"
    if which == "best":
        said += " (no evaluation has run yet, or the run predates best checkpoints)"
    if (run_dir / files.CHECKPOINTS / WHICH[other]).exists():
        said += f"; which={other!r} (minionsrl eval --which {other}) loads {WHICH[other]}, which is there"
    return said


def load_policy(path: str | Path | Mapping[str, Any], seed: int | None = None, what: str = "load_policy",
                trust_run_code: bool = False, which: str = "latest") -> Policy:
    """The policy of a run directory or of one checkpoint file in it (``RUN_DIR/checkpoints/round-NNNNN.safetensors``),
    or of the run whose summary ``train`` returned (``load_policy(train(cfg))``).
    Of a run directory, ``which`` policy: ``"latest"`` (the default: the last round's, as Stable-Baselines3's and
    CleanRL's saved models are) or ``"best"`` (the one with the best evaluation return,
    ``checkpoints/best.safetensors``). When the last round's policy evaluated well below the best (by more than a
    tenth of the best's return, :func:`well_below`), loading it warns (:class:`WorseThanBest`), naming both returns
    and ``which="best"``. :meth:`Policy.predict`, :meth:`Policy.act` and ``minionsrl eval`` use the policy loaded
    here, so the same default and warning hold for them. ``seed`` seeds the draws of ``act(obs,
    deterministic=False)``; ``what`` names the input in errors. A custom entry point in the run's config is
    imported from ``sys.path`` as it stands; ``trust_run_code`` also imports it from the run directory, then
    the current folder (code shipped with the run: trust it first).

    Raises :class:`~minionsrl.errors.ConfigError` (a ``ValueError``) naming the problem when the path holds no
    run or checkpoint, or when either fails the checks."""
    if which not in WHICH:
        raise ConfigError(f"{what}: which={which!r}; choose one of {', '.join(map(repr, WHICH))}")
    if isinstance(path, Mapping):
        if not isinstance(path.get("run_dir"), str):
            raise ConfigError(f"{what}: a mapping given is a run's summary (what train() returns), with its run_dir; "
                              "this one has none: pass the run directory instead")
        path = path["run_dir"]
    run_dir, ckpt = _locate(Path(path), WHICH[which], what)
    with search_for_env_code([run_dir, Path.cwd()] if trust_run_code else []):
        cfg, info = run_config(run_dir / files.CONFIG, what)
    try:
        state = checkpoint.load(ckpt.parent, ckpt.name)
    except ConfigError as exc:  # checkpoint.load words its error for --resume
        cause = exc.__cause__
        reason = checkpoint.unreadable(cause) if isinstance(cause, Exception) else str(exc).partition("(")[2][:-1]
        raise ConfigError(f"{what}: checkpoint {str(ckpt)!r} cannot be read ({reason})") from exc
    if state is None:
        raise ConfigError(f"{what}: {str(run_dir)!r} {_missing(run_dir, which)}")
    arch = PolicyArch.of(info, cfg.learner.hidden_sizes)
    obs_mean = obs_var = None
    if cfg.learner.normalize_obs:
        rms = _obs_rms(state.get("obs_rms"), arch.obs_dim, ckpt)
        obs_mean, obs_var = rms.mean, rms.var
    snapshot = PolicySnapshot(_round(state, ckpt), arch, _weights(state.get("policy"), arch, ckpt), obs_mean,
                              obs_var, cfg.learner.clip_obs)
    if ckpt.name == checkpoint.LATEST:
        _warn_if_worse_than_best(state, snapshot.version)
    return Policy(snapshot, cfg, info, seed)


def _warn_if_worse_than_best(state: dict[str, Any], last_round: int) -> None:
    """Warn when the run's last evaluation (in the latest checkpoint) fell well below its best one."""
    last, best, best_round = state.get("last_eval"), state.get("best_eval"), state.get("best_round")
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (last, best, best_round))
    if numbers and well_below(float(last), float(best)):
        warnings.warn(worse_than_best(float(last), float(best), int(best_round), last_round), WorseThanBest,
                      stacklevel=3)


_INFOS: weakref.WeakKeyDictionary[Any, EnvInfo] = weakref.WeakKeyDictionary()  # a trainer's env, built once


def current_policy(trainer: Trainer, seed: int | None = None) -> Policy:
    """A running trainer's policy as it stands (its last update's weights and observation statistics), on NumPy:
    for a :class:`~minionsrl.experiments.training.Callback` that evaluates it, saves it or looks at it."""
    cfg = trainer.session.cfg
    if trainer not in _INFOS:
        _INFOS[trainer] = env_info(EnvSpec(cfg.env.env_id, cfg.env.env_kwargs))
    return Policy(trainer.learner.snapshot(trainer.round), cfg, _INFOS[trainer], seed)


class Policy:
    """A trained policy: ``predict`` maps raw observations (as the env returns them) to the env's actions.

    ``config`` is the run's resolved :class:`~minionsrl.config.TrainConfig`, ``round`` the round its weights
    come from; :meth:`make_env` builds the env as the rollout functions did (Atari's preprocessing included).
    """

    def __init__(self, snapshot: PolicySnapshot, cfg: TrainConfig, info: EnvInfo, seed: int | None = None) -> None:
        self.snapshot, self.config, self.info = snapshot, cfg, info
        self.arch = snapshot.arch
        self.round = snapshot.version
        self.env_id = cfg.env.env_id
        self._normalize = ObsNormalizer(snapshot.obs_mean, snapshot.obs_var, snapshot.clip_obs,
                                        snapshot.arch.image)
        self._net = snapshot.numpy_policy()
        self._rng = np.random.default_rng(seed)
        self._low = self._high = None
        if not self.arch.discrete:  # the bounds as a rollout function clips with them
            self._low = np.asarray(info.action_low, dtype=np.float32)
            self._high = np.asarray(info.action_high, dtype=np.float32)

    def predict(self, obs: Any, state: None = None, episode_start: Any = None,
                deterministic: bool = True) -> Prediction:
        """``(action, None)`` for ``obs``, Stable-Baselines3's shape (``action, _ = policy.predict(obs)``), so that
        code written for it runs; ``state`` and ``episode_start`` are accepted and ignored (no recurrent state).
        The action is :meth:`act`'s; unlike SB3, ``deterministic`` defaults to True."""
        return Prediction(self.act(obs, deterministic), None)

    def act(self, obs: Any, deterministic: bool = True) -> Any:
        """The action for one observation, or an array of actions for a batch ``(B, *observation shape)``.

        Discrete: an ``int`` (a batch: int64 array). Continuous: a float32 array clipped to the action space's
        bounds (a batch: ``(B, action_dim)``). ``deterministic=False`` samples as rollout functions do in
        training (Gumbel-max over the logits; Gaussian noise with the learnt std before clipping)."""
        x, single = self._inputs(obs)
        head, _ = self._net.forward(x)
        head = np.asarray(head)
        noise: np.ndarray | float = 0.0
        if not deterministic:  # drawn as rollout functions draw it in training
            noise = exploration_noise(self._rng, head.shape, self.arch.discrete, self._net.std)
        _, actions = choose_action(head, noise, self.arch.discrete, self._low, self._high)
        if self.arch.discrete:
            return int(actions) if single else actions.astype(np.int64)
        return actions.astype(np.float32)

    def value(self, obs: Any) -> Any:
        """The critic's estimate V(obs): a float for one observation, an array for a batch."""
        x, single = self._inputs(obs)
        _, v = self._net.forward(x)
        return float(v) if single else np.asarray(v, dtype=np.float32)

    def make_env(self, render_mode: str | None = None) -> gym.Env:
        """The run's environment as its rollout functions built it (for Atari: the preprocessing and frame stack
        whose uint8 stacks :meth:`predict` expects)."""
        return make_env(EnvSpec(self.config.env.env_id, self.config.env.env_kwargs), render_mode=render_mode)

    def _inputs(self, obs: Any) -> tuple[np.ndarray, bool]:
        """The network's input for ``obs`` (normalised as a rollout function does it), and whether it is one
        observation."""
        x = np.asarray(obs)
        shape = tuple(self.info.obs_shape)
        if x.shape == shape:
            single = True
        elif x.ndim == len(shape) + 1 and x.shape[1:] == shape:
            single = False
        else:
            raise ValueError(f"predict: observation of shape {x.shape}; {self.env_id} observations have shape "
                             f"{shape} (a batch: (B, {', '.join(map(str, shape))}))")
        if self.arch.image:
            if x.dtype != np.uint8:
                raise ValueError(f"predict: image observations are uint8 frame stacks as the env gives them, not "
                                 f"{x.dtype} (build the env with Policy.make_env())")
        else:  # the MLP reads flattened observations
            x = x.reshape(self.arch.obs_dim) if single else x.reshape(len(x), self.arch.obs_dim)
        return self._normalize(x), single

    def __repr__(self) -> str:
        kind = "discrete" if self.arch.discrete else "continuous"
        return f"Policy({self.env_id}, round {self.round}, {self.arch.net} {kind}, {self.arch.action_dim} actions)"


def _locate(path: Path, name: str, what: str) -> tuple[Path, Path]:
    """(run dir, checkpoint file) for a run directory (its checkpoint ``name``) or one of its checkpoint files."""
    if path.is_dir():
        files.config_path(path, what, "pass a run directory written by `minionsrl train` or a checkpoint file in it")
        return path, checkpoint.dir_of(path) / name
    if path.is_file():
        for run_dir in (path.parent.parent, path.parent):  # RUN_DIR/checkpoints/X.safetensors, or beside it
            if (run_dir / files.CONFIG).exists():
                return run_dir, path
        raise ConfigError(f"{what}: no {files.CONFIG} beside checkpoint {str(path)!r} (expected in its run "
                          "directory, RUN_DIR/checkpoints/NAME.safetensors)")
    raise ConfigError(f"{what}: {str(path)!r} does not exist")


def run_config(cfg_path: Path, what: str = "--run-dir") -> tuple[TrainConfig, EnvInfo]:
    """A run directory's ``config.yaml``, checked exactly as ``minionsrl train`` checks its input (field types
    and rules, the env id — a custom entry point must name a ``gymnasium.Env`` subclass — and its spaces)
    before anything it names is built. What only training uses is reset, neither used nor checked: where the
    run's functions ran (backend, Ray address, Lithops config: the local backend instead), the learner's device
    (so no framework is loaded to look for a GPU) and tracking. ``what`` names the input in the error."""
    try:
        cfg = config.build(config.load_yaml(cfg_path, saved=True))
        local = cfg.replace(backend="local", ray_address=None, lithops_config=None, device="cpu",
                            track=False)
        return prepare_config(local)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {str(cfg_path)!r} is refused: {exc}") from exc


def _round(state: dict[str, Any], ckpt: Path) -> int:
    value = state.get("round")
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ConfigError(f"load_policy: checkpoint {str(ckpt)!r} has no round number")
    return int(value)


def _weights(saved: Any, arch: PolicyArch, ckpt: Path) -> dict[str, np.ndarray]:
    """The checkpoint's weights, checked against the network of the run's config: same names, same shapes,
    finite numbers."""
    where = f"load_policy: checkpoint {str(ckpt)!r}"
    if not isinstance(saved, dict):
        raise ConfigError(f"{where} holds no policy weights")
    expected = param_shapes(arch)
    if set(saved) != set(expected):
        missing, extra = sorted(set(expected) - set(saved)), sorted(set(saved) - set(expected))
        raise ConfigError(f"{where} does not match the network of its {files.CONFIG} (missing {missing}, "
                          f"unexpected {extra})")
    weights: dict[str, np.ndarray] = {}
    for name, shape in expected.items():
        problem = checkpoint.array_problem(saved[name], shape)
        if problem:
            raise ConfigError(f"{where}: {name} {problem} (the config's network has a float array of shape "
                              f"{shape})")
        weights[name] = saved[name].astype(np.float32)
    return weights


def _obs_rms(saved: Any, obs_dim: int, ckpt: Path) -> RunningMeanStd:
    """The saved observation statistics (the run normalised observations), checked."""
    where = f"load_policy: checkpoint {str(ckpt)!r}"
    if not isinstance(saved, dict) or not {"mean", "var", "count"} <= set(saved):
        raise ConfigError(f"{where} has no observation statistics, but its config normalises observations")
    rms = RunningMeanStd((obs_dim,))
    try:
        rms.load_state_dict(saved)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: its observation statistics cannot be read ({exc})") from exc
    if rms.mean.shape != (obs_dim,) or rms.var.shape != (obs_dim,):
        raise ConfigError(f"{where}: observation statistics of shape {rms.mean.shape}, expected ({obs_dim},)")
    if not (np.isfinite(rms.mean).all() and np.isfinite(rms.var).all() and (rms.var >= 0).all()):
        raise ConfigError(f"{where}: its observation statistics are not finite non-negative variances")
    return rms


def evaluate(policy: Policy | str | Path, env: gym.Env | str | None = None, n_episodes: int = 10,
             deterministic: bool = True, seed: int = 10_000) -> tuple[float, float]:
    """``(mean, std)`` of the returns of ``n_episodes`` episodes of ``policy``, Stable-Baselines3's
    ``evaluate_policy`` shape. ``policy``: a :class:`Policy`, or a run directory or checkpoint to load one from;
    ``env``: an env (left open), an env id (built as the rollout functions build it), or None for the run's own
    env. Episode ``i`` is reset with ``seed + i`` (the default is ``minionsrl eval``'s, so both agree); returns are
    the env's raw rewards over full games (Atari), as the run's evaluations count them."""
    from minionsrl.function.rollout import evaluate as run_episodes  # the rollout functions' evaluation loop

    if not isinstance(policy, Policy):
        policy = load_policy(policy, what="evaluate")
    if n_episodes < 1:
        raise ConfigError(f"evaluate: n_episodes={n_episodes} must be >= 1")
    if env is None or env == policy.env_id:
        built: gym.Env | None = policy.make_env()
    elif isinstance(env, str):
        built = make_env(EnvSpec(env, {}))
    elif isinstance(env, gym.Env):
        built = None
    else:
        raise ConfigError(f"evaluate: env is a {type(env).__name__}; pass a gymnasium.Env (not a vector env), an "
                          "env id, or None for the run's own env")
    choose = None if deterministic else (lambda obs: policy.act(obs, deterministic=False))
    try:
        returns, _ = run_episodes(built or env, policy.snapshot, policy._net, n_episodes, seed, choose)
    finally:
        if built is not None:
            built.close()
    return float(returns.mean()), float(returns.std())
