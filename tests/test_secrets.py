"""Credentials never reach logs, configs on disk, summary.json or error messages."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from minionsrl import cli
from minionsrl.config import TrainConfig, validate
from minionsrl.errors import ConfigError
from minionsrl.redact import is_secret_name, redact_text

SECRET = "s3cr3t-Value-9f8e7d6c"
AWS_KEY_ID, AWS_SECRET = "AKIAZZZZZZZZZZZZZZZZ", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEYzz"
FAST = ["--max-rounds", "1", "--actors", "2", "--fragment-length", "16", "--eval-episodes", "1", "--no-progress",
        "--no-tensorboard"]


@pytest.mark.parametrize("name", ["password", "api_key", "apiKey", "aws_secret_access_key", "AWS_SESSION_TOKEN",
                                  "private-key", "client_secret", "db_passwd", "credentials"])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["max_tokens", "seed", "keyboard", "passes", "length", "monkey"])
def test_ordinary_names(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize("text", [
    f"password={SECRET}", f"aws_secret_access_key: {SECRET}", f'{{"api_key": "{SECRET}"}}', f"token='{SECRET}'",
    f"Authorization: Bearer {SECRET}", f"https://user:{SECRET}@example.com/x", f"SESSION_TOKEN={SECRET} and more",
])
def test_redact_text_masks_credentials(text):
    out = redact_text(text)
    assert SECRET not in out and "***" in out


def test_redact_text_masks_aws_key_ids_and_keeps_ordinary_text():
    assert AWS_KEY_ID not in redact_text(f"key id {AWS_KEY_ID} rejected")
    plain = "env_id 'CartPole-v1': learning_rate -0.1 must be > 0 (max_tokens=5)"
    assert redact_text(plain) == plain


@pytest.mark.parametrize("overrides", [{"env_kwargs": {"api_key": SECRET}},
                                       {"env_kwargs": {"auth": {"password": SECRET}}},
                                       {"ray_address": f"ray://admin:{SECRET}@head:10001"}])
def test_credentials_in_the_config_are_refused_without_echoing_them(overrides):
    with pytest.raises(ConfigError) as info:
        validate(TrainConfig(max_rounds=1, **overrides))
    assert SECRET not in str(info.value)


def _files_text(run_dir: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file()
                     and p.suffix in (".yaml", ".json", ".csv", ".txt", ""))


def test_a_credential_quoted_by_a_failing_function_is_redacted(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MINIONSRL_TEST_SECRET", SECRET)
    run_dir = tmp_path / "run"
    rc = cli.main(["train", *FAST, "--env-id", "custom_env:CarelessEnv", "--max-retries", "1", "--run-dir",
                   str(run_dir)])
    err = capsys.readouterr().err
    assert rc == 1 and "login failed" in err and "***" in err  # the failure is reported...
    assert SECRET not in err  # ...without the credential
    rows = (run_dir / "invocations.csv").read_text()
    assert "login failed" in rows and SECRET not in rows
    assert SECRET not in _files_text(run_dir)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("lithops") is None, reason="lithops extra not installed")
def test_cloud_credentials_in_environment_and_lithops_config_stay_out_of_outputs(tmp_path, subprocess_env):
    lithops_config = tmp_path / "lithops.yaml"
    lithops_config.write_text("lithops: {backend: localhost, storage: localhost}\n"
                              f"aws: {{access_key_id: {AWS_KEY_ID}, secret_access_key: {AWS_SECRET}}}\n")
    env = {**subprocess_env, "AWS_ACCESS_KEY_ID": AWS_KEY_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
           "MINIONSRL_API_TOKEN": SECRET}
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "minionsrl.cli", "train", *FAST, "--backend", "lithops",
                           "--lithops-config", str(lithops_config), "--run-dir", str(run_dir)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = _files_text(run_dir) + proc.stdout + proc.stderr
    assert (run_dir / "summary.json").is_file() and (run_dir / "config.yaml").is_file()
    for secret in (AWS_KEY_ID, AWS_SECRET, SECRET):
        assert secret not in written
