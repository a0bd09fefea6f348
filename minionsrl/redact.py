"""Credentials stay out of what minionsrl writes and says.

Configs never hold secrets (:func:`check_config_secrets` refuses secret-looking ``env_kwargs`` keys and URLs
with a password, naming the field and the fix: pass them through the environment or the platform's own
credential files). Text that may quote someone else's data — function errors in ``invocations.csv``, error
messages on the command line — goes through :func:`redact_text`, which masks what looks like a credential.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from minionsrl.errors import ConfigError

MASK = "***"
_SECRET_WORDS = {"password", "passwd", "pwd", "passphrase", "secret", "token", "apikey", "credential", "credentials"}
_SECRET_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("auth", "key"),
                 ("session", "token"), ("client", "secret")}
# name=value, name: value, "name": "value"
# (the value is only looked at, so that "failed: password=x" still finds the password after "failed"); a name
# that ends a path (/etc/passwd: ..., /srv/token:Env) is a file, not an assignment, and the path stays whole
_ASSIGNMENT = re.compile(r"(?<![/\\])\b([A-Za-z][A-Za-z0-9_.-]*)['\"]?\s*[=:]\s*['\"]?(?=([^\s'\",;}]+))")
_PATTERNS = [
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/-]+=*"), rf"\1 {MASK}"),  # HTTP authorization values
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+):[^/\s@]+@"), rf"\1:{MASK}@"),  # user:password@host
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),  # AWS access key ids
]
_URL_PASSWORD = re.compile(r"(?i)^[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@")


def is_secret_name(name: str) -> bool:
    """Whether a key name looks like it holds a credential (``api_key``, ``aws_secret_access_key``, ``token``)."""
    parts = [p for p in re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower()) if p]
    return any(p in _SECRET_WORDS for p in parts) or any(pair in _SECRET_PAIRS for pair in itertools.pairwise(parts))


def redact_text(text: str) -> str:
    """``text`` with whatever looks like a credential replaced by ``***``."""
    spans: list[tuple[int, int]] = []
    for m in _ASSIGNMENT.finditer(text):
        if is_secret_name(m.group(1)) and (not spans or m.start(2) >= spans[-1][1]):
            spans.append((m.start(2), m.end(2)))
    for start, end in reversed(spans):
        text = text[:start] + MASK + text[end:]
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def check_config_secrets(values: dict[str, Any]) -> None:
    """Refuse config values that would put a credential into config.yaml or summary.json."""
    kwargs = values.get("env_kwargs") or {}
    for key in _secret_keys(kwargs):
        raise ConfigError(f"env_kwargs: {key!r} looks like a credential, and configs are written to disk; let the "
                          "environment read it from an environment variable instead")
    for name, value in values.items():
        if isinstance(value, str) and _URL_PASSWORD.match(value):
            raise ConfigError(f"{name}: the URL holds a password, and configs are written to disk; give it without "
                              "the password and pass credentials through the environment")


def _secret_keys(mapping: Any, prefix: str = "") -> list[str]:
    """Secret-looking keys of a nested mapping, dotted."""
    if not isinstance(mapping, dict):
        return []
    found = []
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        if is_secret_name(str(key)):
            found.append(path)
        found += _secret_keys(value, f"{path}.")
    return found
