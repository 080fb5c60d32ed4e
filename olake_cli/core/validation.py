"""Run-time validation of every input against the JSON Schemas in ``olake_cli/schemas``.

Errors come out as ONE line naming the file and the field, e.g.
``config.json: field 'port': 'abc' is not of type 'integer'``; values of ``writeOnly``
fields (passwords) are never echoed.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource

from olake_cli.core.errors import ConfigError, OlakeError, ProtocolError

_MAX_VALUE_CHARS = 60
MAX_INTERVAL_S = 86_400.0  # one day: a longer interval of a following run (or NaN, infinity) is a mistake
_JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean",
                    int: "integer", float: "number", type(None): "null"}
_MESSAGE_DEFS = {"RECORD": "record_message", "STATE": "state_message", "LOG": "log_message",
                 "TRACE": "trace_message", "CATALOG": "catalog_message",
                 "CONNECTION_STATUS": "connection_status_message", "SPEC": "spec_message",
                 "CONTROL": "control_message"}


def schema_dir() -> Path:
    """Directory holding the JSON Schemas (inside the package, so it ships with the wheel)."""
    return Path(__file__).resolve().parents[1] / "schemas"


@functools.cache
def load_schema(name: str) -> dict:
    """The schema ``name`` (with or without the ``.schema.json`` suffix) as a dict."""
    file_name = name if name.endswith(".json") else f"{name}.schema.json"
    path = schema_dir() / file_name
    if not path.is_file():
        raise OlakeError(f"unknown schema {name!r}: {path} does not exist")
    return json.loads(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    resources = []
    for path in sorted(schema_dir().glob("*.schema.json")):
        schema = load_schema(path.name)
        resources.append((schema.get("$id", path.name), Resource.from_contents(schema)))
    return Registry().with_resources(resources)


@functools.cache
def _validator(schema_name: str, fragment: str = "") -> Draft202012Validator:
    schema = load_schema(schema_name)
    if fragment:
        schema = {"$ref": f"{schema['$id']}#{fragment}"}
    return Draft202012Validator(schema, registry=_registry())


def validate(instance: Any, schema_name: str, what: str,
             error_cls: type[ConfigError] = ConfigError) -> None:
    """Raise ``error_cls`` with one line naming ``what`` and the field if ``instance`` breaks the schema."""
    _raise_first_error(_validator(schema_name), instance, what, error_cls)


def _raise_first_error(validator: Draft202012Validator, instance: Any, what: str,
                       error_cls: type[ConfigError]) -> None:
    error = best_match(validator.iter_errors(instance))
    if error is not None:
        raise error_cls(format_validation_error(error, what))


def check_interval(option: str, seconds: float | None, never: float | None = None) -> None:
    """A ConfigError (one line) unless ``seconds`` (an option's value; None: not given) is a finite number
    above 0, or ``never`` (the value meaning "never"), and at most :data:`MAX_INTERVAL_S`."""
    if seconds is None or seconds == never or (math.isfinite(seconds) and 0 < seconds <= MAX_INTERVAL_S):
        return
    wanted = f"{never:g} (never) or a number of seconds up to" if never is not None else \
        "a number of seconds above 0 and at most"
    raise ConfigError(f"{option} {seconds:g}: give {wanted} {MAX_INTERVAL_S:g} (1 day)")


def env_seconds(name: str, default: float) -> float:
    """The seconds environment variable ``name`` sets (``default`` when unset), held to what
    :func:`check_interval` allows; a ConfigError (one line naming the variable) otherwise."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    try:
        check_interval(name, seconds)
    except ConfigError:
        raise ConfigError(f"{name}={text}: give a number of seconds above 0 and at most {MAX_INTERVAL_S:g} "
                          "(1 day)") from None
    return seconds


def apply_defaults(instance: dict, schema_name: str) -> dict:
    """A copy of ``instance`` with the schema's top-level defaults filled in for absent keys."""
    result = dict(instance)
    for key, prop in load_schema(schema_name).get("properties", {}).items():
        if key not in result and isinstance(prop, dict) and "default" in prop:
            result[key] = copy.deepcopy(prop["default"])
    return result


class _NotJsonNumber(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity``, which Python's JSON reader takes and JSON does not have."""


def _not_json_number(name: str) -> Any:
    raise _NotJsonNumber(name)


def load_json_file(path: str | Path, what: str, error_cls: type[ConfigError] = ConfigError,
                   require_object: bool = True, finite: bool = False) -> Any:
    """Parse the JSON file ``path`` (``what`` says which file it is, e.g. "config"); one-line errors.
    ``finite``: refuse NaN and Infinity, which Python's reader takes and no schema bound refuses."""
    label = f"{what} file '{path}'"
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise error_cls(f"{label} does not exist") from None
    except IsADirectoryError:
        raise error_cls(f"{label} is a directory, not a file") from None
    except OSError as exc:
        raise error_cls(f"{label} cannot be read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error_cls(f"{label} is not UTF-8 text (bad byte at offset {exc.start})") from None
    if not text.strip():
        raise error_cls(f"{label} is empty")
    try:
        value = json.loads(text, parse_constant=_not_json_number if finite else None)
    except _NotJsonNumber as exc:
        raise error_cls(f"{label}: {exc} is not a JSON number (give a finite number)") from None
    except json.JSONDecodeError as exc:
        raise error_cls(f"{label} is not valid JSON: {exc.msg} at line {exc.lineno} "
                        f"column {exc.colno}") from None
    if require_object and not isinstance(value, dict):
        raise error_cls(f"{label} must contain a JSON object, found {_json_type(value)}")
    return value


def validate_message(msg: Any, what: str = "stdin message") -> None:
    """Check one protocol message: a cheap hand-written check for RECORD, the full schema otherwise."""
    if type(msg) is not dict:
        raise ProtocolError(f"{what}: expected a JSON object, found {_json_type(msg)}")
    if "type" not in msg:
        raise ProtocolError(f"{what}: not a protocol message (no 'type' field; expected one of "
                            f"{', '.join(_MESSAGE_DEFS)})")
    kind = msg.get("type")
    if kind == "RECORD":
        _check_record_envelope(msg, what)
        return
    fragment = _MESSAGE_DEFS.get(kind) if isinstance(kind, str) else None
    if fragment is None:
        known = ", ".join(_MESSAGE_DEFS)
        raise ProtocolError(f"{what}: unknown message type {_short(kind)} (expected one of {known})")
    _raise_first_error(_validator("message", f"/$defs/{fragment}"), msg, what, ProtocolError)


def _check_record_envelope(msg: dict, what: str) -> None:
    record = msg.get("record")
    if type(record) is not dict:
        raise ProtocolError(f"{what}: RECORD field 'record' must be an object, found {_json_type(record)}")
    if type(record.get("stream")) is not str:
        raise ProtocolError(f"{what}: RECORD field 'record.stream' must be a string, "
                            f"found {_json_type(record.get('stream'))}")
    if type(record.get("data")) is not dict:
        raise ProtocolError(f"{what}: RECORD field 'record.data' must be an object, "
                            f"found {_json_type(record.get('data'))}")
    namespace = record.get("namespace")
    if namespace is not None and type(namespace) is not str:
        raise ProtocolError(f"{what}: RECORD field 'record.namespace' must be a string or null, "
                            f"found {_json_type(namespace)}")


def format_validation_error(error: ValidationError, what: str) -> str:
    """One line for ``error``: ``<what>: field '<json path>': <problem>``."""
    path = list(error.absolute_path)
    secret = isinstance(error.schema, dict) and bool(error.schema.get("writeOnly"))
    value = "the value" if secret else _short(error.instance)
    kind = error.validator
    if kind == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        return f"{what}: missing required field '{json_path(path + missing[:1])}'"
    if kind == "additionalProperties":
        return _unknown_field_line(error, path, what)
    where = f"{what}: field '{json_path(path)}'" if path else what
    if kind == "type" and not path:
        expected = _type_names(error.validator_value).replace("'", "")
        return f"{what}: expected a JSON {expected}, found {_json_type(error.instance)}"
    if kind in ("oneOf", "anyOf") and _branch_types(error.validator_value):
        return f"{where}: {value} is not of type {_type_names(_branch_types(error.validator_value))}"
    if kind == "type":
        return f"{where}: {value} is not of type {_type_names(error.validator_value)}"
    if kind == "enum":
        allowed = ", ".join(_short(v) for v in error.validator_value)
        return f"{where}: {value} is not one of {allowed}"
    if kind == "const":
        return f"{where}: expected {_short(error.validator_value)}, found {value}"
    message = "invalid value" if secret else error.message
    return f"{where}: {_one_line(message)}"


def _unknown_field_line(error: ValidationError, path: list, what: str) -> str:
    allowed = list(error.schema.get("properties", {}))
    patterns = [re.compile(p) for p in error.schema.get("patternProperties", {})]
    extras = [k for k in error.instance if k not in allowed and not any(p.search(k) for p in patterns)]
    field = json_path(path + extras[:1])
    close = difflib.get_close_matches(str(extras[0]), allowed, n=1, cutoff=0.6) if extras else []
    if close:
        return f"{what}: unknown field '{field}'; did you mean '{close[0]}'?"
    hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
    return f"{what}: unknown field '{field}'{hint}"


def json_path(parts: Iterable[Any]) -> str:
    """``['streams', 0, 'name']`` -> ``streams[0].name``."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _type_names(expected: Any) -> str:
    names = [expected] if isinstance(expected, str) else list(expected)
    return " or ".join(f"'{name}'" for name in names)


def _branch_types(branches: list) -> list[str]:
    """The JSON types accepted by the ``oneOf``/``anyOf`` branches, or [] if one has no ``type``."""
    names: list[str] = []
    for branch in branches:
        kind = branch.get("type") if isinstance(branch, dict) else None
        if kind is None:
            return []
        names.extend([kind] if isinstance(kind, str) else kind)
    return list(dict.fromkeys(names))


def _json_type(value: Any) -> str:
    name = _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
    return "an " + name if name[0] in "aeiou" else "a " + name


def _short(value: Any) -> str:
    return _one_line(repr(value), _MAX_VALUE_CHARS)


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
