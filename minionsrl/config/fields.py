"""What every config field is made of: its declaration (:func:`setting`), the rules on its value, and the one
conversion of a YAML or command-line value to its type."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from minionsrl.errors import ConfigError


def setting(default: Any = None, help: str = "", *, learning: bool = True, rare: bool = False, **rules: Any) -> Any:
    """A config field: its default, its help text, whether it changes what is learned (a resumed run must keep
    it), whether ``--help`` leaves it to ``--help-all`` (``rare``), and its value's rules (``min``, ``max``,
    ``choices``, ``positive``)."""
    metadata = {"help": help, "learning": learning, "rare": rare, **rules}
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def default_of(f: dataclasses.Field) -> Any:
    """A field's default value (a fresh one for a list or a mapping)."""
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def kind_of(f: dataclasses.Field) -> str:
    """A field's value type, the one dispatch the CLI and YAML share: bool, int, float, str, list or dict
    (``X | None`` is X)."""
    return str(f.type).split(" |")[0]


def check_value(name: str, value: Any, rules: Any) -> None:
    """Raise a one-line :class:`ConfigError` if ``value`` breaks the field's rules (``None`` is "unset": fine)."""
    if value is None:
        return
    if "choices" in rules and value not in rules["choices"]:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(rules['choices'])}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigError(f"{name}: {value!r} must be a finite number")
        if "min" in rules and value < rules["min"]:
            also = "".join(f" or {word}" for word in rules.get("words", ()))  # --actors auto
            raise ConfigError(f"{name}: {value!r} is too small; use a value >= {rules['min']}{also}")
        if "max" in rules and value > rules["max"]:
            raise ConfigError(f"{name}: {value!r} is too large; use a value <= {rules['max']}")
        if rules.get("positive") and value <= 0:
            raise ConfigError(f"{name}: {value!r} must be > 0")


_ACCEPTS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "bool": (bool, "true or false"), "int": (int, "an integer"), "float": ((int, float), "a number"),
    "str": (str, "a string"), "list": (list, "a list"), "dict": (dict, "a mapping"),
}


def coerce(name: str, kind: str, value: Any, words: tuple[str, ...] = ()) -> Any:
    """Check a value (from YAML, the CLI or a Python caller) against the field's type ``kind``, or one of the
    ``words`` it also takes (``actors: auto``); convert ints to floats and tuples to lists where due."""
    if value is None or value in words:
        return value
    if kind == "float" and isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind == "list" and isinstance(value, tuple):  # a Python caller's (64, 64)
        return list(value)
    accepted, what = _ACCEPTS[kind]
    if not isinstance(value, accepted) or (kind in ("int", "float") and isinstance(value, bool)):
        raise ConfigError(f"{name}: {value!r} must be {what}")
    return value


_NAME_MAX, _PATH_MAX = 255, 4096  # Linux's limits on a file name and a path (ENAMETOOLONG past them)


def check_path(name: str, value: str) -> None:
    """A path the run writes under: not empty (which would be the current folder) and within the limits of
    the file system's names, so that it fails here with one line rather than at the first write."""
    if not value.strip():
        raise ConfigError(f"{name}: an empty path would write into the current folder; name a directory "
                          "(e.g. runs/my-run)")
    parts = Path(value).parts
    if len(value.encode()) > _PATH_MAX or any(len(p.encode()) > _NAME_MAX for p in parts):
        raise ConfigError(f"{name}: the path is too long (names of at most {_NAME_MAX} bytes, "
                          f"{_PATH_MAX} in all); choose a shorter one")
