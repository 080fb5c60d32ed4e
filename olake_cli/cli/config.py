"""Loading and validating config files, and picking the connector their ``type`` names."""

from __future__ import annotations

from typing import Any

from olake_cli.core.errors import ConfigError
from olake_cli.core.validation import apply_defaults, load_json_file, validate

SOURCES = {"postgres": "source-postgres"}
DESTINATIONS = {"parquet": "destination-parquet"}
PLANNED = {"mongodb": "source", "iceberg": "destination"}


def load_config(path: str, role: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """(role, type, validated config with defaults) of a config file; role is 'source' or 'destination'."""
    config = load_json_file(path, what="config")
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: a config must be a JSON object")
    kind = config.get("type")
    if not isinstance(kind, str):
        raise ConfigError(f"{path}: missing required field 'type' (one of "
                          f"{', '.join(sorted(SOURCES) + sorted(DESTINATIONS))})")
    found_role, schema = _connector(kind, path)
    if role and found_role != role:
        raise ConfigError(f"{path}: type '{kind}' is a {found_role}, but a {role} config is expected here")
    validate(config, schema, what=path)
    return found_role, kind, apply_defaults(config, schema)


def _connector(kind: str, path: str) -> tuple[str, str]:
    if kind in SOURCES:
        return "source", SOURCES[kind]
    if kind in DESTINATIONS:
        return "destination", DESTINATIONS[kind]
    if kind in PLANNED:
        raise ConfigError(f"{path}: the {kind} {PLANNED[kind]} is not available in this version yet")
    raise ConfigError(f"{path}: unknown type '{kind}' (sources: {', '.join(SOURCES)}; "
                      f"destinations: {', '.join(DESTINATIONS)})")


def schema_for(role: str, kind: str) -> str:
    """The schema name of a connector's config."""
    table = SOURCES if role == "source" else DESTINATIONS
    if kind not in table:
        raise ConfigError(f"unknown {role} type '{kind}' (known: {', '.join(table)})")
    return table[kind]
