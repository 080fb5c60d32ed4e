"""``COPY ... TO STDOUT`` read straight from libpq, in blocks.

psycopg's ``Copy`` hands out one row per call, each through its generator and wait machinery (about
2 µs a row on the benchmark machine); a chunk passed through to a PostgreSQL target holds hundreds of
thousands of rows. Here the rows are taken from libpq directly (``PQgetCopyData`` without blocking,
waiting on the socket, GIL released, when none is buffered) and joined into blocks of about
``block_bytes``: about half the CPU a row. The statement is sent the same way, so psycopg never sees
the COPY; errors arrive as psycopg's own exceptions (with their SQLSTATE).
"""

from __future__ import annotations

import select
from collections.abc import Iterator

import psycopg
from psycopg import pq, sql
from psycopg.errors import error_from_result


def copy_out_blocks(conn: psycopg.Connection, statement: sql.Composable, block_bytes: int) -> Iterator[bytes]:
    """The output of a ``COPY ... TO STDOUT`` statement, run in ``conn``'s current transaction, as
    blocks of about ``block_bytes`` (whole rows). A consumer that stops early closes ``conn``."""
    pgconn, encoding = conn.pgconn, conn.info.encoding
    try:
        pgconn.send_query(statement.as_bytes(conn))
        while pgconn.flush():
            _wait(pgconn, write=True)
        started = _result(pgconn)
        if started.status != pq.ExecStatus.COPY_OUT:
            _drain(pgconn)
            raise error_from_result(started, encoding=encoding)
        yield from _blocks(pgconn, block_bytes)
        ended = _result(pgconn)
        _drain(pgconn)
        if ended.status != pq.ExecStatus.COMMAND_OK:
            raise error_from_result(ended, encoding=encoding)
    except BaseException:
        conn.close()  # libpq may be in the middle of the COPY, which psycopg does not know about
        raise


def _blocks(pgconn: pq.abc.PGconn, block_bytes: int) -> Iterator[bytes]:
    get = pgconn.get_copy_data
    parts: list = []
    size = 0
    while True:
        nbytes, data = get(1)
        if nbytes > 0:
            parts.append(data)
            size += nbytes
            if size >= block_bytes:
                yield b"".join(parts)
                parts, size = [], 0
        elif nbytes == 0:  # nothing buffered: wait for the server
            _wait(pgconn)
            pgconn.consume_input()
        else:  # -1, the COPY's end (a failure, libpq's -2, is raised by psycopg's binding)
            break
    if parts:
        yield b"".join(parts)


def _result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult:
    result = _next(pgconn)
    if result is None:
        raise psycopg.OperationalError("the server sent no result for the COPY")
    return result


def _drain(pgconn: pq.abc.PGconn) -> None:
    """Read the results left until libpq says there are none (the connection is then idle)."""
    while _next(pgconn) is not None:
        pass


def _next(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    """The next result, waiting on the socket (not in libpq, which would hold the GIL) while it is busy."""
    while pgconn.is_busy():
        _wait(pgconn)
        pgconn.consume_input()
    return pgconn.get_result()


def _wait(pgconn: pq.abc.PGconn, write: bool = False) -> None:
    socket = pgconn.socket
    select.select([socket], [socket] if write else [], [])
