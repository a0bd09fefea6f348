"""The package's optional extras, and the one line a user gets when a feature needs one that is not installed.

The core install (``pip install minionsrl``) trains classic-control envs on the ``local`` backend. Heavier
parts are extras (``pyproject.toml``): each check here runs before any work starts and names the extra to
install, e.g. ``--capture-video needs the video extra: pip install 'minionsrl[video]'``. Modules are
looked up with :func:`importlib.util.find_spec`, so a check imports nothing (this module is imported inside
rollout functions too).
"""

from __future__ import annotations

import importlib.util

from minionsrl.errors import ConfigError

# extra -> the top-level modules it provides that minionsrl (or Gymnasium, for it) imports
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "mujoco": ("mujoco",),
    "box2d": ("Box2D",),
    "video": ("moviepy", "pygame"),  # pygame: the pygame-ce distribution (Gymnasium's classic-control frames)
    "tb": ("tensorboardX",),
    "atari": ("ale_py", "cv2"),
    "ray": ("ray",),
    "lithops": ("lithops",),
    "wandb": ("wandb",),
}


def installed(module: str) -> bool:
    """Whether the top-level ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def missing_extra_error(what: str, extra: str, alternative: str = "") -> ConfigError:
    """The one-line error for ``what`` (a flag, an env id) needing the ``extra`` that is not installed;
    ``alternative`` says how to do without it (``pass --no-tensorboard``)."""
    return ConfigError(f"{what} needs the {extra} extra: pip install 'minionsrl[{extra}]'"
                       + (f" (or {alternative})" if alternative else ""))


def require_extra(what: str, extra: str, alternative: str = "") -> None:
    """Raise :func:`missing_extra_error` unless every module of ``extra`` is installed."""
    if not all(installed(m) for m in EXTRA_MODULES[extra]):
        raise missing_extra_error(what, extra, alternative)


def check_tensorboard(enabled: bool) -> None:
    """TensorBoard event files (``--tensorboard``, on by default) need tensorboardX: a core dependency, also
    in the ``tb`` extra, so this fails only where it was removed."""
    if enabled:
        require_extra("--tensorboard", "tb", "pass --no-tensorboard")
