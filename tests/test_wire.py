"""The data plane: authenticated safetensors messages and fragment validation."""

from __future__ import annotations

import hashlib
import hmac
import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from minionsrl.function import wire
from minionsrl.function.envs import EnvSpec, make_env
from minionsrl.function.fragment import Fragment
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.rollout import rollout
from minionsrl.learner.networks import init_params, snapshot_of

KEY = b"0123456789abcdef0123456789abcdef"
STEPS = 16
CART_ARCH = PolicyArch(4, 2, True, (8, 8))
PEND_ARCH = PolicyArch(3, 1, False, (8, 8))


def _fragment(env_id: str, arch: PolicyArch) -> Fragment:
    snap = snapshot_of(arch, init_params(arch, 0), None, 3, 10.0)
    env = make_env(EnvSpec(env_id))
    try:
        return rollout(env, snap, snap.numpy_policy(), STEPS, seed=7, gamma=0.99)
    finally:
        env.close()


@pytest.fixture(scope="module")
def cart_message() -> bytes:
    return _fragment("CartPole-v1", CART_ARCH).encode({"id": "r1-train-0"}, KEY)


@pytest.fixture(scope="module")
def pend_message() -> bytes:
    return _fragment("Pendulum-v1", PEND_ARCH).encode({"id": "r1-train-0"}, KEY)


def _sign(body: bytes, key: bytes = KEY) -> bytes:
    return body + hmac.new(key, body, hashlib.sha256).digest()


# -- encode / decode round trip --------------------------------------------------------------------
def test_round_trip_all_allowed_dtypes():
    rng = np.random.default_rng(0)
    arrays = {
        "b": rng.random(5) > 0.5,
        "u8": rng.integers(0, 255, size=(2, 3), dtype=np.uint8),
        "i32": rng.integers(-(2**31), 2**31 - 1, size=7, dtype=np.int32),
        "i64": np.array([-(2**62), 0, 2**62], dtype=np.int64),
        "f32": rng.standard_normal((3, 4)).astype(np.float32),
        "f64": np.array([np.pi, -0.0, 1e-300, 1e300]),
    }
    meta = {"type": "x", "nested": {"a": [1, 2.5, None, "s"]}, "unicode": "é✓"}
    out_arrays, out_meta = wire.decode(wire.encode(arrays, meta, KEY), KEY)
    assert out_meta == meta
    assert set(out_arrays) == set(arrays)
    for name, arr in arrays.items():
        assert out_arrays[name].dtype == arr.dtype, name
        assert out_arrays[name].shape == arr.shape, name
        np.testing.assert_array_equal(out_arrays[name], arr)


def test_round_trip_empty_arrays_and_no_arrays():
    arrays = {"e1": np.zeros(0, np.float32), "e2": np.zeros((0, 3), np.int64), "e3": np.zeros((4, 0), bool)}
    out, meta = wire.decode(wire.encode(arrays, {"k": 1}, KEY), KEY)
    assert meta == {"k": 1}
    for name, arr in arrays.items():
        assert out[name].shape == arr.shape and out[name].dtype == arr.dtype
    out, meta = wire.decode(wire.encode({}, {}, KEY), KEY)
    assert out == {} and meta == {}


def test_round_trip_non_contiguous_and_big_endian():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    arrays = {"t": base.T, "s": base[:, ::2], "be": np.arange(5, dtype=">i4")}
    out, _ = wire.decode(wire.encode(arrays, {}, KEY), KEY)
    np.testing.assert_array_equal(out["t"], base.T)
    np.testing.assert_array_equal(out["s"], base[:, ::2])
    np.testing.assert_array_equal(out["be"], np.arange(5))


def test_round_trip_zero_dim_array_keeps_shape():
    out, _ = wire.decode(wire.encode({"s": np.array(2.5)}, {}, KEY), KEY)
    assert out["s"].shape == ()


def test_decode_refuses_dtype_outside_allow_list():
    message = wire.encode({"h": np.zeros(3, np.float16)}, {}, KEY)
    with pytest.raises(wire.WireError, match="unsupported dtype"):
        wire.decode(message, KEY)


def test_decode_accepts_bytearray_and_memoryview():
    message = wire.encode({"a": np.arange(3)}, {"m": 1}, KEY)
    for data in (bytearray(message), memoryview(message)):
        out, meta = wire.decode(data, KEY)
        np.testing.assert_array_equal(out["a"], np.arange(3))
        assert meta == {"m": 1}


def test_new_key_is_random_32_bytes():
    k1, k2 = wire.new_key(), wire.new_key()
    assert len(k1) == len(k2) == 32 and k1 != k2


# -- integrity -------------------------------------------------------------------------------------
def test_every_single_byte_flip_is_rejected(cart_message):
    # header, buffers and tag: flip one byte at a spread of positions (every 7th byte, plus the ends)
    positions = sorted({*range(0, len(cart_message), 7), len(cart_message) - 1, 8})
    for pos in positions:
        bad = bytearray(cart_message)
        bad[pos] ^= 0x01
        with pytest.raises(wire.WireError, match="HMAC"):
            wire.decode(bytes(bad), KEY)


@pytest.mark.parametrize("cut", [1, 32, 33, 100])
def test_truncated_message_is_rejected(cart_message, cut):
    with pytest.raises(wire.WireError):
        wire.decode(cart_message[:-cut], KEY)


def test_extended_message_is_rejected(cart_message):
    with pytest.raises(wire.WireError):
        wire.decode(cart_message + b"\x00", KEY)


def test_wrong_key_is_rejected(cart_message):
    with pytest.raises(wire.WireError, match="HMAC"):
        wire.decode(cart_message, b"another key" * 3)


@pytest.mark.parametrize("data", [b"", b"short", b"\x00" * 39, "not bytes", None, 12345])
def test_garbage_input_is_rejected(data):
    with pytest.raises(wire.WireError):
        wire.decode(data, KEY)


def test_signed_but_malformed_bodies_are_wire_errors():
    """A message with a valid tag but a broken body still only raises WireError."""
    header = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    bodies = [
        b"\xff" * 16,  # header length far past the end
        struct.pack("<Q", 5) + b"{bad}" + b"\x00" * 8,  # not JSON
        struct.pack("<Q", 2) + b"[]" + b"\x00" * 8,  # JSON but not an object
        struct.pack("<Q", len(header)) + header + b"\x00" * 8,  # buffer shorter than declared
        struct.pack("<Q", 26) + b'{"__metadata__":{"meta":1}}'[:26] + b"\x00" * 8,
    ]
    meta_not_object = wire.encode({}, {}, KEY)[: -wire.TAG_BYTES].replace(b'"meta":"{}"', b'"meta":"[]"')
    bodies.append(meta_not_object)
    for body in bodies:
        with pytest.raises(wire.WireError):
            wire.decode(_sign(body), KEY)


# -- fuzzing ---------------------------------------------------------------------------------------
def _decode_fragment(data: bytes, arch: PolicyArch) -> Fragment:
    arrays, meta = wire.decode(data, KEY)
    return Fragment.from_wire(arrays, meta, STEPS, arch)


_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(st.binary(min_size=0, max_size=4096))
def test_fuzz_random_bytes_only_raise_wire_error(data):
    with pytest.raises(wire.WireError):
        _decode_fragment(data, CART_ARCH)


_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(min_value=1, max_value=255)),
    st.tuples(st.just("cut"), st.integers(min_value=0), st.integers(min_value=1, max_value=64)),
    st.tuples(st.just("insert"), st.integers(min_value=0), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), st.integers(min_value=0), st.integers(min_value=1, max_value=16)),
)


def _mutate(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for kind, pos, arg in mutations:
        pos %= max(len(out), 1)
        if kind == "flip" and out:
            out[pos] ^= arg
        elif kind == "cut":
            del out[max(len(out) - arg, 0) :]
        elif kind == "insert":
            out[pos:pos] = arg
        elif kind == "delete":
            del out[pos : pos + arg]
    return bytes(out)


@_FUZZ
@given(st.lists(_mutation, min_size=1, max_size=4))
def test_fuzz_mutated_fragment_never_accepted(cart_message, mutations):
    data = _mutate(cart_message, mutations)
    if data == cart_message:  # e.g. a delete at the very end of an already-cut message
        return
    with pytest.raises(wire.WireError):
        _decode_fragment(data, CART_ARCH)


@_FUZZ
@given(st.lists(_mutation, min_size=1, max_size=3))
def test_fuzz_resigned_buffer_mutations_raise_only_wire_error(pend_message, mutations):
    """A buggy function that corrupts its array buffers but signs with the right key: parsing raises
    WireError or yields a fragment with the request's shapes and finite numbers, never another exception."""
    body = pend_message[: -wire.TAG_BYTES]
    data_start = 8 + struct.unpack("<Q", body[:8])[0]
    mutated = body[:data_start] + _mutate(body[data_start:], mutations)
    try:
        frag = _decode_fragment(_sign(mutated), PEND_ARCH)
    except wire.WireError:
        return
    assert frag.obs.shape == (STEPS, 3) and frag.obs.dtype == np.float32
    assert frag.actions.shape == (STEPS, 1) and frag.actions.dtype == np.float32
    for name in ("obs", "values", "rewards", "trunc_values", "logprobs"):
        assert np.isfinite(getattr(frag, name)).all()


_meta_value = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4),
                        st.lists(st.integers(), max_size=2))


@pytest.mark.integration  # a fuzz over resigned replies: seconds (INTERNALS, "Test tiers")
@_FUZZ
@given(drop=st.sets(st.sampled_from(["obs", "actions", "episode_returns", "episode_lengths", "ret_m/mean",
                                     "ret_m/var", "ret_m/count", "last_value"]), max_size=2),
       meta_patch=st.dictionaries(st.sampled_from(["policy_version", "type", "id", "timings"]), _meta_value,
                                  max_size=2))
@example(drop={"ret_m/var"}, meta_patch={})
@example(drop=set(), meta_patch={"policy_version": "v3"})
def test_fuzz_resigned_structural_mutations_raise_only_wire_error(pend_message, drop, meta_patch):
    """Re-encode a valid fragment without some arrays and with odd metadata values (signed with the right
    key): Fragment.from_wire raises WireError or accepts a well-formed fragment, never another exception."""
    arrays, meta = wire.decode(pend_message, KEY)
    arrays = {k: v for k, v in arrays.items() if k not in drop}
    try:
        frag = _decode_fragment(wire.encode(arrays, {**meta, **meta_patch}, KEY), PEND_ARCH)
    except wire.WireError:
        return
    assert isinstance(frag.policy_version, int)
    assert frag.ret_moments is None or frag.ret_moments.count >= 0


def test_from_wire_partial_moments_is_wire_error(cart_arrays):
    arrays, meta = cart_arrays
    del arrays["ret_m/var"]
    with pytest.raises(wire.WireError):
        Fragment.from_wire(arrays, meta, STEPS, CART_ARCH)


def test_valid_messages_decode(cart_message, pend_message):
    """Guard for the fuzzers: the unmutated messages are accepted."""
    frag = _decode_fragment(cart_message, CART_ARCH)
    assert frag.policy_version == 3 and frag.meta["id"] == "r1-train-0"
    frag = _decode_fragment(pend_message, PEND_ARCH)
    assert frag.actions.shape == (STEPS, 1)


# -- Fragment.from_wire validation -----------------------------------------------------------------
@pytest.fixture
def cart_arrays(cart_message):
    arrays, meta = wire.decode(cart_message, KEY)
    return {k: v.copy() for k, v in arrays.items()}, meta


def test_from_wire_round_trip_preserves_values():
    frag = _fragment("Pendulum-v1", PEND_ARCH)
    back = _decode_fragment(frag.encode({"id": "x"}, KEY), PEND_ARCH)
    for name in Fragment._STEP_ARRAYS:
        np.testing.assert_array_equal(getattr(back, name), getattr(frag, name))
        assert getattr(back, name).dtype == getattr(frag, name).dtype
    assert back.last_value == pytest.approx(frag.last_value, rel=1e-7)
    assert back.obs_moments is None and frag.obs_moments is None
    assert back.ret_moments.count == frag.ret_moments.count == STEPS
    np.testing.assert_allclose(back.ret_moments.mean, frag.ret_moments.mean)


@pytest.mark.parametrize("name", ["obs", "actions", "logprobs", "values", "rewards", "terminated", "truncated",
                                  "trunc_values", "last_value"])
def test_from_wire_rejects_missing_array(cart_arrays, name):
    arrays, meta = cart_arrays
    del arrays[name]
    with pytest.raises(wire.WireError, match=name):
        Fragment.from_wire(arrays, meta, STEPS, CART_ARCH)


@pytest.mark.parametrize(("name", "bad"), [
    ("obs", lambda a: a[:, :3]),
    ("obs", lambda a: a[:-1]),
    ("obs", lambda a: a.astype(np.float64)),
    ("actions", lambda a: a.astype(np.int32)),
    ("actions", lambda a: a.astype(np.float32)),
    ("actions", lambda a: a[:, None]),
    ("logprobs", lambda a: a.astype(np.float64)),
    ("values", lambda a: np.concatenate([a, a])),
    ("rewards", lambda a: a.reshape(2, -1)),
    ("terminated", lambda a: a.astype(np.uint8)),
    ("truncated", lambda a: a[1:]),
    ("trunc_values", lambda a: a.astype(np.int64)),
    ("last_value", lambda a: np.zeros(2, np.float32)),
])
def test_from_wire_rejects_wrong_shape_or_dtype(cart_arrays, name, bad):
    arrays, meta = cart_arrays
    arrays[name] = bad(arrays[name])
    with pytest.raises(wire.WireError, match=name):
        Fragment.from_wire(arrays, meta, STEPS, CART_ARCH)


def test_from_wire_rejects_wrong_step_count(cart_arrays):
    arrays, meta = cart_arrays
    with pytest.raises(wire.WireError):
        Fragment.from_wire(arrays, meta, STEPS + 1, CART_ARCH)


@pytest.mark.parametrize("name", ["obs", "logprobs", "values", "rewards", "trunc_values", "last_value"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_from_wire_rejects_non_finite(cart_arrays, name, value):
    arrays, meta = cart_arrays
    arrays[name].reshape(-1)[0] = value
    with pytest.raises(wire.WireError, match="non-finite"):
        Fragment.from_wire(arrays, meta, STEPS, CART_ARCH)


def test_from_wire_rejects_mismatched_episode_arrays(cart_arrays):
    arrays, meta = cart_arrays
    arrays["episode_lengths"] = np.concatenate([arrays["episode_lengths"], [5]])
    with pytest.raises(wire.WireError, match="episode"):
        Fragment.from_wire(arrays, meta, STEPS, CART_ARCH)
    arrays, meta = cart_arrays
    del arrays["episode_returns"]
    with pytest.raises(wire.WireError, match="episode"):
        Fragment.from_wire(arrays, meta, STEPS, CART_ARCH)


def test_from_wire_rejects_bad_moments(cart_arrays):
    arrays, meta = cart_arrays
    good = dict(arrays)
    for patch in ({"ret_m/var": np.array([-1.0])}, {"ret_m/mean": np.array([np.nan])},
                  {"ret_m/mean": np.zeros(2)}, {"ret_m/count": np.array([-3.0])}):
        with pytest.raises(wire.WireError, match="ret_m"):
            Fragment.from_wire({**good, **patch}, meta, STEPS, CART_ARCH)
    obs_m = {"obs_m/mean": np.zeros(3), "obs_m/var": np.ones(3), "obs_m/count": np.array([4.0])}
    with pytest.raises(wire.WireError, match="obs_m"):
        Fragment.from_wire({**good, **obs_m}, meta, STEPS, CART_ARCH)


def test_snapshot_round_trip_and_type_check():
    from minionsrl.function.normalization import RunningMeanStd

    rms = RunningMeanStd((3,))
    rms.mean[:] = [1.0, 2.0, 3.0]
    snap = snapshot_of(PEND_ARCH, init_params(PEND_ARCH, 0), rms, 9, 5.0)
    from minionsrl.function.fragment import PolicySnapshot

    back = PolicySnapshot.decode(snap.encode(KEY), KEY)
    assert (back.version, back.arch, back.clip_obs) == (9, PEND_ARCH, 5.0)
    np.testing.assert_array_equal(back.obs_mean, [1.0, 2.0, 3.0])
    assert set(back.params) == set(snap.params)
    for k, v in snap.params.items():
        np.testing.assert_array_equal(back.params[k], v)
    # a fragment message is not a policy
    frag_msg = _fragment("Pendulum-v1", PEND_ARCH).encode({}, KEY)
    with pytest.raises(wire.WireError, match="policy"):
        PolicySnapshot.decode(frag_msg, KEY)


# -- validation gaps (bugs) ------------------------------------------------------------------------
def test_from_wire_bad_policy_version_is_wire_error(cart_arrays):
    arrays, meta = cart_arrays
    with pytest.raises(wire.WireError):
        Fragment.from_wire(arrays, {**meta, "policy_version": "v3"}, STEPS, CART_ARCH)


def test_from_wire_rejects_non_finite_continuous_actions(pend_message):
    arrays, meta = wire.decode(pend_message, KEY)
    arrays = {k: v.copy() for k, v in arrays.items()}
    arrays["actions"][0, 0] = np.nan
    with pytest.raises(wire.WireError):
        Fragment.from_wire(arrays, meta, STEPS, PEND_ARCH)


def test_from_wire_rejects_out_of_range_discrete_actions(cart_arrays):
    arrays, meta = cart_arrays
    arrays["actions"][0] = 7
    with pytest.raises(wire.WireError):
        Fragment.from_wire(arrays, meta, STEPS, CART_ARCH)


# -- what a signed (authentic) fragment may not hold -----------------------------------------------------
def test_from_wire_rejects_unexpected_arrays(cart_arrays):
    arrays, meta = cart_arrays
    arrays["payload"] = np.zeros(3, np.uint8)
    with pytest.raises(wire.WireError, match="unexpected arrays"):
        Fragment.from_wire(arrays, meta, STEPS, CART_ARCH)


@pytest.mark.parametrize(("name", "bad"), [
    ("episode_returns", lambda a: np.full_like(a, np.nan)),
    ("episode_returns", lambda a: a.astype(np.float32)),
    ("episode_lengths", lambda a: -a),
    ("episode_lengths", lambda a: a.astype(np.float64)),
])
def test_from_wire_rejects_bad_episode_statistics(cart_arrays, name, bad):
    arrays, meta = cart_arrays
    arrays["episode_returns"], arrays["episode_lengths"] = np.array([12.0]), np.array([12])
    Fragment.from_wire(arrays, meta, STEPS, CART_ARCH)  # well-formed as it stands
    arrays[name] = bad(arrays[name])
    with pytest.raises(wire.WireError, match="episode"):
        Fragment.from_wire(arrays, meta, STEPS, CART_ARCH)


def test_from_wire_rejects_a_fragment_of_another_policy_version(cart_arrays):
    arrays, meta = cart_arrays
    assert Fragment.from_wire(arrays, meta, STEPS, CART_ARCH, version=3).policy_version == 3
    with pytest.raises(wire.WireError, match="policy version 3, expected 4"):
        Fragment.from_wire(arrays, meta, STEPS, CART_ARCH, version=4)


@pytest.mark.parametrize("carry", ["state", [1, 2], {"env": {}, "obs": [0.0]},
                                   {"env": {}, "obs": [0.0], "ep_return": "x", "ep_length": 1, "disc_return": 0.0},
                                   {"env": {}, "obs": [0.0], "ep_return": 1.0, "ep_length": True, "disc_return": 0}])
def test_from_wire_rejects_malformed_carry(cart_arrays, carry):
    arrays, meta = cart_arrays
    with pytest.raises(wire.WireError, match="carry"):
        Fragment.from_wire(arrays, {**meta, "carry": carry}, STEPS, CART_ARCH)


_st_dtype = st.sampled_from(["F32", "F64", "I64", "I32", "U8", "BOOL", "F16", "BF16", "I8", "U64", "C64", "XYZ", 7])
_st_shape = st.lists(st.integers(min_value=-2, max_value=2**40), max_size=3)
_st_entry = st.fixed_dictionaries({"dtype": _st_dtype, "shape": _st_shape,
                                   "data_offsets": st.lists(st.integers(min_value=-4, max_value=4096), max_size=3)})
_st_name = st.sampled_from(["obs", "actions", "logprobs", "values", "rewards", "terminated", "truncated",
                            "trunc_values", "last_value", "episode_returns", "episode_lengths", "x", "__metadata__"])


@_FUZZ
@given(header=st.dictionaries(_st_name, _st_entry, max_size=5), buffer=st.binary(max_size=512),
       meta=st.one_of(st.none(), st.text(max_size=20), st.just('{"policy_version": 3}')))
def test_fuzz_signed_random_headers_raise_only_wire_error(header, buffer, meta):
    """An authentic message (right key) whose safetensors header is arbitrary: decoding and validation raise
    WireError, or yield a fragment with the request's shapes — never another exception."""
    if meta is not None:
        header = {**header, "__metadata__": {"meta": meta}}
    raw = json.dumps(header).encode()
    body = struct.pack("<Q", len(raw)) + raw + buffer
    try:
        frag = _decode_fragment(_sign(body), CART_ARCH)
    except wire.WireError:
        return
    assert frag.obs.shape == (STEPS, 4) and frag.obs.dtype == np.float32
