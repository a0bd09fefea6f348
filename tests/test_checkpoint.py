"""Checkpoints: safetensors files whose arrays are tensors and whose other leaves are JSON metadata."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

from minionsrl.errors import ConfigError
from minionsrl.loop import checkpoint


def _state() -> dict:
    rng = np.random.default_rng(3)
    return {
        "round": 7, "env_steps": 1792, "wall_s": 12.5, "best_eval": float("-inf"), "last_eval": float("nan"),
        "big": 2**70, "flag": True, "none": None, "text": "a/b $c", "last_row": json.dumps({"round": 7}),
        "recent_returns": [1.0, 2.5, float("inf")], "empty_list": [], "empty_dict": {},
        "policy": {"actor.0.weight": rng.standard_normal((64, 4)).astype(np.float32),
                   "actor.0.bias": np.zeros(64, np.float32)},
        "optimizer": {"step": np.asarray(12, np.int32),
                      "mu": {"actor.0.weight": np.ones((64, 4), np.float32)},
                      "nested": [{"count": np.asarray(3, np.int64)}, {"count": np.asarray(4, np.int64)}]},
        "kl_coef": 0.2,
        "obs_rms": {"mean": np.arange(3, dtype=np.float64), "var": np.ones(3), "count": 1e4},
        "ret_rms": {"mean": np.asarray(0.5), "var": np.asarray(2.0), "count": 17.0},
        "ret_rms_off": None,
        "rng": np.random.PCG64(5).random_raw(4).astype(np.uint32),
        "carries": [None, {"obs": np.arange(4, dtype=np.uint8), "t": 3}, np.array([True, False])],
        "seen": [(2, 0.5), (4, 0.25)],
        "np_scalars": [np.float32(1.5), np.int64(-3), np.bool_(True), np.float64("nan")],
        "odd_dtypes": {"c128": np.array([1 + 2j, 3 - 4j]), "big_endian": np.arange(3, dtype=">i4"),
                       "strings": np.array(["ab", "c"]), "empty": np.zeros((0, 3), np.float16),
                       "fortran": np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
                       "strided": np.arange(10, dtype=np.float64)[::3]},
        "int_keys": {0: "a", 5: np.asarray([1.0])},
        "dollar": {"$array": "not a placeholder"},
        "a/b": np.ones(1), "a": {"b": np.zeros(1)},  # the same path two ways
    }


def _assert_same(got, want, where="state"):
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), where
        assert got.dtype == want.dtype.newbyteorder("=") and got.shape == want.shape, where
        assert got.flags.writeable, where
        np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, np.generic):
        assert type(got) is type(want), where
        assert got == want or (np.isnan(got) and np.isnan(want)), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for k in want:
            _assert_same(got[k], want[k], f"{where}/{k}")
    elif isinstance(want, list | tuple):
        assert type(got) is type(want) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same(g, w, f"{where}/{i}")
    elif isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got), where
    else:
        assert type(got) is type(want) and got == want, where


def test_round_trip_keeps_every_leaf(tmp_path):
    state = _state()
    path = checkpoint.save(tmp_path, state)
    assert path == tmp_path / "latest.safetensors" == tmp_path / checkpoint.LATEST
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.safetensors"]  # no temporary file left
    loaded = checkpoint.load(tmp_path)
    _assert_same(loaded, state)
    assert loaded["ret_rms"]["mean"].shape == () and loaded["rng"].dtype == np.uint32
    assert checkpoint.save(tmp_path, state, name="round-00007.safetensors").exists()
    _assert_same(checkpoint.load(tmp_path, "round-00007.safetensors"), state)


def test_arrays_are_tensors_and_the_rest_metadata(tmp_path):
    from safetensors import safe_open

    checkpoint.save(tmp_path, _state())
    with safe_open(str(tmp_path / checkpoint.LATEST), framework="np") as f:
        keys, tree = set(f.keys()), json.loads(f.metadata()[checkpoint.METADATA_KEY])
        assert f.get_tensor("policy/actor.0.weight").shape == (64, 4)
    assert {"policy/actor.0.weight", "rng", "carries/1/obs", "a/b"} <= keys
    assert tree["policy"]["actor.0.weight"] == {"$array": "policy/actor.0.weight"} and tree["round"] == 7


def test_missing_checkpoint_is_none(tmp_path):
    assert checkpoint.load(tmp_path) is None


def test_failed_write_keeps_the_previous_checkpoint(tmp_path):
    checkpoint.save(tmp_path, {"round": 1, "w": np.ones(3)})
    for bad in (object(), np.array([object()]), {1.5j: 0}):
        with pytest.raises(TypeError, match="checkpoint"):
            checkpoint.save(tmp_path, {"round": 2, "w": np.zeros(3), "bad": bad})
    loaded = checkpoint.load(tmp_path)
    assert loaded["round"] == 1 and loaded["w"].tolist() == [1.0, 1.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.safetensors"]


def _assert_unreadable(tmp_path, name=checkpoint.LATEST):
    with pytest.raises(ConfigError) as info:
        checkpoint.load(tmp_path, name)
    message = str(info.value)
    assert "\n" not in message and "cannot be read" in message and "checkpoints/round-NNNNN.safetensors" in message


def test_truncated_checkpoint_is_a_one_line_config_error(tmp_path):
    path = checkpoint.save(tmp_path, _state())
    data = path.read_bytes()
    for cut in (0, 5, 100, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        _assert_unreadable(tmp_path)


def _rewrite_metadata(path, edit):
    from safetensors.numpy import load, save

    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    metadata = json.loads(data[8 : 8 + n])["__metadata__"]
    metadata.pop(checkpoint.DIGEST_KEY)  # as a file written before the digest: the decoder's own checks answer
    path.write_bytes(save(load(data), metadata=edit(metadata)))


def _zero_bytes(path, start_from_end: int, count: int = 300) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) - start_from_end: len(data) - start_from_end + count] = bytes(count)
    path.write_bytes(bytes(data))


def test_a_checkpoint_whose_weights_were_altered_is_refused_naming_the_file(tmp_path):
    state = {"round": 3, "policy": {"w": np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)}}
    path = checkpoint.save(tmp_path, state)
    _zero_bytes(path, 4_000)  # inside the weights: the file still parses, its numbers are wrong
    with pytest.raises(ConfigError) as info:
        checkpoint.load(tmp_path)
    message = str(info.value)
    assert "\n" not in message and repr(str(path)) in message and "altered or damaged" in message
    checkpoint.save(tmp_path, {**state, "round": 2}, "round-00002.safetensors")
    assert checkpoint.load(tmp_path, "round-00002.safetensors")["round"] == 2  # an intact one reads


def test_the_hint_names_a_kept_checkpoint_only_where_the_run_kept_one(tmp_path):
    path = checkpoint.save(tmp_path, {"round": 1, "w": np.ones(3)})
    path.write_bytes(b"garbage")
    with pytest.raises(ConfigError, match=r"start a new run: this one kept no checkpoints/round-NNNNN\.safetensors"):
        checkpoint.load(tmp_path)
    for r in (10, 20):
        checkpoint.save(tmp_path, {"round": r, "w": np.ones(3)}, checkpoint.kept_name(r))
    with pytest.raises(ConfigError, match=r"restore a kept checkpoint as latest\.safetensors "
                                          r"\(round-00020\.safetensors, the newest of 2 in"):
        checkpoint.load(tmp_path)


def test_a_checkpoint_without_a_digest_still_reads(tmp_path):
    path = checkpoint.save(tmp_path, {"round": 1, "w": np.ones(3)})
    _rewrite_metadata(path, lambda m: m)
    assert checkpoint.load(tmp_path)["w"].tolist() == [1.0, 1.0, 1.0]


def test_metadata_naming_a_missing_tensor_is_a_config_error(tmp_path):
    path = checkpoint.save(tmp_path, {"round": 1, "w": np.ones(3)})

    def dangling(metadata):
        tree = json.loads(metadata[checkpoint.METADATA_KEY])
        tree["w"] = {"$array": "nowhere"}
        return {**metadata, checkpoint.METADATA_KEY: json.dumps(tree)}

    _rewrite_metadata(path, dangling)
    _assert_unreadable(tmp_path)


@pytest.mark.parametrize("edit", [
    lambda m: {},  # a plain safetensors file, not a checkpoint
    lambda m: {**m, checkpoint.METADATA_KEY: '{"w": {"$pickle": "x"}}'},
    lambda m: {**m, checkpoint.METADATA_KEY: '{"w": {"$array": "w", "dtype": "O", "shape": [1]}}'},
    lambda m: {**m, checkpoint.METADATA_KEY: '[1, 2]'},
    lambda m: {**m, checkpoint.METADATA_KEY: '{"w": NaN}'},
])
def test_malformed_metadata_is_a_config_error(tmp_path, edit):
    path = checkpoint.save(tmp_path, {"round": 1, "w": np.ones(3)})
    _rewrite_metadata(path, edit)
    _assert_unreadable(tmp_path)
