"""Builders for protocol messages (Airbyte envelopes) and a thread-safe JSON-lines writer."""

from __future__ import annotations

import decimal
import json
import sys
import threading
import time
from typing import Any, BinaryIO

import orjson

from olake_cli.core.airbyte_form import airbyte_output, airbyte_stream, with_airbyte_keys
from olake_cli.core.catalog import Catalog
from olake_cli.core.state import State

LOG_LEVELS = ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")
FAILURE_TYPES = ("config_error", "system_error", "transient_error")
STREAM_STATUSES = ("STARTED", "RUNNING", "COMPLETE", "INCOMPLETE")


def now_ms() -> int:
    """Current time in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def record_message(stream: str, namespace: str | None, data: dict,
                   emitted_at: int | None = None) -> dict:
    """A RECORD message."""
    return {"type": "RECORD", "record": {"stream": stream, "namespace": namespace, "data": data,
                                         "emitted_at": now_ms() if emitted_at is None else emitted_at}}


def state_message(state: State | dict) -> dict:
    """A STATE message carrying a state object (global or stream level); for Airbyte clients with Airbyte's
    keys beside olake's (``airbyte_form``)."""
    body = state.to_dict() if isinstance(state, State) else state
    return {"type": "STATE", "state": with_airbyte_keys(body) if airbyte_output() else body}


def log_message(level: str, text: str) -> dict:
    """A LOG message; ``level`` is one of FATAL, ERROR, WARN, INFO, DEBUG, TRACE."""
    level = level.upper()
    if level == "WARNING":
        level = "WARN"
    if level not in LOG_LEVELS:
        raise ValueError(f"unknown log level {level!r}")
    return {"type": "LOG", "log": {"level": level, "message": text}}


def trace_error(message: str, failure_type: str, internal_message: str | None = None,
                stack_trace: str | None = None) -> dict:
    """A TRACE error message; ``failure_type`` is config_error, system_error or transient_error."""
    if failure_type not in FAILURE_TYPES:
        raise ValueError(f"unknown failure_type {failure_type!r}")
    error: dict[str, Any] = {"message": message, "failure_type": failure_type}
    if internal_message is not None:
        error["internal_message"] = internal_message
    if stack_trace is not None:
        error["stack_trace"] = stack_trace
    return {"type": "TRACE", "trace": {"type": "ERROR", "emitted_at": now_ms(), "error": error}}


def trace_estimate(stream: str, namespace: str | None, row_estimate: int) -> dict:
    """A TRACE ESTIMATE message: about how many rows a stream's full load will read."""
    estimate = {"name": stream, "namespace": namespace, "type": "STREAM", "row_estimate": row_estimate}
    return {"type": "TRACE", "trace": {"type": "ESTIMATE", "emitted_at": now_ms(), "estimate": estimate}}


def trace_stream_status(stream: str, namespace: str | None, status: str) -> dict:
    """A TRACE STREAM_STATUS message; ``status`` is one of :data:`STREAM_STATUSES`."""
    if status not in STREAM_STATUSES:
        raise ValueError(f"unknown stream status {status!r}")
    body = {"stream_descriptor": {"name": stream, "namespace": namespace}, "status": status}
    return {"type": "TRACE", "trace": {"type": "STREAM_STATUS", "emitted_at": now_ms(), "stream_status": body}}


def catalog_message(catalog: Catalog | dict) -> dict:
    """A CATALOG message; for Airbyte clients its streams in Airbyte's form (``airbyte_form``)."""
    body = catalog.to_dict() if isinstance(catalog, Catalog) else catalog
    if airbyte_output():
        body = {**body, "streams": [airbyte_stream(s) for s in body["streams"]]}
    return {"type": "CATALOG", "catalog": body}


def connection_status(ok: bool, message: str | None = None) -> dict:
    """A CONNECTION_STATUS message (SUCCEEDED or FAILED)."""
    status: dict[str, Any] = {"status": "SUCCEEDED" if ok else "FAILED"}
    if message is not None:
        status["message"] = message
    return {"type": "CONNECTION_STATUS", "connectionStatus": status}


def spec_message(spec: dict, documentation_url: str | None = None) -> dict:
    """A SPEC message whose connectionSpecification is the JSON Schema ``spec``."""
    body: dict[str, Any] = {"connectionSpecification": spec}
    if documentation_url:
        body["documentationUrl"] = documentation_url
    return {"type": "SPEC", "spec": body}


def _default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(msg: dict) -> bytes:
    """One JSON line (UTF-8, ending in a newline); integers beyond 64 bits fall back to the json module."""
    try:
        return orjson.dumps(msg, default=_default, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError as exc:
        if "Integer exceeds" not in str(exc):
            raise
        text = json.dumps(msg, default=_default, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8") + b"\n"


class MessageWriter:
    """Writes messages as JSON lines to a binary stream (default: stdout); safe across threads."""

    def __init__(self, stream: BinaryIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout.buffer
        self._lock = threading.Lock()

    def write(self, msg: dict) -> None:
        """Encode and write one message."""
        self.write_raw(dumps(msg))

    def write_raw(self, lines: bytes) -> None:
        """Write pre-encoded JSON lines (each ending in a newline) as one block."""
        with self._lock:
            self._stream.write(lines)

    def flush(self) -> None:
        """Flush the underlying stream."""
        with self._lock:
            self._stream.flush()

    def fileno(self) -> int:
        """The file descriptor written to."""
        return self._stream.fileno()
