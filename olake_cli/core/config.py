"""Loading and validating config files, and picking the connector their ``type`` names."""

from __future__ import annotations

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
    found = entry(kind, where=path)
    if role and found.role != role:
        raise ConfigError(f"{path}: type '{kind}' is a {found.role}, but a {role} config is expected here")
    validate(config, found.schema, what=path)
    return found.role, kind, apply_defaults(config, found.schema)


def schema_for(role: str, kind: str) -> str:
    """The schema name of a connector's config."""
    return entry(kind, role, where="spec").schema
