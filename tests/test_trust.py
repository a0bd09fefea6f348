"""Trust boundaries of the data plane: a reply is accepted for its own invocation only, and the run key
stays out of the storage that Lithops (and whoever can read its bucket) sees."""

from __future__ import annotations

import base64
import importlib.util
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from minionsrl.backends.base import FAILED, OK, InvocationRecord, make_reply
from minionsrl.function import rollout, wire
from minionsrl.function.envs import EnvSpec
from minionsrl.function.fragment import Fragment, PolicySnapshot
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.request import Request

ARCH = PolicyArch(4, 2, True, (8,))
STEPS = 8


def _snapshot(version: int = 0) -> PolicySnapshot:
    """A CartPole policy made in NumPy (the learner's framework is not needed to sign one)."""
    rng = np.random.default_rng(version)
    sizes, params = [ARCH.obs_dim, *ARCH.hidden], {}
    for tower, out_dim in (("actor", ARCH.action_dim), ("critic", 1)):
        for i, (n_in, n_out) in enumerate(zip(sizes, [*ARCH.hidden, out_dim], strict=True)):
            params[f"{tower}.{i}.weight"] = rng.standard_normal((n_out, n_in)).astype(np.float32) * 0.1
            params[f"{tower}.{i}.bias"] = np.zeros(n_out, dtype=np.float32)
    return PolicySnapshot(version, ARCH, params, None, None)


def _request(invocation_id: str, policy: str = "p", seed: int = 5, **fields: object) -> Request:
    return Request(id=invocation_id, kind="train", policy=policy, env=EnvSpec("CartPole-v1"), seed=seed, gamma=0.99,
                   steps=STEPS, **fields)


def _record(invocation_id: str) -> InvocationRecord:
    return InvocationRecord(invocation_id=invocation_id, kind="train")


# -- a reply is bound to its invocation --------------------------------------------------------------
def test_invocation_keys_are_derived_per_invocation_and_do_not_reveal_the_run_key():
    key = wire.new_key()
    ids = ["r1-train-0", "r1-train-1", "r2-train-0", "r1-train-0-a1", "r1-eval-0"]
    keys = [wire.invocation_key(key, i) for i in ids]
    assert len(set(keys)) == len(ids) and key not in keys and all(len(k) == 32 for k in keys)
    assert wire.invocation_key(key, "r1-train-0") == keys[0]  # a pure function of (run key, invocation id)
    assert wire.invocation_key(wire.new_key(), "r1-train-0") != keys[0]  # and of the run
    assert wire.derive_key(key, "run:abc") != wire.derive_key(key, "invocation:abc")  # contexts are labelled
    with pytest.raises(ValueError):
        wire.derive_key(b"short", "x")


def test_a_valid_reply_resent_under_another_invocation_id_is_refused():
    key = wire.new_key()
    blob = _snapshot().encode(key)
    reply = rollout.handle(_request("r3-train-2").encode(), lambda ref: blob, key)

    accepted = make_reply(_record("r3-train-2"), reply, key)
    assert accepted.record.status == OK
    assert Fragment.from_wire(accepted.arrays, accepted.meta, STEPS, ARCH).obs.shape == (STEPS, 4)

    # the same bytes delivered for another slot, another round, a retry of the slot, or an evaluation
    for other in ("r3-train-1", "r4-train-2", "r3-train-2-a1", "r3-eval-2"):
        refused = make_reply(_record(other), reply, key)
        assert refused.record.status == FAILED and refused.arrays == {}
        assert refused.record.error.startswith("bad reply: message failed its HMAC check"), refused.record.error
    # nor is a reply accepted by another run, nor under the run key itself, nor a policy offered as a reply
    assert make_reply(_record("r3-train-2"), reply, wire.new_key()).record.status == FAILED
    assert wire.decode(reply, wire.invocation_key(key, "r3-train-2"))
    with pytest.raises(wire.WireError, match="HMAC"):
        wire.decode(reply, key)
    assert make_reply(_record("r3-train-2"), blob, key).record.status == FAILED


def test_a_reply_signed_for_an_invocation_must_also_name_it():
    """An authentic message whose metadata names another invocation (a function gone wrong) is refused."""
    key = wire.new_key()
    forged = wire.encode({}, {"type": "eval", "id": "r1-eval-1"}, wire.invocation_key(key, "r1-eval-0"))
    reply = make_reply(InvocationRecord(invocation_id="r1-eval-0", kind="eval"), forged, key)
    assert reply.record.status == FAILED and "names invocation 'r1-eval-1'" in reply.record.error


# -- Lithops: the run key stays out of storage -------------------------------------------------------
def _key_forms(key: bytes) -> list[bytes]:
    """How the key could sit in a file: raw, hex, or base64 at any alignment inside a longer encoding."""
    forms = [key, key.hex().encode(), key.hex().upper().encode()]
    for skip in range(3):  # base64 of any data holding the key holds one of these whole
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.append(encode(key[skip:])[:-4])
    return forms


def _files_holding(root: Path, key: bytes) -> list[str]:
    forms = _key_forms(key)
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                data = path.read_bytes()
            except OSError:  # removed meanwhile
                continue
            if any(form in data for form in forms):
                found.append(str(path))
    return found


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("lithops") is None, reason="lithops extra not installed")
def test_lithops_localhost_run_keeps_the_run_key_out_of_storage_and_refuses_replayed_replies(monkeypatch):
    from lithops.constants import LITHOPS_TEMP_DIR

    from minionsrl.backends.lithops_backend import LithopsBackend, lithops_config

    monkeypatch.delenv("LITHOPS_CONFIG_FILE", raising=False)
    storage_root = Path(LITHOPS_TEMP_DIR)
    key = wire.new_key()
    backend = LithopsBackend(key, lithops_config(None), max_concurrency=2)
    seen_in_storage: list[list[str]] = []
    original_result = backend._result
    round1: dict[str, bytes] = {}

    def read_reply(future, why):  # while the function's reply is in storage: scan everything Lithops wrote
        seen_in_storage.append(_files_holding(storage_root, key))
        handle, data, error = original_result(future, why)
        round1[backend._pending[future].id] = data
        return handle, data, error

    try:
        key_file = Path(backend._key_where["file"])  # the key, outside Lithops, 0600
        assert key_file.read_bytes() == key and stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert not key_file.is_relative_to(storage_root) and _files_holding(key_file.parent, key)  # scanner works

        backend._result = read_reply
        ref = backend.publish(_snapshot().encode(key))
        replies = backend.invoke([_request("r1-train-0", ref), _request("r1-train-1", ref, seed=6)])
        assert [r.record.status for r in replies] == [OK, OK], [r.record.error for r in replies]
        assert seen_in_storage and all(found == [] for found in seen_in_storage), seen_in_storage
        assert _files_holding(storage_root, key) == []

        # round 2: whoever can write the bucket puts round 1's authentic replies where round 2's go
        replayed = {"r2-train-0": round1["r1-train-0"], "r2-train-1": round1["r1-train-0"]}

        def replay(future, why):
            handle, _genuine, error = original_result(future, why)
            return handle, replayed[backend._pending[future].id], error

        backend._result = replay
        replies = backend.invoke([_request("r2-train-0", ref), _request("r2-train-1", ref, seed=6)])
        assert [r.record.status for r in replies] == [FAILED, FAILED]
        assert all(r.record.error.startswith("bad reply: message failed its HMAC check") for r in replies)
    finally:
        backend.close()
    assert not key_file.exists() and not key_file.parent.exists()
    assert _files_holding(storage_root, key) == []


def test_cloud_lithops_needs_the_function_secret_and_derives_a_fresh_run_key_from_it(monkeypatch, tmp_path):
    from minionsrl.backends.lithops_backend import (
        FUNCTION_KEY_ENV,
        function_run_key,
        function_secret,
        lithops_config,
        run_key_from_secret,
    )
    from minionsrl.errors import ConfigError

    config = tmp_path / "lithops.yaml"
    config.write_text("lithops: {backend: aws_lambda, storage: aws_s3}\n")
    monkeypatch.delenv(FUNCTION_KEY_ENV, raising=False)
    with pytest.raises(ConfigError, match=f"{FUNCTION_KEY_ENV}, which is not set") as exc:
        lithops_config(str(config))
    assert "\n" not in str(exc.value)
    monkeypatch.setenv(FUNCTION_KEY_ENV, "abcd")
    with pytest.raises(ConfigError, match="not at least 32 bytes"):
        lithops_config(str(config))
    secret = os.urandom(32)
    monkeypatch.setenv(FUNCTION_KEY_ENV, secret.hex())
    assert lithops_config(str(config))["lithops"]["backend"] == "aws_lambda"
    # the function, with the secret in its environment, gets the learner's run key from the nonce alone
    assert function_secret(secret.hex()) == secret
    assert function_run_key({"nonce": "n1"}) == run_key_from_secret(secret, "n1") != run_key_from_secret(secret, "n2")
    key_file = tmp_path / "run.key"
    key_file.write_bytes(b"x" * 32)
    assert function_run_key({"file": str(key_file)}) == b"x" * 32


def test_a_cloud_lithops_config_lithops_refuses_is_one_line_naming_the_file(monkeypatch, tmp_path):
    """A config whose backend's section is missing: Lithops raises as its executor starts; the learner says so in
    one line naming the file, before any round (a missing AWS credential ends the same way)."""
    pytest.importorskip("lithops")
    from backend_helpers import KEY

    from minionsrl.backends.lithops_backend import FUNCTION_KEY_ENV, LithopsBackend, lithops_config
    from minionsrl.errors import ConfigError

    config = tmp_path / "lithops.yaml"
    config.write_text("lithops: {backend: aws_lambda, storage: aws_s3}\n")
    monkeypatch.setenv(FUNCTION_KEY_ENV, os.urandom(32).hex())
    with pytest.raises(ConfigError) as exc:
        LithopsBackend(KEY, lithops_config(str(config)))
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"--backend lithops: the Lithops config {config} did not "
                                                      "start its aws_lambda executor ("), message
    assert "aws_lambda" in message.partition("(")[2]  # what Lithops said: its section is missing


# -- a run directory is input: checked as the command line is --------------------------------------
def test_a_custom_entry_point_that_is_not_an_env_is_refused_before_it_is_called(tmp_path):
    from minionsrl.errors import ConfigError
    from minionsrl.function.envs import make_env

    target = tmp_path / "created"
    with pytest.raises(ConfigError, match=r"'Popen' is not a gymnasium\.Env subclass"):
        make_env(EnvSpec("subprocess:Popen", {"args": ["touch", str(target)]}))
    with pytest.raises(ConfigError, match=r"'system' is not a gymnasium\.Env subclass"):
        make_env(EnvSpec("os:system", {"command": f"touch {target}"}))
    assert not target.exists()


@pytest.mark.parametrize("command", [["eval"], ["train", "--resume", "--no-progress"]])
def test_a_run_dir_naming_code_that_is_not_an_env_is_refused_with_one_line(tmp_path, subprocess_env, command):
    """The verified report: a run dir whose config.yaml names ``subprocess:Popen`` made ``minionsrl eval``
    run ``touch FILE``. Now ``eval`` (and ``--resume``) refuse it, before reading the checkpoint."""
    import subprocess
    import sys

    import yaml

    from minionsrl.loop import checkpoint

    target = tmp_path / "created-by-the-run-dir"
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"env_id": "subprocess:Popen", "max_rounds": 1,
                                                     "env_kwargs": {"args": ["touch", str(target)]}}))
    checkpoint.save(run / "checkpoints", {"round": 1})  # a checkpoint is there: what refuses is the config check
    proc = subprocess.run([sys.executable, "-m", "minionsrl.cli", *command, "--run-dir", str(run)],
                          capture_output=True, text=True, env=subprocess_env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("minionsrl:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "env_id 'subprocess:Popen': 'Popen' is not a gymnasium.Env subclass" in errors[0]
    assert not target.exists()


def test_resume_does_not_connect_where_the_run_dir_says(tmp_path, capsys):
    """A run dir's config.yaml may name a Ray cluster or a Lithops config: --resume uses neither unless the
    command line names it, and says so in one line each."""
    from minionsrl import cli, config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    saved = config.build({"env_id": "CartPole-v1", "backend": "ray", "ray_address": "203.0.113.9:6379",
                          "lithops_config": str(tmp_path / "l.yaml"), "run_dir": str(run_dir)})
    config.dump(saved, run_dir / "config.yaml")
    parser = cli.build_parser()
    cfg, resume = cli.train_config(parser.parse_args(["train", "--resume", "--run-dir", str(run_dir)]))
    fn = cfg.functions
    assert resume and fn.ray_address is None and fn.lithops_config is None and fn.backend == "ray"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not connecting to ray_address '203.0.113.9:6379'" in err[0] and "--ray-address" in err[0]
    cfg, _ = cli.train_config(parser.parse_args(["train", "--resume", "--run-dir", str(run_dir),
                                                 "--ray-address", "127.0.0.1:6379"]))
    assert cfg.functions.ray_address == "127.0.0.1:6379"


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("lithops") is None, reason="lithops extra not installed")
def test_a_child_process_names_its_lithops_executors_apart_from_its_parent(subprocess_env):
    """Lithops exports its session to the environment; a child that adopted it would count executors on from the
    exported number while the parent counts on too, and their jobs (and stale .done files) would share names."""
    import subprocess
    import sys

    from minionsrl.backends.lithops_backend import LithopsBackend, lithops_config

    def executor_id() -> str:
        backend = LithopsBackend(wire.new_key(), lithops_config(None), max_concurrency=1)
        try:
            return backend._executor.executor_id
        finally:
            backend.close()

    first = executor_id()
    code = ("from minionsrl.backends.lithops_backend import LithopsBackend, lithops_config\n"
            "from minionsrl.function import wire\n"
            "b = LithopsBackend(wire.new_key(), lithops_config(None), max_concurrency=1)\n"
            "print(b._executor.executor_id)\nb.close()")
    env = {**os.environ, "PYTHONPATH": subprocess_env["PYTHONPATH"]}  # with the session the first call exported
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120, check=True).stdout.strip().splitlines()[-1]
    second = executor_id()
    assert len({first, second, child}) == 3
    assert child.split("-")[0] != first.split("-")[0]  # a session of its own
