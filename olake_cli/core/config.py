"""Loading and validating config files, and picking the connector their ``type`` names."""

from __future__ import annotations

import os
from typing import Any

from olake_cli.core.errors import ConfigError
from olake_cli.core.registry import DESTINATIONS, SOURCES, entry
from olake_cli.core.validation import apply_defaults, load_json_file, validate


def load_config(path: str, role: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """(role, type, validated config with defaults) of a config file; role is 'source' or 'destination'."""
    config = load_json_file(path, what="config")
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: a config must be a JSON object")
    kind = config.get("type")
    if not isinstance(kind, str):
        raise ConfigError(f"{path}: missing required field 'type' (one of "
                          f"{', '.join(sorted(SOURCES) + sorted(DESTINATIONS))})")
    config = resolve_env_values(config, path)
    found = entry(kind, where=path)
    if role and found.role != role:
        raise ConfigError(f"{path}: type '{kind}' is a {found.role}, but a {role} config is expected here")
    validate(config, found.schema, what=path)
    return found.role, kind, apply_defaults(config, found.schema)


def resolve_env_values(config: dict[str, Any], path: str) -> dict[str, Any]:
    """``{"password": {"env": "PGPASSWORD"}}`` takes the value from the environment (top-level fields),
    so secrets stay out of config files; an unset variable is a config error naming it."""
    resolved = dict(config)
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"env"} and isinstance(value["env"], str):
            if value["env"] not in os.environ:
                raise ConfigError(f"{path}: field '{key}' takes its value from the environment variable "
                                  f"'{value['env']}', which is not set")
            resolved[key] = os.environ[value["env"]]
    return resolved


def schema_for(role: str, kind: str) -> str:
    """The schema name of a connector's config."""
    return entry(kind, role, where="spec").schema
