"""Checkpoints: safetensors files, written atomically (temporary file, fsync, rename).

A checkpoint holds a nested state: dicts, lists and tuples whose leaves are NumPy arrays (any shape,
0-d included), NumPy scalars, and Python ints, floats (NaN and infinities included), bools, strings
and None. Every array is a safetensors tensor keyed by its path in the state (``policy/actor.0.weight``);
the rest of the tree is JSON in the file's metadata (``minionsrl``), where a placeholder such as
``{"$array": "policy/actor.0.weight"}`` stands for a tensor. Reading one unpickles nothing. A SHA-256 of the
tree and every tensor's bytes (``minionsrl_sha256``) is checked on every read: a file whose weights were altered
or damaged after it was written is refused in one line (a file written before the digest existed has none).

Arrays of a dtype safetensors lacks (complex128, longdouble, strings, bfloat16 where the reader lacks
it) are stored as their raw bytes with the dtype and shape in the placeholder. Dicts whose keys are not
all strings (or that have a key starting with ``$``) are stored as ``{"$dict": [[key, value], ...]}``.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from minionsrl import files
from minionsrl.errors import ConfigError
from minionsrl.function import wire

LATEST = "latest.safetensors"
BEST = "best.safetensors"  # the policy of the best evaluation so far (its weights and normaliser only)
KEPT = "round-*.safetensors"  # the checkpoints kept every ``--keep-checkpoints-every`` rounds (:func:`kept_name`)
POLICY_KEYS = ("policy", "obs_rms")  # what a policy needs of a learner's state (load_policy reads these)


METADATA_KEY = "minionsrl"  # the JSON tree in the safetensors metadata
FORMAT_KEY, FORMAT = "minionsrl_format", "1"  # how a state is stored in the file
DIGEST_KEY = "minionsrl_sha256"  # of the tree and every tensor (:func:`digest`)
# what a run's state holds (a resumed run reads every field of it): raised whenever a field is added, removed or
# changes meaning, and a checkpoint of another version is refused in one line (:func:`check_version`)
STATE_VERSION = 2
# dtypes that safetensors' NumPy reader returns as they were; others are stored as raw bytes
_NATIVE = frozenset(np.dtype(t) for t in ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                                          "uint64", "float16", "float32", "float64", "complex64"))


def restore_hint(directory: str | Path) -> str:
    """What to do about a checkpoint in ``directory`` that cannot be resumed from, in every error that says so:
    the newest kept checkpoint to restore where the run kept some, else a new run."""
    kept = sorted(Path(directory).glob(KEPT))
    if kept:
        return (f"restore a kept checkpoint as {LATEST} ({kept[-1].name}, the newest of {len(kept)} in "
                f"{str(directory)!r}), or start a new run")
    return (f"start a new run: this one kept no {files.CHECKPOINTS}/round-NNNNN.safetensors to restore "
            "(--keep-checkpoints-every N keeps them)")


def dir_of(run_dir: str | Path) -> Path:
    """The folder of a run dir's checkpoints."""
    return Path(run_dir) / files.CHECKPOINTS


def kept_name(round_idx: int) -> str:
    """The file name of the checkpoint kept after round ``round_idx`` (it sorts by round)."""
    return f"round-{round_idx:05d}.safetensors"


def kept_round(path: str | Path) -> int:
    """The round a kept checkpoint (named by :func:`kept_name`) was written after."""
    return int(Path(path).stem.split("-")[1])


def save(directory: str | Path, state: dict[str, Any], name: str = LATEST) -> Path:
    """Write ``state`` to ``directory/name`` so that a crash leaves the previous file intact.

    The state is encoded completely before the file is touched: a leaf that cannot be stored raises
    TypeError and leaves any previous checkpoint as it was. A write that fails (a full disk) removes the
    temporary file and raises :class:`ConfigError` naming the file and the reason."""
    from safetensors.numpy import save as to_bytes  # imported when first needed

    tensors: dict[str, np.ndarray] = {}
    tree = json.dumps(_encode(state, (), tensors), allow_nan=False, separators=(",", ":"))
    data = to_bytes(tensors, metadata={METADATA_KEY: tree, FORMAT_KEY: FORMAT, DIGEST_KEY: digest(tree, tensors)})
    directory = Path(directory)
    path = directory / name
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with files.replacing(path, "wb", durable=True) as fh:  # never through a planted link
            fh.write(data)
    except OSError as exc:  # a full disk, a run dir made read-only: one line, and the last checkpoint stands
        raise ConfigError(f"checkpoint: cannot write {str(path)!r} ({exc.strerror or exc}); the previous checkpoint "
                          "is intact: free space (or make the run dir writable), then continue with --resume "
                          f"--run-dir {str(directory.parent)!r}") from exc
    return path


def policy_state(state: dict[str, Any], round_idx: int, eval_return: float) -> dict[str, Any]:
    """The part of a learner's ``state`` that a policy is (weights, observation statistics), as a checkpoint of
    round ``round_idx`` that evaluated to ``eval_return``: what :data:`BEST` holds; it resumes nothing."""
    return {"round": round_idx, "eval_return": eval_return, **{k: state[k] for k in POLICY_KEYS if k in state}}


class Altered(ValueError):
    """A checkpoint whose tree or tensors no longer hash to the digest it was written with."""


def digest(tree: str, tensors: dict[str, np.ndarray]) -> str:
    """SHA-256 of a checkpoint's JSON tree and of every tensor (by key, with its shape and little-endian bytes)."""
    h = hashlib.sha256(tree.encode())
    for key in sorted(tensors):
        array = np.ascontiguousarray(tensors[key])
        h.update(json.dumps([key, list(array.shape)]).encode())
        h.update(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
    return h.hexdigest()


def unreadable(exc: Exception) -> str:
    """Why a checkpoint cannot be read, in the words its errors use: an altered file says so; a file that does not
    parse (cut short, its header damaged, not a checkpoint) says that, naming the reader's exception."""
    if isinstance(exc, Altered):
        return str(exc)
    return f"it is not a whole minionsrl checkpoint: cut short, damaged, or another file ({type(exc).__name__})"


def load(directory: str | Path, name: str = LATEST) -> dict[str, Any] | None:
    """Read checkpoint ``name`` (default: the latest) in ``directory``, or None if there is none."""
    path = Path(directory) / name
    if not path.exists():
        return None
    data = files.read_bytes(path, files.MAX_CHECKPOINT_BYTES, "--resume: checkpoint")
    try:
        return decode(data)
    except Exception as exc:  # truncated, corrupted, or not a checkpoint of this format
        raise ConfigError(f"--resume: checkpoint {str(path)!r} cannot be read ({unreadable(exc)}); "
                          f"{restore_hint(path.parent)}") from exc


def array_problem(value: Any, shape: tuple[int, ...], dtype: np.dtype | None = None) -> str | None:
    """What is wrong with a saved array that should have ``shape`` and ``dtype`` (a float dtype: any float when
    None) and, being floats, finite numbers; None if nothing is. The one rule for weights read back."""
    if not isinstance(value, np.ndarray):
        return f"is a {type(value).__name__}, not an array"
    if value.shape != tuple(shape):
        return f"has shape {value.shape}, not {tuple(shape)}"
    if (value.dtype != dtype) if dtype is not None else value.dtype.kind != "f":
        return f"has dtype {value.dtype}, not {dtype or 'a float dtype'}"
    if value.dtype.kind in "fc" and not np.isfinite(value).all():
        return "holds non-finite numbers"
    return None


def check_version(state: dict[str, Any], where: str) -> None:
    """Refuse a run's state written by a minionsrl whose state holds other fields (:data:`STATE_VERSION`)."""
    version = state.get("format_version")
    if version != STATE_VERSION:
        raise ConfigError(f"{where} holds a run state of format {version or 1}, and this minionsrl resumes format "
                          f"{STATE_VERSION}; resume it with the minionsrl that wrote it (its policy loads as it is: "
                          "minionsrl eval), or start a new run")


def check_state(saved: Any, template: Any, where: str, path: str = "") -> None:
    """Check a checkpoint's state against the state this run would write itself (``template``): every array of
    the template is there, with the same shape and dtype, finite; a number where the template has a number (an
    int where it has an int), non-negative and finite where the template's is; a string where it has a string.
    What the template does not fix (a value it holds as None) is left to the readers. Raises
    :class:`ConfigError` naming the first problem and its path."""
    name = path or "the state"
    if isinstance(template, dict):
        if not isinstance(saved, dict):
            raise ConfigError(f"{where}: {name} is a {type(saved).__name__}, not a mapping")
        for key, expected in template.items():
            if key in saved:
                check_state(saved[key], expected, where, f"{path}/{key}" if path else str(key))
            elif _holds_arrays(expected):
                raise ConfigError(f"{where}: {path}/{key} is missing" if path else f"{where}: {key} is missing")
    elif isinstance(template, np.ndarray | np.generic):
        template = np.asarray(template)
        problem = array_problem(np.asarray(saved) if isinstance(saved, np.generic) else saved, template.shape,
                                template.dtype)
        if problem:
            raise ConfigError(f"{where}: {name} {problem}")
    elif isinstance(template, int | float) and not isinstance(template, bool):
        kind = int if isinstance(template, int) else (int, float)
        if isinstance(saved, bool) or not isinstance(saved, kind):
            wanted = "an integer" if kind is int else "a number"
            raise ConfigError(f"{where}: {name} is {str(saved)[:40]!r}, not {wanted}")
        if math.isfinite(template) and template >= 0 and not (math.isfinite(saved) and saved >= 0):
            raise ConfigError(f"{where}: {name} is {saved!r}, not a finite non-negative number")
    elif isinstance(template, str) and not isinstance(saved, str):
        raise ConfigError(f"{where}: {name} is a {type(saved).__name__}, not a string")


def _holds_arrays(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_holds_arrays(v) for v in value.values())
    return isinstance(value, np.ndarray | np.generic)


def decode(data: bytes) -> dict[str, Any]:
    """The state held by the bytes of a checkpoint file (raises on anything malformed, :class:`Altered` where the
    digest it was written with does not match)."""
    from safetensors.numpy import load as from_bytes

    tensors = from_bytes(data)  # validates the header and the tensors' extents
    metadata = wire.safetensors_header(data).get("__metadata__") or {}
    if metadata.get(FORMAT_KEY) != FORMAT:
        raise ValueError(f"not a minionsrl checkpoint of format {FORMAT}")
    tree = metadata[METADATA_KEY]
    if DIGEST_KEY in metadata and metadata[DIGEST_KEY] != digest(tree, tensors):
        raise Altered("its weights or state differ from what was written: the file was altered or damaged")
    state = _decode(json.loads(tree, parse_constant=_no_constant), tensors)
    if not isinstance(state, dict):
        raise ValueError("the checkpoint's state is not a dict")
    return state


# -- encoding --------------------------------------------------------------------------------------
def _encode(value: Any, path: tuple[str, ...], tensors: dict[str, np.ndarray]) -> Any:
    """``value`` as JSON, its arrays moved to ``tensors`` under keys made of their ``path``."""
    if isinstance(value, np.ndarray):
        return _array(value, "$array", path, tensors)
    if isinstance(value, np.generic):  # before float: np.float64 is a float; stored 0-d so the dtype survives
        return _array(np.asarray(value), "$scalar", path, tensors)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _encode(v, (*path, k), tensors) for k, v in value.items()}
        return {"$dict": [[_encode_key(k, path), _encode(v, (*path, str(k)), tensors)] for k, v in value.items()]}
    if isinstance(value, list):
        return [_encode(v, (*path, str(i)), tensors) for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, (*path, str(i)), tensors) for i, v in enumerate(value)]}
    raise TypeError(f"checkpoint: {'/'.join(path) or 'the state'} is a {type(value).__name__}, which a checkpoint "
                    "cannot hold (arrays, numbers, strings, None, and dicts, lists, tuples of them)")


def _encode_key(key: Any, path: tuple[str, ...]) -> Any:
    if key is None or isinstance(key, bool | int | str) or (isinstance(key, float) and math.isfinite(key)):
        return key
    if isinstance(key, tuple):
        return {"$tuple": [_encode_key(k, path) for k in key]}
    raise TypeError(f"checkpoint: {'/'.join(path) or 'the state'} has a key {key!r} a checkpoint cannot hold")


def _array(array: np.ndarray, tag: str, path: tuple[str, ...], tensors: dict[str, np.ndarray]) -> dict[str, Any]:
    key = "/".join(path) or "."
    if key in tensors:  # "a/b" both as a key and as a path
        key = next(f"{key}#{i}" for i in range(1, len(tensors) + 2) if f"{key}#{i}" not in tensors)
    dtype = array.dtype
    array = array if array.flags.c_contiguous else array.copy(order="C")  # safetensors reads the buffer as is
    if dtype in _NATIVE or dtype.newbyteorder("=") in _NATIVE:
        tensors[key] = array
        return {tag: key}
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise TypeError(f"checkpoint: {key} is an array of dtype {dtype}, which a checkpoint cannot hold")
    # raw bytes: ml_dtypes' types (bfloat16...) by name, the rest by their NumPy string (byte order included)
    name = dtype.name if dtype.kind == "V" else dtype.str
    tensors[key] = array.reshape(-1).view(np.uint8)
    return {tag: key, "dtype": name, "shape": list(array.shape)}


# -- decoding --------------------------------------------------------------------------------------
def _no_constant(name: str) -> Any:
    raise ValueError(f"unexpected {name} in the checkpoint's metadata")


def _decode(value: Any, tensors: dict[str, np.ndarray]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    tags = [k for k in value if k.startswith("$")]
    if not tags:
        return {k: _decode(v, tensors) for k, v in value.items()}
    tag = tags[0]
    if tag in ("$array", "$scalar"):
        array = _tensor(value, tensors[value[tag]])
        return array[()] if tag == "$scalar" else array
    if tag == "$float" and value[tag] in ("nan", "inf", "-inf"):
        return float(value[tag])
    if tag == "$tuple":
        return tuple(_decode(v, tensors) for v in value[tag])
    if tag == "$dict":
        return {_decode(k, tensors): _decode(v, tensors) for k, v in value[tag]}
    raise ValueError(f"unknown placeholder {tag!r} in the checkpoint's metadata")


def _tensor(placeholder: dict[str, Any], stored: np.ndarray) -> np.ndarray:
    if "dtype" in placeholder:  # raw bytes
        dtype = _dtype(placeholder["dtype"])
        stored = stored.view(dtype).reshape([int(n) for n in placeholder["shape"]])
    return stored if stored.flags.writeable else stored.copy()


def _dtype(name: str) -> np.dtype:
    try:
        dtype = np.dtype(name)
    except TypeError:
        import ml_dtypes  # bfloat16 and the float8 types (installed with JAX)

        dtype = np.dtype(getattr(ml_dtypes, name))
    if dtype.hasobject or dtype.fields is not None:
        raise ValueError(f"dtype {name!r} cannot be read from a checkpoint")
    return dtype
