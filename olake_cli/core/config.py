"""Loading and validating config files, and picking the connector their ``type`` names."""

from __future__ import annotations

import os
from typing import Any
from collections.abc import Callable

from olake_cli.core.errors import ConfigError
from olake_cli.core.registry import DESTINATIONS, SOURCES, entry
from olake_cli.core.validation import apply_defaults, load_json_file, load_schema, validate


def load_config(path: str, role: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """(role, type, validated config with defaults) of a config file; role is 'source' or 'destination'."""
    config = load_json_file(path, what="config", finite=True)
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: a config must be a JSON object")
    kind = config.get("type")
    if not isinstance(kind, str):
        raise ConfigError(f"{path}: missing required field 'type' (one of "
                          f"{', '.join(sorted(SOURCES) + sorted(DESTINATIONS))})")
    config = resolve_env_values(config, path)
    found = _connector(kind, role or _role_of(kind, config), path)
    validate(config, found.schema, what=path)
    return found.role, kind, apply_defaults(config, found.schema)


def _connector(kind: str, role: str | None, path: str):
    """The registry entry of ``kind`` in ``role`` (any role for None), or a ConfigError saying why not."""
    try:
        return entry(kind, role, where=path)
    except ConfigError:
        if role is None:
            raise
        other = entry(kind, where=path)  # raises the unknown-type error when it is neither
        raise ConfigError(f"{path}: type '{kind}' is a {other.role}, but a {role} config is expected here") from None


def _role_of(kind: str, config: dict[str, Any]) -> str | None:
    """The role of a config whose command does not say (``check``): for a type naming both a source and
    a destination (``postgres``), the role whose own fields (those the other role lacks) it sets more of,
    a source on a tie. A typo is then an unknown field of the right role: ``"schema"`` next to
    ``replication_slot`` is a source's misspelt ``schemas``, not a destination."""
    if kind not in SOURCES or kind not in DESTINATIONS:
        return None
    source_fields = set(load_schema(SOURCES[kind].schema)["properties"])
    destination_fields = set(load_schema(DESTINATIONS[kind].schema)["properties"])
    source_only = len((source_fields - destination_fields) & set(config))
    destination_only = len((destination_fields - source_fields) & set(config))
    return "destination" if destination_only > source_only else "source"


def resolve_env_values(config: dict[str, Any], path: str, prefix: str = "") -> dict[str, Any]:
    """``{"password": {"env": "PGPASSWORD"}}`` takes the value from the environment (fields at any
    depth, such as ``spark``'s ``s3.secret-access-key``), so secrets stay out of config files; an unset
    variable is a config error naming it."""
    resolved = dict(config)
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"env"} and isinstance(value["env"], str):
            if value["env"] not in os.environ:
                raise ConfigError(f"{path}: field '{prefix}{key}' takes its value from the environment variable "
                                  f"'{value['env']}', which is not set")
            resolved[key] = os.environ[value["env"]]
        elif isinstance(value, dict):
            resolved[key] = resolve_env_values(value, path, f"{prefix}{key}.")
    return resolved


def schema_for(role: str, kind: str) -> str:
    """The schema name of a connector's config."""
    return entry(kind, role, where="spec").schema


def config_files(connector: str, values: dict[str, Any], fields: tuple[str, ...],
                 keep: Callable[[str, str], bool] = lambda name, path: False) -> dict[str, str]:
    """The files named by ``fields`` of a config, made absolute (Spark tasks may run in another directory).

    A value ``keep(name, path)`` accepts is passed through as it is; a path that is not a regular file
    is a ConfigError naming the connector, the field and what the path is instead.
    """
    found = {}
    for name in fields:
        path = values.get(name)
        if path is None:
            continue
        if keep(name, path):
            found[name] = path
            continue
        full = os.path.abspath(os.path.expanduser(path))
        if not os.path.isfile(full):
            what = "a directory" if os.path.isdir(full) else "no such file"
            raise ConfigError(f"{connector}: '{name}' must name a PEM file, but {path} is {what}")
        found[name] = full
    return found
