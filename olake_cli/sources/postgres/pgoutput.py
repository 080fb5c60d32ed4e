"""Decoder for the ``pgoutput`` logical replication protocol, version 1 (pure Python, no driver).

Message formats: https://www.postgresql.org/docs/15/protocol-logicalrep-message-formats.html
Column values stay PostgreSQL text output strings (what protocol v1 sends); typed conversion
happens later against the catalog. A TOASTed value that an UPDATE did not touch arrives as
:data:`UNCHANGED_TOAST`, distinct from ``None`` (SQL NULL). Commit timestamps are converted from
PostgreSQL's epoch (2000-01-01) to Unix epoch microseconds.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from olake_cli.core.errors import SourceError
from olake_cli.core.values import UNCHANGED_TOAST, _UnchangedToast  # noqa: F401 (re-exported)

PG_EPOCH_OFFSET_US = 946_684_800_000_000  # 2000-01-01T00:00:00Z in Unix microseconds

_U8 = struct.Struct(">B").unpack_from
_I16 = struct.Struct(">H").unpack_from
_I32 = struct.Struct(">I").unpack_from
_BEGIN = struct.Struct(">QqI").unpack_from
_COMMIT = struct.Struct(">BQQq").unpack_from
_INSERT_HEAD = struct.Struct(">Ic").unpack_from
_TRUNCATE_HEAD = struct.Struct(">IB").unpack_from
_COLUMN_TAIL = struct.Struct(">Ii").unpack_from
_MESSAGE_HEAD = struct.Struct(">BQ").unpack_from

_TEXT, _NULL, _TOAST = ord("t"), ord("n"), ord("u")
TRUNCATE_CASCADE = 1
TRUNCATE_RESTART_IDENTITY = 2


Value = str | None | _UnchangedToast


@dataclass(slots=True)
class Begin:
    final_lsn: int  # LSN of the transaction's commit record (equals Commit.commit_lsn)
    commit_ts_us: int  # Unix epoch microseconds
    xid: int


@dataclass(slots=True)
class Commit:
    commit_lsn: int  # start of the commit record
    end_lsn: int  # end of the commit record: advancing a slot here skips this transaction
    commit_ts_us: int
    flags: int = 0


@dataclass(slots=True)
class Origin:
    commit_lsn: int
    name: str


@dataclass(slots=True, frozen=True)
class Column:
    name: str
    type_oid: int
    typmod: int
    is_key: bool  # part of the replica identity (flag bit 1)


@dataclass(slots=True)
class Relation:
    oid: int
    namespace: str  # '' means pg_catalog, as the protocol sends it
    name: str
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[Column, ...]
    column_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.column_names = tuple(c.name for c in self.columns)

    @property
    def key_names(self) -> tuple[str, ...]:
        """Names of the replica-identity columns (the ones an 'K' old tuple carries)."""
        return tuple(c.name for c in self.columns if c.is_key)


@dataclass(slots=True)
class Type:
    oid: int
    namespace: str
    name: str


@dataclass(slots=True)
class Insert:
    rel_oid: int
    new: tuple[Value, ...]


@dataclass(slots=True)
class Update:
    rel_oid: int
    old: tuple[Value, ...] | None  # present with REPLICA IDENTITY FULL ('O') or a changed key ('K')
    old_kind: str | None  # 'K', 'O' or None
    new: tuple[Value, ...]


@dataclass(slots=True)
class Delete:
    rel_oid: int
    old: tuple[Value, ...]  # 'K': key columns set, others None; 'O': the whole old row
    old_kind: str


@dataclass(slots=True)
class Truncate:
    rel_oids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(slots=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = Begin | Commit | Origin | Relation | Type | Insert | Update | Delete | Truncate | LogicalMessage


def _cstring(buf: bytes, pos: int, encoding: str) -> tuple[str, int]:
    end = buf.index(0, pos)
    return buf[pos:end].decode(encoding), end + 1


def decode_tuple(buf: bytes, pos: int, encoding: str = "utf-8") -> tuple[list[Value], int]:
    """Decode the TupleData at ``pos``; return its values and the position after it (hot path)."""
    ncols = (buf[pos] << 8) | buf[pos + 1]
    pos += 2
    values: list[Value] = [None] * ncols
    for i in range(ncols):
        kind = buf[pos]
        if kind == _TEXT:
            start = pos + 5
            pos = start + ((buf[pos + 1] << 24) | (buf[pos + 2] << 16) | (buf[pos + 3] << 8) | buf[pos + 4])
            values[i] = buf[start:pos].decode(encoding)
        elif kind == _NULL:
            pos += 1
        elif kind == _TOAST:
            values[i] = UNCHANGED_TOAST
            pos += 1
        else:
            raise SourceError(f"pgoutput: unsupported tuple column kind {chr(kind)!r}")
    if pos > len(buf):
        raise SourceError("pgoutput: truncated tuple data")
    return values, pos


def _tuple_data(buf: bytes, pos: int, encoding: str) -> tuple[tuple[Value, ...], int]:
    values, pos = decode_tuple(buf, pos, encoding)
    return tuple(values), pos


def _begin(buf: bytes, encoding: str) -> Begin:
    final_lsn, ts, xid = _BEGIN(buf, 1)
    return Begin(final_lsn, ts + PG_EPOCH_OFFSET_US, xid)


def _commit(buf: bytes, encoding: str) -> Commit:
    flags, commit_lsn, end_lsn, ts = _COMMIT(buf, 1)
    return Commit(commit_lsn, end_lsn, ts + PG_EPOCH_OFFSET_US, flags)


def _origin(buf: bytes, encoding: str) -> Origin:
    (commit_lsn,) = struct.unpack_from(">Q", buf, 1)
    name, _ = _cstring(buf, 9, encoding)
    return Origin(commit_lsn, name)


def _relation(buf: bytes, encoding: str) -> Relation:
    (oid,) = _I32(buf, 1)
    namespace, pos = _cstring(buf, 5, encoding)
    name, pos = _cstring(buf, pos, encoding)
    identity = chr(buf[pos])
    (ncols,) = _I16(buf, pos + 1)
    pos += 3
    columns = []
    for _ in range(ncols):
        flags = buf[pos]
        col_name, pos = _cstring(buf, pos + 1, encoding)
        type_oid, typmod = _COLUMN_TAIL(buf, pos)
        pos += 8
        columns.append(Column(col_name, type_oid, typmod, bool(flags & 1)))
    return Relation(oid, namespace, name, identity, tuple(columns))


def _type(buf: bytes, encoding: str) -> Type:
    (oid,) = _I32(buf, 1)
    namespace, pos = _cstring(buf, 5, encoding)
    name, _ = _cstring(buf, pos, encoding)
    return Type(oid, namespace, name)


def _insert(buf: bytes, encoding: str) -> Insert:
    oid, marker = _INSERT_HEAD(buf, 1)
    if marker != b"N":
        raise SourceError(f"pgoutput: Insert without 'N' tuple (got {marker!r})")
    new, _ = _tuple_data(buf, 6, encoding)
    return Insert(oid, new)


def _update(buf: bytes, encoding: str) -> Update:
    oid, marker = _INSERT_HEAD(buf, 1)
    old = old_kind = None
    pos = 6
    if marker in (b"K", b"O"):
        old_kind = marker.decode()
        old, pos = _tuple_data(buf, 6, encoding)
        marker = buf[pos:pos + 1]
        pos += 1
    if marker != b"N":
        raise SourceError(f"pgoutput: Update without 'N' tuple (got {marker!r})")
    new, _ = _tuple_data(buf, pos, encoding)
    return Update(oid, old, old_kind, new)


def _delete(buf: bytes, encoding: str) -> Delete:
    oid, marker = _INSERT_HEAD(buf, 1)
    if marker not in (b"K", b"O"):
        raise SourceError(f"pgoutput: Delete without 'K' or 'O' tuple (got {marker!r})")
    old, _ = _tuple_data(buf, 6, encoding)
    return Delete(oid, old, marker.decode())


def _truncate(buf: bytes, encoding: str) -> Truncate:
    nrels, options = _TRUNCATE_HEAD(buf, 1)
    oids = struct.unpack_from(f">{nrels}I", buf, 6)
    return Truncate(oids, bool(options & TRUNCATE_CASCADE), bool(options & TRUNCATE_RESTART_IDENTITY))


def _logical_message(buf: bytes, encoding: str) -> LogicalMessage:
    flags, lsn = _MESSAGE_HEAD(buf, 1)
    prefix, pos = _cstring(buf, 10, encoding)
    (length,) = _I32(buf, pos)
    return LogicalMessage(bool(flags & 1), lsn, prefix, bytes(buf[pos + 4:pos + 4 + length]))


_DECODERS = {ord("B"): _begin, ord("C"): _commit, ord("O"): _origin, ord("R"): _relation,
             ord("Y"): _type, ord("I"): _insert, ord("U"): _update, ord("D"): _delete,
             ord("T"): _truncate, ord("M"): _logical_message}


def decode(data: bytes, encoding: str = "utf-8") -> Message:
    """Decode one pgoutput v1 message; text values are decoded with the server ``encoding``."""
    if not data:
        raise SourceError("pgoutput: empty message")
    decoder = _DECODERS.get(data[0])
    if decoder is None:
        raise SourceError(f"pgoutput: unsupported message type {chr(data[0])!r} (protocol v1 expected)")
    try:
        return decoder(data, encoding)
    except (struct.error, IndexError, ValueError) as exc:  # truncated data, bad text
        raise SourceError(f"pgoutput: malformed {chr(data[0])!r} message: {exc}") from None


class RelationCache:
    """Relations and types announced by the stream, by oid; later announcements replace earlier ones."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}
        self.types: dict[int, Type] = {}

    def remember(self, message: Message) -> None:
        """Store a Relation or Type message; other messages are ignored."""
        if isinstance(message, Relation):
            self.relations[message.oid] = message
        elif isinstance(message, Type):
            self.types[message.oid] = message

    def relation(self, oid: int) -> Relation:
        """The latest Relation for ``oid``; a change for an unannounced relation is a protocol error."""
        try:
            return self.relations[oid]
        except KeyError:
            raise SourceError(f"pgoutput: change for relation {oid} before its Relation message") from None
