"""The package's optional extras, and the one line a user gets when a feature needs one that is not installed.

The core install (``pip install minionsrl``) trains classic-control envs on the ``local`` backend. Heavier
parts are extras (``pyproject.toml``): each check here runs before any work starts and names the extra to
install, e.g. ``--capture-video needs the video extra: .venv/bin/python -m pip install -c constraints.txt -e
'.[video]'`` (:func:`install_hint`: the command that works where the user is). Modules are looked up with
:func:`importlib.util.find_spec`, so a check imports nothing (this module is imported inside rollout functions
too).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shlex
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

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


def _shown(path: str | Path) -> str:
    """A path as the user would type it: relative when under the current folder (``.venv/bin/python``), absolute
    otherwise (not resolved: a venv's interpreter is a link that must stay one)."""
    text, cwd = os.path.abspath(path), os.getcwd()
    if text == cwd:
        return "."
    return os.path.relpath(text, cwd) if text.startswith(cwd + os.sep) else text


def _source_tree() -> Path | None:
    """The source checkout this minionsrl is imported from (a clone, editable install or not), else None."""
    root = Path(__file__).resolve().parents[2]  # minionsrl/function/extras.py -> the folder holding minionsrl/
    pyproject = root / "pyproject.toml"
    try:
        if pyproject.is_file() and 'name = "minionsrl"' in pyproject.read_text(errors="replace"):
            return root
    except OSError:
        pass
    return None


def _installed_from() -> tuple[Path, bool] | None:
    """The local folder pip installed minionsrl from and whether editably (``direct_url.json``, PEP 610), or None:
    installed from an index or a wheel, or the record is unreadable."""
    try:
        record = importlib.metadata.distribution("minionsrl").read_text("direct_url.json")
        url = json.loads(record) if record else {}
    except (importlib.metadata.PackageNotFoundError, OSError, ValueError):
        return None
    parsed = urlparse(str(url.get("url", "")))
    if "dir_info" not in url or parsed.scheme != "file":
        return None
    folder = Path(unquote(parsed.path))
    return (folder, bool(url["dir_info"].get("editable"))) if (folder / "pyproject.toml").is_file() else None


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` into the interpreter running now, as this minionsrl was installed: from
    a source checkout (a clone, ``pip install -e .``), ``python -m pip install -e 'CHECKOUT[extra]'`` with the
    checkout's ``constraints.txt`` (the tested versions) where it has one; from another local folder, that folder;
    otherwise ``python -m pip install 'minionsrl[extra]'``. ``python`` is :data:`sys.executable` (a venv's own
    interpreter, which a bare ``pip`` on the PATH may not be)."""
    python = shlex.quote(_shown(sys.executable)) if sys.executable else "python"
    source = _source_tree()
    where = (source, True) if source is not None else _installed_from()
    if where is None:
        return f"{python} -m pip install 'minionsrl[{extra}]'"
    folder, editable = where
    constraints = folder / "constraints.txt"
    pins = f"-c {shlex.quote(_shown(constraints))} " if constraints.is_file() else ""
    # quoted: the brackets would be a glob to the shell
    return f"{python} -m pip install {pins}{'-e ' if editable else ''}{shlex.quote(f'{_shown(folder)}[{extra}]')}"


def missing_extra_error(what: str, extra: str, alternative: str = "") -> ConfigError:
    """The one-line error for ``what`` (a flag, an env id) needing the ``extra`` that is not installed, with the
    command that installs it here (:func:`install_hint`); ``alternative`` says how to do without it (``pass
    --no-tensorboard``)."""
    return ConfigError(f"{what} needs the {extra} extra: {install_hint(extra)}"
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
