"""The process that plans a Spark batch read and holds its read session until the read is over.

``python -m olake_cli.pipeline.spark_keeper`` reads the pickled ``ReadOptions`` on stdin, opens the
source's read session (PostgreSQL: the exported snapshot every chunk imports, which lives only as long
as the transaction that exported it), plans the stream's full load, writes the pickled
``OlakeBatchScan`` (or the error) on stdout, then answers the partitions on a TCP port: ``start``,
``alive`` (after each batch), ``done`` and ``fail`` of a chunk, and ``rest`` (the reader of the rest of a
chunk that stopped early). It closes the session once every chunk is done, or when no chunk has said
anything for ``snapshot_idle_s`` seconds (a read that failed or was cancelled, a task lost with its
executor, or a read planned and never run), so a snapshot is never held for long without a reader.
"""

from __future__ import annotations

import json
import pickle
import secrets
import socket
import sys
import uuid
from dataclasses import replace
from typing import Any

from olake_cli.core.errors import OlakeError, SourceError
from olake_cli.core.state import Chunk, State, StreamState, finish_full_load_if_done
from olake_cli.pipeline.spark_scan import ChunkPartition, OlakeBatchScan, ReadOptions, open_stream


def plan(session: Any, stream: Any, capture: Any) -> tuple[StreamState, list[ChunkPartition], dict | None]:
    """The stream's full load planned in ``session``: its state, one partition per chunk and, with a
    change ``capture`` (whose preflight ran before the session opened), the stream's state once the load
    is done, as ``sync`` records it: the position captured before the load and the marks stitching the
    changes to it."""
    planned = session.plan_full_load(stream)
    load = StreamState(sync_type="full-load", stream_name=stream.name, stream_namespace=stream.namespace,
                       cursor_field=None, chunks=[Chunk("pending", lo, hi) for lo, hi in planned.bounds],
                       chunk_column=planned.chunk_column, load_id=uuid.uuid4().hex[:12],
                       sync_mode=stream.sync_mode, columns=stream.columns, source=dict(planned.source))
    done = None
    if capture is not None:
        start = capture.start_position()
        load = capture.with_position(load, start)
        load.source.update(capture.load_marks(session))
        load.load_op_key = capture.position_op(start).to_key()
        done = finish_full_load_if_done(replace(load, chunks=[replace(c, status="succeed") for c in load.chunks]),
                                        "cdc").to_dict()
    chunks = [ChunkPartition(i, session.chunk_reader(stream, load, i), load.load_op_key)
              for i in range(len(load.chunks))]
    return load, chunks, done


class Keeper:
    """Serves one read's partitions until they are done (or idle too long)."""

    def __init__(self, session: Any, stream: Any, load: StreamState, chunks: int, idle_s: float) -> None:
        self.session, self.stream, self.load, self.idle_s = session, stream, load, idle_s
        self.token = secrets.token_hex(16)
        self.pending = set(range(chunks))

    def serve(self, server: socket.socket) -> None:
        """Answer partitions until every chunk is done or none has said anything for ``idle_s`` seconds."""
        server.settimeout(self.idle_s)
        while self.pending:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                return
            with conn:
                conn.settimeout(60)
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        try:
            data = b"".join(iter(lambda: conn.recv(65536), b""))
            token, what, index, arg = json.loads(data)
        except (OSError, ValueError):
            return
        if token != self.token or index not in range(len(self.load.chunks)):
            return
        if what == "done":
            self.pending.discard(index)
        elif what == "rest":
            conn.sendall(pickle.dumps(self._rest(index, arg)))

    def _rest(self, index: int, resume: Any) -> Any:
        number = len(self.load.chunks)
        try:
            reader = self.session.chunk_reader(self.stream, self.load, index)
            lo, hi = reader.rest_of_chunk(resume, number)
            self.load.chunks.append(Chunk("pending", lo, hi))
            return self.session.chunk_reader(self.stream, self.load, number)
        except OlakeError as exc:
            return exc


def main() -> None:
    """Plan the read given on stdin, answer on stdout, then keep the session for the partitions."""
    opts: ReadOptions = pickle.loads(sys.stdin.buffer.read())
    out = open(sys.stdout.fileno(), "wb", closefd=True)  # closing it ends the planner's read
    sys.stdout = sys.stderr
    try:
        source, stream, _ = open_stream(opts)
        capture = None
        if opts.streaming:
            stream.sync_mode = "cdc"
            capture = source.change_capture([stream], _log)
            capture.preflight(State())
        with source.open_session([stream], _log) as session:
            load, chunks, done = plan(session, stream, capture)
            keeper = Keeper(session, stream, load, len(chunks), opts.snapshot_idle_s)
            with socket.create_server((opts.driver_host, 0)) as server:
                address = (opts.driver_host, server.getsockname()[1], keeper.token)
                scan = OlakeBatchScan(stream.label, stream.json_schema, tuple(session.key_columns(stream)),
                                      chunks, address)
                out.write(pickle.dumps((scan, done)))
                out.close()
                keeper.serve(server)
    except OlakeError as exc:
        _answer_error(out, exc)
    except Exception as exc:  # noqa: BLE001 (one clear line instead of a trace in a Spark worker)
        _answer_error(out, SourceError(f"planning the read failed: {type(exc).__name__}: {exc}"))


def _log(text: str) -> None:
    print(f"olake: {text}", file=sys.stderr, flush=True)


def _answer_error(out: Any, exc: OlakeError) -> None:
    if not out.closed:
        out.write(pickle.dumps(exc))
        out.close()
    else:
        print(f"olake: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()
