"""The data plane: how arrays cross process and storage boundaries.

A message is a safetensors blob (a JSON header plus raw little-endian buffers, no pickle) whose
header metadata carries one JSON document under the key ``"meta"``, followed by a 32-byte
HMAC-SHA256 tag computed with the run's key. ``decode`` checks the tag before parsing anything,
so a truncated, corrupted or foreign message is rejected with a :class:`WireError`; it never
executes code from the message.

Layout: ``safetensors_bytes || hmac_sha256(key, safetensors_bytes)``.

Keys. The learner draws a random *run key* per run (:func:`new_key`); the round's policy is signed
with it. A function signs its reply with the *invocation key* :func:`invocation_key` — derived from
the run key and the invocation id (``r5-train-3-a1``: round, kind, slot and attempt) — and the learner
checks each reply under the key of the invocation it is waiting for, so an authentic reply re-sent for
another invocation, or a policy offered as a reply, fails its check. Derivations are HMAC-SHA256 of the
parent key over a labelled context (:func:`derive_key`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

TAG_BYTES = 32
# dtypes a message may carry; anything else is refused on decode.
ALLOWED_DTYPES = frozenset({"bool", "uint8", "int32", "int64", "float32", "float64"})


# Seed streams of a run: each invocation kind's seeds (and fault draws) and the detectors' are drawn from
# their own stream, so that adding one kind of work never shifts another's random numbers.
SEED_STREAMS = {"train": 0, "eval": 1, "detect": 2}


class WireError(ValueError):
    """A message failed its integrity check or does not have the expected layout."""


def new_key() -> bytes:
    """Return a fresh random per-run HMAC key."""
    import os

    return os.urandom(32)


KEY_BYTES = 32
_KDF_LABEL = b"minionsrl/v1/"


def derive_key(key: bytes, context: str) -> bytes:
    """A 32-byte key for ``context`` derived from ``key``: HMAC-SHA256(key, label || context) — the
    HKDF-Expand step with one output block. Keys for different contexts are independent; neither
    reveals ``key``."""
    if not isinstance(key, bytes | bytearray) or len(key) < 16:
        raise ValueError("a minionsrl key has at least 16 bytes")
    return hmac.new(bytes(key), _KDF_LABEL + context.encode("utf-8"), hashlib.sha256).digest()


def invocation_key(run_key: bytes, invocation_id: str) -> bytes:
    """The key that signs the reply of invocation ``invocation_id`` (its round, kind, slot and attempt) of
    the run whose key is ``run_key``."""
    return derive_key(run_key, f"invocation:{invocation_id}")


def encode(arrays: dict[str, np.ndarray], meta: Mapping[str, Any], key: bytes) -> bytes:
    """Serialise named arrays plus a JSON-able ``meta`` dict into an authenticated message."""
    body = st_save(
        {k: np.ascontiguousarray(v).reshape(np.shape(v)) for k, v in arrays.items()},
        metadata={"meta": json.dumps(meta, separators=(",", ":"))},
    )
    return body + hmac.new(key, body, hashlib.sha256).digest()


def safetensors_header(data: bytes) -> dict[str, Any]:
    """The JSON header of safetensors bytes (an 8-byte little-endian length, then the JSON): each array's dtype,
    shape and extent, and ``__metadata__``. Raises on bytes that do not start with one."""
    (header_len,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + header_len])


def decode(data: bytes, key: bytes) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Verify and parse a message made by :func:`encode`; raise :class:`WireError` if it is bad."""
    if not isinstance(data, bytes | bytearray | memoryview) or len(data) < TAG_BYTES + 8:
        raise WireError("message too short to be a minionsrl message")
    data = bytes(data)
    body, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
    if not hmac.compare_digest(hmac.new(key, body, hashlib.sha256).digest(), tag):
        raise WireError("message failed its HMAC check (corrupted, truncated, or signed with another key)")
    try:
        header = safetensors_header(body)
        meta = json.loads(header.get("__metadata__", {}).get("meta", "{}"))
        for name, info in header.items():
            if name != "__metadata__" and _dtype_name(info["dtype"]) not in ALLOWED_DTYPES:
                raise WireError(f"array {name!r} has unsupported dtype {info['dtype']}")
        arrays = st_load(body)
    except WireError:
        raise
    except Exception as exc:  # safetensors raises its own error types on malformed headers
        raise WireError(f"malformed message: {exc}") from exc
    if not isinstance(meta, dict):
        raise WireError("message metadata is not a JSON object")
    return arrays, meta


_ST_DTYPES = {"BOOL": "bool", "U8": "uint8", "I32": "int32", "I64": "int64", "F32": "float32", "F64": "float64"}


def _dtype_name(st_dtype: str) -> str:
    return _ST_DTYPES.get(st_dtype, st_dtype)
