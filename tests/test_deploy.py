"""The deployment material stays true: the Lambda config in docs/DEPLOY.md passes Lithops' own config
loader, the function image pins what constraints.txt pins, and the Lithops config lookup is as documented."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from minionsrl.backends.lithops_backend import lithops_config
from minionsrl.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        match = re.match(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s;#]+)", line)
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(3)
    return pins


def test_aws_lambda_config_in_the_guide_passes_lithops_loader():
    pytest.importorskip("boto3")
    from lithops.config import default_config

    block = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs/DEPLOY.md").read_text(), re.S)[0]
    config = default_config(config_data=yaml.safe_load(block))
    assert config["lithops"]["backend"] == "aws_lambda" and config["lithops"]["storage"] == "aws_s3"
    assert config["aws_lambda"]["runtime"] == "minionsrl-rollout:0.1.0"
    assert config["aws_lambda"]["runtime_memory"] == 1769


def test_function_image_pins_match_the_constraints():
    """pyproject.toml declares ranges; the tested versions, which the image must match, are in constraints.txt."""
    ours = _pins((ROOT / "constraints.txt").read_text().splitlines())
    image = _pins((ROOT / "deploy/aws-lambda/requirements.txt").read_text().splitlines())
    shared = set(ours) & set(image)
    assert {"numpy", "gymnasium", "mujoco", "safetensors", "lithops", "ale-py"} <= shared
    assert {name: image[name] for name in shared} == {name: ours[name] for name in shared}
    assert "torch" not in image  # the rollout function is NumPy


def test_lithops_config_defaults_to_localhost_with_this_interpreter(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LITHOPS_CONFIG_FILE", raising=False)
    config = lithops_config(None)
    assert config["lithops"]["backend"] == "localhost"
    assert config["localhost"] == {"runtime": sys.executable, "version": 1}


def test_lithops_config_keeps_what_the_file_says(tmp_path):
    path = tmp_path / "lithops.yaml"
    path.write_text("lithops: {backend: localhost, storage: localhost}\nlocalhost: {version: 2}\n")
    assert lithops_config(str(path))["localhost"] == {"version": 2, "runtime": sys.executable}


@pytest.mark.parametrize("content, message", [(None, "does not exist"), ("a: [1,", "not valid YAML")])
def test_bad_lithops_config_is_one_clear_line(tmp_path, content, message):
    path = tmp_path / "lithops.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message) as err:
        lithops_config(str(path))
    assert "\n" not in str(err.value)
