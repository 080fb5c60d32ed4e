"""The slot read over the streaming replication protocol: a walsender in logical mode, COPY BOTH.

``START_REPLICATION SLOT s LOGICAL start ("proto_version" '1', "publication_names" '...')`` on a
``replication=database`` connection: the server decodes the WAL and sends each pgoutput message as
soon as its transaction is decoded, so the first change arrives while the rest of the range is still
being decoded (``pg_logical_slot_peek_binary_changes`` returned nothing before it had decoded all).

The library is psycopg 3's own libpq binding (``psycopg.pq.PGconn``: ``get_copy_data``,
``put_copy_data``, ``consume_input`` and the socket), already a dependency: psycopg 3 has no
replication API, but libpq speaks COPY BOTH. Measured here on 1M changes in transactions of 1,000,
PostgreSQL 15, 2 cores: 243k changes/s through it against 232k/s through psycopg2's
``LogicalReplicationConnection`` (the walsender's one send per message is the limit for both; the
client used 1.5 s of CPU of the 4.1 s), first change after 0.01 s either way. psycopg2 would add a
second driver (and its own libpq) for no speed; psycopg's binding keeps one driver, one connection
setup (TLS, errors) and lets this module decide when to drain, reply and stop.

A thread owns the connection and reads it one batch ahead of the feed: each batch holds the messages
the server sent without a pause of a few milliseconds (up to a limit), as (lsns, payloads) lists that
the feed decodes a stretch at a time, so that the Python work per message stays small. The thread
also keeps the walsender alive while the feed's consumer is busy (a standby status update every
:data:`STATUS_EVERY_S` seconds, or a quarter of ``wal_sender_timeout`` when that is shorter, and
answers to keepalives that ask for one). Status updates report ``write`` = the last position
received and ``flush`` = ``apply`` = the position the caller says the destination committed: the
slot's confirmed position moves there, never further.

A bounded read ends at ``upto``: at the first transaction whose commit lies at or past it (its
Begin), or at a keepalive saying the server has sent everything before it (asked for with a status
update whenever the server has nothing to send). Every keepalive's walEnd is a valid end too: nothing
published committed between ``upto`` and it, or its Begin would have come first; so the range read ends at
:attr:`ReplicationConnection.server_end` when that is further. When the server was far behind ``upto``
(it decoded something big), the first keepalive past it may answer a question heard as it finished a big
transaction, and it reads on at once: its keepalives are then taken until it has been quiet for a
moment, so that the range covers the running-xacts records logged while it decoded, past which the
next run can move the slot's ``restart_lsn``. Closing ends COPY cleanly (CopyDone both ways), so the walsender releases
the slot before the next run starts; failing that within :data:`CLOSE_WAIT_S` seconds the connection
is dropped.

Before ``START_REPLICATION`` the slot is fast-forwarded to the start position when it lags
(``slot_catch_up``).

An unbounded read (``upto`` None: ``--follow``) never completes; whenever the server has nothing to
send, the thread hands on an :class:`Idle` mark carrying the last keepalive's walEnd (every transaction
committed before it has been sent, since the walsender moves that position only after sending one), and
a position the caller confirmed is reported within :data:`CONFIRM_EVERY_S` seconds.
"""

from __future__ import annotations

import queue
import select
import struct
import threading
import time
from typing import Any, NamedTuple, Protocol
from collections.abc import Iterator

import psycopg
from psycopg import pq, sql

from olake_cli.sources.postgres.lsn import format_lsn
from olake_cli.sources.postgres.slot_catch_up import catch_up, check_result, literal

STATUS_EVERY_S = 10.0  # standby status updates while the feed is busy (wal_sender_timeout: 60 s by default)
REPLY_POLL_S = 0.1  # at most this often, ask the server where it is when it sends nothing
CLOSE_WAIT_S = 5.0  # a clean end of COPY may take this long before the connection is dropped
CONFIRM_EVERY_S = 1.0  # a newly confirmed position is reported at most this often
SETTLE_BEHIND_BYTES = 16 << 20  # a bounded read whose server was this far behind its end reads on past it
SETTLE_QUIET_S = 0.25  # until the server has been quiet for an eighth of the read's time (0.1 s to this),
SETTLE_MAX_S = 1.0  # at most this long
_WAKE_S = 0.2  # the thread checks for a stop this often
_GATHER_S = 0.005  # a batch is handed on once the server has sent nothing more for this long (or it is full)
_Q = struct.Struct(">Q").unpack_from
_KEEPALIVE = struct.Struct(">QqB").unpack_from  # walEnd, server clock, reply requested
_STATUS = struct.Struct(">cQQQqB").pack  # 'r', write, flush, apply, client clock, reply requested
_PG_EPOCH_US = 946_684_800_000_000
_XLOG_DATA, _KEEPALIVE_MSG, _BEGIN = ord("w"), ord("k"), ord("B")
# Settings that shape pgoutput's text output or the decoding, copied from the feed's SQL session.
SESSION_SETTINGS = ("TimeZone", "DateStyle", "IntervalStyle", "extra_float_digits", "bytea_output",
                    "lc_monetary", "logical_decoding_work_mem")

Batch = tuple[list[int], list[bytes]]  # per message: the LSN it carries, and its pgoutput payload
_NO_END = (1 << 64) - 1  # the ``upto`` of an unbounded read


class Idle(NamedTuple):
    """The server has nothing more to send now; every transaction committed before ``wal_end`` was sent."""

    wal_end: int


class Waiting(Protocol):
    """Told, every ``every_s`` seconds that the feed waits for the server, how long it has waited."""

    every_s: float

    def __call__(self, waited_s: float) -> None: ...


def replication_conninfo(conn: psycopg.Connection) -> str:
    """The connection string of ``conn`` (password and TLS included) for a logical walsender."""
    params = {o.keyword.decode(): o.val.decode() for o in conn.pgconn.info if o.val is not None}
    params["replication"] = "database"
    return psycopg.conninfo.make_conninfo("", **params)


def session_statements(conn: psycopg.Connection) -> list[bytes]:
    """``SET`` statements giving a walsender the text formats and decoding memory of ``conn``."""
    rows = conn.execute("SELECT name, current_setting(name) FROM unnest(%s::text[]) AS name",
                        (list(SESSION_SETTINGS),)).fetchall()
    return [sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value)).as_string(conn).encode()
            for name, value in rows]


class ReplicationConnection:
    """One ``replication=database`` connection in COPY BOTH mode (used by one thread at a time)."""

    def __init__(self, conninfo: str) -> None:
        self.pg = pq.PGconn.connect(conninfo.encode())
        if self.pg.status != pq.ConnStatus.OK:
            message = self.pg.get_error_message()
            self.pg.finish()
            raise psycopg.OperationalError(message)
        self.flush = 0  # the position reported as flushed (and applied): what the destination committed
        self.received = 0  # the highest LSN a message carried
        self.server_end = 0  # the walEnd of the last keepalive: every commit before it was sent
        self._reported = 0  # the flush position last reported
        self.asked = False  # a status update asked for a reply that has not come yet
        self.sending = False  # the range ended at a Begin: the server is sending that transaction
        self._asked_at = self._status_at = float("-inf")
        self._started = time.monotonic()  # when streaming began
        self._behind = False  # the server was SETTLE_BEHIND_BYTES or more behind a bounded read's end
        self.status_every = _status_every(self.pg)

    @property
    def pid(self) -> int:
        """The walsender's process id (0 once closed)."""
        return self.pg.backend_pid

    def execute(self, statement: bytes) -> None:
        """Run one simple-query command (SET) before streaming."""
        check_result(self.pg.exec_(statement), pq.ExecStatus.COMMAND_OK)

    def start(self, slot: str, publication: str, start_lsn: int) -> None:
        """``START_REPLICATION`` of the pgoutput slot from ``start_lsn`` (the server starts at its
        confirmed position if that is further), once the slot has caught up with it (``slot_catch_up``)."""
        catch_up(self.pg, slot, start_lsn)
        options = f"\"proto_version\" '1', \"publication_names\" {literal(quote_publication(publication))}"
        command = f"START_REPLICATION SLOT {_identifier(slot)} LOGICAL {format_lsn(start_lsn)} ({options})"
        self.pg.send_query(command.encode())
        check_result(self.pg.get_result(), pq.ExecStatus.COPY_BOTH)
        self._started = time.monotonic()

    def drain(self, limit: int, upto: int) -> tuple[Batch, bool]:
        """The messages the server sends without a pause of _GATHER_S (at most ``limit``; none if it has
        nothing to send now), and whether the range up to ``upto`` is complete: a Begin at or past it
        (not returned), or a keepalive past it."""
        lsns: list[int] = []
        datas: list[bytes] = []
        get = self.pg.get_copy_data
        while len(datas) < limit:
            size, buf = get(1)
            if size > 0:
                if buf[0] == _XLOG_DATA:
                    if buf[25] == _BEGIN and _Q(buf, 26)[0] >= upto:
                        self.sending = True
                        return self._received(lsns, datas), True
                    lsns.append(_Q(buf, 1)[0])
                    datas.append(bytes(buf[25:]))
                elif buf[0] == _KEEPALIVE_MSG and self._past(self._keepalive(buf), upto):
                    return self._received(lsns, datas), True
            elif size == 0:
                if not self._readable(_GATHER_S if datas else 0.0):
                    break
                self.pg.consume_input()
            else:
                raise self._copy_ended()
        return self._received(lsns, datas), False

    def _past(self, wal_end: int, upto: int) -> bool:
        """Whether a keepalive's walEnd completes the range up to ``upto``; when it does after the server
        was SETTLE_BEHIND_BYTES or more behind (it decoded something big), once the server is quiet."""
        if wal_end < upto:
            self._behind |= upto - wal_end >= SETTLE_BEHIND_BYTES
            return False
        if self._behind:
            self._settle()
        return True

    def _settle(self) -> None:
        """Take the server's keepalives until it has been quiet for an eighth of the read's time (0.1 s
        to SETTLE_QUIET_S; at most SETTLE_MAX_S in all), so that :attr:`server_end` covers what it read
        after the big transaction it was decoding. A transaction it sends meanwhile committed past
        them: the range ends before it."""
        took = time.monotonic() - self._started
        quiet, deadline = min(SETTLE_QUIET_S, max(0.1, took / 8)), time.monotonic() + SETTLE_MAX_S
        while True:
            while (got := self.pg.get_copy_data(1))[0] > 0:  # what libpq has read already first
                if got[1][0] == _XLOG_DATA:
                    self.sending = True
                    return
                if got[1][0] == _KEEPALIVE_MSG:
                    self._keepalive(got[1])
            if got[0] < 0:
                raise self._copy_ended()
            if time.monotonic() >= deadline or not self._readable(quiet):
                return
            self.pg.consume_input()

    def _received(self, lsns: list[int], datas: list[bytes]) -> Batch:
        if lsns:
            self.received = max(self.received, lsns[-1])
        return lsns, datas

    def wait(self, timeout: float) -> None:
        """Wait until the server sends something or ``timeout`` seconds pass."""
        self._readable(timeout)

    def _readable(self, timeout: float) -> bool:
        return bool(select.select([self.pg.socket], [], [], timeout)[0])

    def keep_alive(self, ask: bool = False) -> None:
        """A status update when one is due (every :attr:`status_every` s), or asking for a reply when ``ask``
        (none outstanding, at most every REPLY_POLL_S s)."""
        now = time.monotonic()
        if ask and not self.asked and now - self._asked_at >= REPLY_POLL_S:
            self._asked_at, self.asked = now, True
            self.send_status(reply=True)
        elif now - self._status_at >= (CONFIRM_EVERY_S if self.flush > self._reported else self.status_every):
            self.send_status()

    def send_status(self, reply: bool = False) -> None:
        """A standby status update: written = received, flushed = applied = :attr:`flush`."""
        self._status_at = time.monotonic()
        clock = time.time_ns() // 1000 - _PG_EPOCH_US
        flush = self._reported = self.flush
        self.pg.put_copy_data(_STATUS(b"r", max(self.received, flush), flush, flush, clock, reply))
        if self.pg.flush() != 0:
            raise psycopg.OperationalError(self.pg.get_error_message())

    def close(self, clean: bool = True) -> None:
        """Report :attr:`flush` once more, end COPY cleanly (the walsender then releases the slot), and
        close. Not ``clean`` (a read stopped early, while the server may still be sending a large
        transaction), past CLOSE_WAIT_S seconds, or on any error, the connection is simply dropped: the
        walsender exits when it next reads or writes its socket."""
        try:
            if clean and self.pg.status == pq.ConnStatus.OK:
                self.send_status()
                self.pg.put_copy_end()
                self.pg.flush()
                self._finish_copy(time.monotonic() + CLOSE_WAIT_S)
        except psycopg.Error:
            pass
        finally:
            self.pg.finish()

    def _finish_copy(self, deadline: float) -> None:
        """Read (and drop) what the server still sends until its CopyDone and the command's end."""
        while time.monotonic() < deadline:
            size, _ = self.pg.get_copy_data(1)
            if size == -1:
                while self.pg.get_result() is not None:
                    pass
                return
            if size == 0:
                self.wait(deadline - time.monotonic())
                self.pg.consume_input()
            elif size < -1:
                return

    def _keepalive(self, buf: Any) -> int:
        """Note a keepalive; answer it at once when the server asks. Returns its walEnd."""
        wal_end, _, reply = _KEEPALIVE(buf, 1)
        self.asked, self.server_end = False, max(self.server_end, wal_end)
        if reply:
            self.send_status()
        return wal_end

    def _copy_ended(self) -> psycopg.Error:
        """The error that ended the stream (the server left COPY, or the connection broke)."""
        result = self.pg.get_result()
        if result is not None and result.status == pq.ExecStatus.FATAL_ERROR:
            return psycopg.errors.error_from_result(result)
        return psycopg.OperationalError(self.pg.get_error_message() or "the server ended the replication stream")


class StreamReader:
    """A thread reading a started :class:`ReplicationConnection` one batch ahead of its consumer
    (iterate inside ``with``); it closes the connection when it stops. ``waiting`` hears of long waits.
    Without ``upto`` it reads until stopped, handing on an :class:`Idle` mark when the server is idle."""

    def __init__(self, connection: ReplicationConnection, upto: int | None, limit: int,
                 waiting: Waiting | None) -> None:
        self.connection, self.limit, self._waiting = connection, limit, waiting
        self.upto, self.follows = (_NO_END, True) if upto is None else (upto, False)
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="olake-slot-stream", daemon=True)

    def __enter__(self) -> Iterator[Batch]:
        self._thread.start()
        return self._batches()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        while self._thread.is_alive():  # unblock a pending put
            try:
                self._queue.get(timeout=0.05)
            except queue.Empty:
                pass

    def _batches(self) -> Iterator[Batch | Idle]:
        while (item := self._next()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item

    def _next(self) -> Batch | Idle | BaseException | None:
        """The next batch, telling ``waiting`` every ``every_s`` seconds while it is awaited."""
        if self._waiting is None:
            return self._queue.get()
        since = time.monotonic()
        while True:
            try:
                return self._queue.get(timeout=self._waiting.every_s)
            except queue.Empty:
                self._waiting(time.monotonic() - since)

    def _work(self) -> None:
        conn, complete = self.connection, False
        try:
            conn.send_status()
            while not self._stop.is_set():
                batch, complete = conn.drain(self.limit, self.upto)
                if batch[1] and not self._put(batch):
                    return
                if complete:
                    self._put(None)
                    return
                if not batch[1]:
                    if self.follows and self._queue.empty():
                        self._queue.put_nowait(Idle(conn.server_end))  # (only this thread puts)
                    conn.keep_alive(ask=True)
                    conn.wait(_WAKE_S)
        except BaseException as exc:  # handed to the consumer, raised there
            self._put(exc)
        finally:
            conn.close(clean=complete and not conn.sending)

    def _put(self, item: Batch | BaseException | None) -> bool:
        """Hand an item to the consumer, keeping the walsender alive while it is busy; False if the
        reader was stopped first."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_WAKE_S)
                return True
            except queue.Full:
                self.connection.keep_alive()
        return False


def quote_publication(name: str) -> str:
    """Quote a publication name for pgoutput's ``publication_names`` list (it folds unquoted names)."""
    return '"' + name.replace('"', '""') + '"'


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _status_every(pg: pq.PGconn) -> float:
    """Seconds between status updates: STATUS_EVERY_S, or a quarter of this walsender's
    ``wal_sender_timeout`` when that is shorter (it may be set per connection)."""
    result = pg.exec_(b"SELECT setting::int FROM pg_settings WHERE name = 'wal_sender_timeout'")
    check_result(result, pq.ExecStatus.TUPLES_OK)
    timeout_ms = int(result.get_value(0, 0) or 0)
    return STATUS_EVERY_S if timeout_ms <= 0 else min(STATUS_EVERY_S, timeout_ms / 4000)


def wait_released(conn: psycopg.Connection, slot: str, pid: int | None = None,
                  timeout_s: float = 30.0) -> None:
    """Wait until walsender ``pid`` (any process, when None) no longer holds ``slot``, at most
    ``timeout_s`` seconds: a walsender exits a moment after its client is gone or its connection
    dropped, and the next run can take the slot only then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
        if row is None or row[0] is None or (pid is not None and row[0] != pid):
            return
        time.sleep(0.02)
