"""``olake state recover``: rebuild the state from what the destination holds (seeds/000).

Every change row carries its operation id, so a stream's change position is the largest operation id
in its current load; an incremental stream's position is the largest cursor value it holds. A stream
whose rows give no such evidence (a full load that may have been cut short) gets no state, so the
next run copies it again, which is always safe.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pyarrow.compute as pc
import pyarrow.dataset as ds

from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.position import OpId, format_lsn
from olake_cli.core.state import State, StreamState


def current_load_files(folder: str) -> tuple[str | None, list[str]]:
    """(load id, files) of the newest load in a stream folder (newest file decides)."""
    if not os.path.isdir(folder):
        return None, []
    files = [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("part-") and n.endswith(".parquet")]
    if not files:
        return None, []
    newest = max(files, key=os.path.getmtime)
    load_id = os.path.basename(newest).split("-")[1]
    return load_id, sorted(f for f in files if os.path.basename(f).split("-")[1] == load_id)


def recover_stream(stream: CatalogStream, folder: str) -> StreamState | None:
    """The state one stream's files prove, or None when they prove nothing safe to resume from."""
    load_id, files = current_load_files(folder)
    if not files or stream.sync_mode == "full_refresh":
        return None
    dataset = ds.dataset(files, format="parquet")
    extra: dict[str, Any] = {"load_id": load_id} if load_id != "0" else {}
    if stream.sync_mode == "cdc":
        table = dataset.to_table(columns=["_olake_op", "_olake_op_id"],
                                 filter=pc.field("_olake_op") != "r")
        if table.num_rows == 0:
            return None
        op = OpId.from_key(pc.max(table.column("_olake_op_id")).as_py())
        extra["op_seq"] = op.seq
        return StreamState("cdc", stream.name, stream.namespace, format_lsn(op.commit_lsn), None, extra)
    cursor = stream.cursor_column
    passes = dataset.to_table(columns=["_olake_op_id"], filter=pc.field("_olake_op_id").is_valid())
    if cursor is None or passes.num_rows == 0:
        return None
    top = pc.max(dataset.to_table(columns=[cursor]).column(cursor)).as_py()
    if top is None:
        return None
    return StreamState("incremental", stream.name, stream.namespace, _cursor_text(top), None, extra)


def _cursor_text(value: Any) -> str:
    """A cursor value as text PostgreSQL reads back exactly (``'<text>'::type``)."""
    if hasattr(value, "isoformat"):
        return value.isoformat(sep=" ")
    return str(value)


def recover_state(stream_dir: Callable[[CatalogStream], str], catalog: Catalog,
                  log: Callable[[str], None]) -> State:
    """A global state for the selected streams, from the destination's files."""
    state = State()
    for stream in catalog.selected_streams():
        ss = recover_stream(stream, stream_dir(stream))
        if ss is None:
            log(f"{stream.label}: nothing to resume from; the next run copies it in full")
            continue
        log(f"{stream.label}: {ss.sync_type} from {ss.cursor_field!r}")
        state.upsert(ss)
    return state
