"""The state file: where each stream stopped (format of the Olake state controller, seeds/002).

Load and validate it, merge stream-level updates into the global state (idempotent and
commutative for chunk progress), and save it atomically so a crash never leaves a partial file.
"""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olake_cli.core.airbyte_form import olake_state_of
from olake_cli.core.errors import OlakeError, StateError
from olake_cli.core.file_modes import new_file_mode
from olake_cli.core.stream_state import Bound, Chunk, StreamState
from olake_cli.core.validation import load_json_file, validate

SYNC_TYPES = ("full-load", "incremental", "cdc")
CHUNK_STATUSES = ("succeed", "failed", "pending")
CURRENT_VERSION = "v1"
# When the same chunk appears twice, the higher rank wins (any fixed order keeps merges commutative).
_STATUS_RANK = {"pending": 0, "failed": 1, "succeed": 2}
_DIGITS = re.compile(r"([0-9]+)")
_INTEGER = re.compile(r"-?[0-9]+")

@dataclass
class State:
    """A global state (all streams) or a stream-level state (exactly one stream)."""

    level: str = "global"
    version: str = CURRENT_VERSION
    streams: list[StreamState] = field(default_factory=list)

    def find(self, namespace: str | None, name: str) -> StreamState | None:
        """The stream's state, or None."""
        for stream in self.streams:
            if stream.stream_namespace == namespace and stream.stream_name == name:
                return stream
        return None

    def upsert(self, stream_state: StreamState) -> None:
        """Replace the stream with the same (namespace, name), or append it."""
        for index, stream in enumerate(self.streams):
            if stream.key == stream_state.key:
                self.streams[index] = stream_state
                return
        self.streams.append(stream_state)

    def split(self) -> list[State]:
        """One stream-level state per stream (what each parallel worker gets)."""
        return [State("stream", self.version, [s.copy()]) for s in self.streams]

    def to_dict(self) -> dict:
        """The state object, keys in seed order."""
        return {"level": self.level, "version": self.version,
                "streams": [s.to_dict() for s in self.streams]}

    @classmethod
    def from_dict(cls, obj: dict) -> State:
        """Build from a validated (and migrated) state object."""
        return cls(obj["level"], obj.get("version", CURRENT_VERSION),
                   [StreamState.from_dict(s) for s in obj["streams"]])


def migrate(obj: Any) -> Any:
    """Bring an older state object to the current version (a missing version is v1; ``{}`` is empty)."""
    if not isinstance(obj, dict):
        return obj
    if not obj:
        return State().to_dict()
    if "version" not in obj:
        return {**obj, "version": CURRENT_VERSION}
    return obj


def parse_state(obj: Any, what: str = "state") -> State:
    """Migrate, validate and build a State; StateError (one line naming ``what``) if invalid."""
    obj = migrate(obj)
    validate(obj, "state", what, StateError)
    return State.from_dict(obj)


def merge_state(base: State, update: State) -> State:
    """A new global state: ``base`` with every stream of ``update`` applied.

    A stream in ``update`` replaces the same stream in ``base``, except:
    - both ``full-load`` with the same cursor_field and chunks: chunks merge by bounds and
      ``succeed`` wins, so replayed or out-of-order updates give the same result in any order;
    - ``base`` already finished the full load from that very position (incremental/cdc with the
      same non-null cursor_field) and ``update`` is a stale full-load with chunks: base is kept.
    Streams come out sorted by (namespace, name) so the result does not depend on merge order.
    """
    merged = {s.key: s.copy() for s in base.streams}
    for new in update.streams:
        old = merged.get(new.key)
        merged[new.key] = new.copy() if old is None else _merge_stream(old, new)
    streams = sorted(merged.values(), key=lambda s: (_bound_sort_key(s.stream_namespace, 0),
                                                      s.stream_name))
    return State("global", CURRENT_VERSION, streams)


def _merge_stream(old: StreamState, new: StreamState) -> StreamState:
    same_position = old.cursor_field == new.cursor_field and old.load_id == new.load_id
    if (same_position and old.sync_type == new.sync_type == "full-load"
            and old.chunks is not None and new.chunks is not None):
        merged = new.filled_from(old)
        merged.chunks = merge_chunks(old.chunks, new.chunks)
        return merged
    if (same_position and new.cursor_field is not None and old.sync_type in ("incremental", "cdc")
            and new.sync_type == "full-load" and new.chunks is not None):
        return old.copy()
    return new.copy()


def merge_chunks(first: list[Chunk], second: list[Chunk]) -> list[Chunk]:
    """Union of two chunk lists by bounds; for equal bounds the best status wins.

    The order is the plan's (``first``'s, then chunks only ``second`` has): a chunk's index names it in
    file names and commits, and type-bracketed bounds (MongoDB) have no order of their own to sort by.
    """
    best: dict[tuple, Chunk] = {}
    for chunk in [*first, *second]:
        current = best.get(chunk.bounds)
        if current is None or _STATUS_RANK[chunk.status] > _STATUS_RANK[current.status]:
            best[chunk.bounds] = Chunk(chunk.status, copy.deepcopy(chunk.min), copy.deepcopy(chunk.max))
    return list(best.values())


def _bound_sort_key(bound: Bound, none_rank: int) -> tuple:
    """A total order on bounds: integers numerically, other text in natural order, lists element-wise."""
    if bound is None:
        return (none_rank,)
    if isinstance(bound, list):
        return (3, tuple(_bound_sort_key(part, 0) for part in bound))
    if _INTEGER.fullmatch(bound):
        return (1, int(bound), bound)
    parts = tuple((0, int(p), p) if _DIGITS.fullmatch(p) else (1, 0, p) for p in _DIGITS.split(bound))
    return (2, parts, bound)


def finish_full_load_if_done(stream_state: StreamState, next_sync_type: str) -> StreamState:
    """If every chunk succeeded: drop chunks, move to ``next_sync_type``, keep the position.

    ``next_sync_type`` is "incremental" or "cdc", or "full-load" for full_refresh streams
    (then a full-load without chunks means: completed). Otherwise the state is returned as is.
    """
    if next_sync_type not in SYNC_TYPES:
        raise ValueError(f"unknown sync_type {next_sync_type!r}")
    if stream_state.sync_type != "full-load" or not stream_state.all_chunks_succeeded:
        return stream_state
    done = stream_state.copy()
    done.chunks = None
    done.sync_type = next_sync_type
    return done


def load_state(path: str | Path) -> State:
    """Read a state file: a missing file is an empty global state; anything invalid is a StateError."""
    path = Path(path)
    if not path.exists():
        return State()
    obj = load_json_file(path, "state", StateError, require_object=False)
    if isinstance(obj, dict) and obj.get("type") == "STATE" and isinstance(obj.get("state"), dict):
        obj = obj["state"]  # the output of `olake state recover` is a STATE message
    handed = isinstance(obj, list) and all(isinstance(item, dict) for item in obj)
    if handed or (isinstance(obj, dict) and "level" not in obj and obj.get("type") in ("STREAM", "GLOBAL")):
        obj = olake_state_of(obj)  # what an Airbyte client (PyAirbyte) hands back: olake's states in its form
    elif not isinstance(obj, dict):
        load_json_file(path, "state", StateError)  # raises its one line: not a JSON object
    return parse_state(obj, what=f"state file '{path}'")


def state_to_json(state: State) -> bytes:
    """The bytes a state file holds: indented UTF-8 JSON and a final newline."""
    return (json.dumps(state.to_dict(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: temp file in the same dir, fsync, rename, fsync dir.

    The file keeps its mode if it exists; a new one gets 0666 less the umask, like any file olake
    creates (see ``core.file_modes``).
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, temp_name = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # an existing file keeps its mode; a new one gets what the umask allows (0600 under olake's 077)
        os.chmod(temp_name, path.stat().st_mode & 0o777 if path.exists() else new_file_mode())
        os.replace(temp_name, path)
    except BaseException:
        _remove_quietly(temp_name)
        raise
    _fsync_directory(directory)


def _remove_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


class FileStateStore:
    """A state file that is only ever replaced atomically by a valid global state."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._current: State | None = None

    def load(self) -> State:
        """The state in the file (empty if the file does not exist)."""
        with self._lock:
            self._current = load_state(self.path)
            return copy.deepcopy(self._current)

    def save(self, state: State) -> None:
        """Validate ``state`` and write it atomically; the old file stays intact on any failure."""
        with self._lock:
            self._save_locked(state)

    def merge_and_save(self, update: State) -> State:
        """Merge ``update`` into the current state, save it, and return the merged state."""
        with self._lock:
            if self._current is None:
                self._current = load_state(self.path)
            merged = merge_state(self._current, update)
            self._save_locked(merged)
            return copy.deepcopy(merged)

    def _save_locked(self, state: State) -> None:
        validate(state.to_dict(), "state", f"state to save in '{self.path}'", StateError)
        try:
            atomic_write_bytes(self.path, state_to_json(state))
        except OSError as exc:
            raise OlakeError(f"cannot write state file '{self.path}': {exc.strerror or exc}") from exc
        self._current = copy.deepcopy(state)
