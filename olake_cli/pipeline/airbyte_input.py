"""``write`` fed by an Airbyte source: its streams' records as rows, and its STATE messages as commits.

An Airbyte source's stream (a catalog stream whose types ``core.catalog.with_airbyte_types`` derived) has
no operation ids or loads of olake's: each record becomes an incremental row (``_olake_op`` ``r``) whose
operation id is ``[the run's start in milliseconds, the record's number in the run]`` (above any the
destination holds of the stream), so a keyed stream keeps the newest record per key and a keyless one every
record; its ``_olake_commit_ts`` is when ``write`` received it (a PostgreSQL target deciding conflicts by commit
time takes a later run's record over an earlier one's). A stream written with ``overwrite`` is emptied at the run's first commit of it (a truncate before
its first record, or at its first STATE).

An Airbyte STATE (per stream, global or legacy) commits the records before it of the streams it covers,
each stream's destination record holding its part of the Airbyte state under ``airbyte_state``; ``write``
echoes the message unchanged once committed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa

from olake_cli.core.catalog import Catalog, with_airbyte_types, write_mode
from olake_cli.core.codec.airbyte_types import is_derived
from olake_cli.core.opid import OpId
from olake_cli.core.row_metadata import COMMIT_TS, OP_ID
from olake_cli.core.state import State, StreamState
from olake_cli.pipeline.stream_buffer import StreamBuffers

AIRBYTE_STATE_KEY = "airbyte_state"


def is_airbyte_state(state: object) -> bool:
    """Whether a STATE message's ``state`` is an Airbyte source's (olake's own has ``level``)."""
    return isinstance(state, dict) and "level" not in state


class AirbyteStreams:
    """The catalog's streams that an Airbyte source feeds, between ``write``'s input and its buffers."""

    def __init__(self, buffers: StreamBuffers, log: Callable[[str], None],
                 clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self.buffers, self.log, self.clock = buffers, log, clock
        self.modes: dict[tuple, str] = {}  # stream key -> write mode
        self.next_op: dict[tuple, OpId] = {}  # stream key -> the operation id of its next record
        self.emptied: set[tuple] = set()  # overwrite streams truncated in this run

    def adopt(self, catalog: Catalog) -> Catalog:
        """``catalog`` with its Airbyte source's streams typed (``with_airbyte_types``); learns which streams
        those are and how each is written."""
        catalog = with_airbyte_types(catalog)
        for stream in catalog.streams:
            if is_derived(stream.json_schema):
                self.modes[stream.key] = write_mode(stream)
            else:
                self.modes.pop(stream.key, None)
        return catalog

    def rows(self, key: tuple, table: pa.Table) -> pa.Table:
        """A decoded table of a stream's records, with their operation ids (an overwrite stream emptied
        first); a stream of olake's own passes unchanged."""
        if key not in self.modes:
            return table
        self._empty_once(key)
        first = self._first_op(key)
        keys = [OpId(first.commit, first.seq + i).to_key() for i in range(table.num_rows)]
        self.next_op[key] = OpId(first.commit, first.seq + table.num_rows)
        table = table.set_column(table.schema.get_field_index(OP_ID), OP_ID, pa.array(keys, pa.string()))
        arrived = pa.array([self.clock() * 1000] * table.num_rows, pa.int64())  # the change's time: its arrival
        return table.set_column(table.schema.get_field_index(COMMIT_TS), COMMIT_TS, arrived)

    def _first_op(self, key: tuple) -> OpId:
        """The stream's next operation id; this run's first is above any the destination holds (its watermark,
        or the ``pass_op_id`` its committed state recorded), whatever the clock says."""
        if key not in self.next_op:
            buffer = self.buffers.buffers.get(key)
            watermark = buffer.watermark if buffer is not None else None
            recorded = ((buffer.committed or {}).get("stream_state") or {}).get("pass_op_id") if buffer else None
            above = max(OpId.from_key(watermark).commit + 1 if watermark else 0,
                        recorded[0] + 1 if recorded else 0)
            self.next_op[key] = OpId(max(self.clock(), above), 1)
        return self.next_op[key]

    def _empty_once(self, key: tuple) -> None:
        if self.modes.get(key) in ("overwrite", "overwrite_dedup") and key not in self.emptied \
                and key in self.buffers.buffers:
            self.emptied.add(key)
            self.buffers.truncate(key, None)

    def olake_state(self, state: dict) -> State:
        """The olake state an Airbyte STATE commits: one entry per stream it covers, each holding its part
        of the Airbyte state (``covered``); overwrite streams are emptied first."""
        streams = []
        for key, part in self.covered(state).items():
            self._empty_once(key)
            last = self.next_op.get(key)  # names the rows covered: a source may repeat a state word for word
            streams.append(StreamState("incremental", key[1], key[0], None, pass_op_id=None if last is None else
                                       [last.commit, last.seq], source={AIRBYTE_STATE_KEY: part}))
        return State("global", streams=streams)

    def covered(self, state: dict) -> dict[tuple, dict]:
        """The streams an Airbyte STATE covers, each with its part of it: a per-stream state its stream; a
        global one the streams it lists (with the shared state) and those with records waiting; a legacy
        one (``data``) those with records waiting."""
        kind = state.get("type") or "LEGACY"
        if kind == "STREAM":
            return {_key(state["stream"]): {"type": "STREAM", "stream": state["stream"]}}
        if kind == "GLOBAL":
            shared = state["global"].get("shared_state")
            parts = {_key(part): {"type": "GLOBAL", "global": {"shared_state": shared, "stream_states": [part]}}
                     for part in state["global"]["stream_states"]}
            rest = {"type": "GLOBAL", "global": {"shared_state": shared, "stream_states": []}}
        else:
            parts, rest = {}, {"type": "LEGACY", "data": state.get("data")}
        for key, buffer in self.buffers.buffers.items():
            if key in self.modes and key not in parts and buffer.has_rows():
                parts[key] = rest
        return parts


def _key(stream_state: dict) -> tuple:
    descriptor = stream_state["stream_descriptor"]
    return (descriptor.get("namespace"), descriptor["name"])
