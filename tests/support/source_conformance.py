"""What the source conformance suite (tests/test_source_conformance.py) needs: one small adapter per source
(create a table or collection with rows, change it with every kind of change the source has, read its
current rows as comparable texts, its config, where a STATE stands), the same stream read back from a
Parquet destination as its users read it, and ``olake sync`` runs of it (bounded, or ``--follow``).

Every source's stream has a key, a number ``v`` and a text ``note``; its rows are kept as
``{key texts: (v text, note text)}`` (None for a null or missing value), on both sides.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import psycopg

from olake_cli.core.config import load_config
from olake_cli.core.opid import OpId
from olake_cli.core.registry import make_source
from tests.support.writer_thread import WriterThread
from tests.support.cli import messages, write_json
from tests.support.current_view import current_view
from tests.support.follow import start_olake, wait_until
from tests.support.verify import read_parquet

Rows = dict[tuple, tuple]


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


class SourceAdapter:
    """One source under test (its methods without a body are each source's to give): subclasses set
    ``namespace``, ``name``, ``key``, ``kinds`` (the change kinds ``change`` makes) and ``toast`` (whether
    its Parquet rows carry unchanged-TOAST lists)."""

    namespace: str
    name: str
    key: list[str]
    kinds: tuple[str, ...]
    toast = False
    keeps_log = False  # the source keeps its log until olake lets it go (``released``)

    def create(self, rows: int) -> None:
        """The stream's table or collection with ``rows`` rows, keys 1..rows."""

    def config(self) -> dict:
        """The source config."""

    def change(self, rng: random.Random, kinds: tuple[str, ...]) -> None:
        """One transaction (where the source has them) making changes of ``kinds``, on rows ``rng`` picks."""

    def rows(self) -> Rows:
        """The source's current rows as texts."""

    def position(self, entry: dict) -> OpId | None:
        """Where a STATE's stream entry stands, comparable with the op ids of its changes (None: nowhere)."""

    def transaction_of(self, op: OpId) -> object:
        """What identifies the transaction (the safe points' unit) of a change's op id."""
        return op.commit

    def released(self) -> int | None:
        """How far the source has let its log go for olake (a commit position), or None (no such log)."""
        return None

    def cleanup(self) -> None:
        """Free what the source keeps for the tests' runs (a replication slot)."""

    def every_kind(self, seed: int, transactions: int = 12) -> None:
        """``transactions`` transactions, each kind of change the source has alone first, then mixes."""
        rng = random.Random(seed)
        for kind in self.kinds:
            self.change(rng, (kind,))
        common = tuple(k for k in self.kinds if k != "truncate")
        for _ in range(transactions - len(self.kinds)):
            self.change(rng, tuple(rng.sample(common, rng.randint(1, len(common)))))

    def lake_rows(self, root: Path) -> Rows:
        """The stream's current rows in a Parquet destination at ``root`` (the documented current-table
        query), as texts."""
        columns = [*self.key, "v", "note"]
        table = current_view(str(root / self.namespace / self.name), columns, self.key, self.toast)
        width = len(self.key)
        return {tuple(_text(v) for v in row[:width]): tuple(_text(v) for v in row[width:])
                for row in zip(*(table.column(c).to_pylist() for c in columns))}

    def change_ops(self, root: Path) -> list[OpId]:
        """The op ids of every change row the Parquet stream folder holds (load rows left out)."""
        table = read_parquet(str(root / self.namespace / self.name))
        return [OpId.from_key(k) for k, op in zip(table.column("_olake_op_id").to_pylist(),
                                                   table.column("_olake_op").to_pylist()) if op != "r"]


class PostgresAdapter(SourceAdapter):
    """Table ``public.conf (id int PRIMARY KEY, v bigint, note text)`` through a slot of its own."""

    namespace, name, key, toast, keeps_log = "public", "conf", ["id"], True, True
    kinds = ("truncate", "insert", "update", "delete", "key")  # the truncate first: later changes stay in the files

    def __init__(self, cluster, database: str) -> None:
        self.cluster, self.database = cluster, database
        self.dsn, self.slot, self.next_id = cluster.dsn(database), f"conf_{database}", 1

    def create(self, rows: int) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE conf (id int PRIMARY KEY, v bigint, note text)")
            conn.execute("INSERT INTO conf SELECT g, g, 'row ' || g FROM generate_series(1, %s::int) g", (rows,))
        self.next_id = rows + 1

    def config(self) -> dict:
        return self.cluster.source_config(self.database, replication_slot=self.slot, publication=f"{self.slot}_pub",
                                          create_slot_and_publication=True)

    def change(self, rng: random.Random, kinds: tuple[str, ...]) -> None:
        with psycopg.connect(self.dsn) as conn:  # one transaction
            for kind in kinds:
                self._one(conn, rng, kind)

    def _one(self, conn: psycopg.Connection, rng: random.Random, kind: str) -> None:
        target = self._some_id(conn, rng)
        if kind == "insert" or target is None:
            conn.execute("INSERT INTO conf VALUES (%s, %s, %s)", (self.next_id, rng.randint(-99, 99), "new"))
            self.next_id += 1
        elif kind == "update":
            conn.execute("UPDATE conf SET v = v + 1, note = %s WHERE id = %s", (f"u{rng.randint(0, 999)}", target))
        elif kind == "delete":
            conn.execute("DELETE FROM conf WHERE id = %s", (target,))
        elif kind == "key":  # the row moves to a new key
            conn.execute("UPDATE conf SET id = %s, note = 'moved' WHERE id = %s", (self.next_id, target))
            self.next_id += 1
        else:  # truncate, then rows again in the same transaction
            conn.execute("TRUNCATE conf")
            conn.execute("INSERT INTO conf SELECT g, -g, NULL FROM generate_series(%s::int, %s::int) g",
                         (self.next_id, self.next_id + 19))
            self.next_id += 20

    @staticmethod
    def _some_id(conn: psycopg.Connection, rng: random.Random) -> int | None:
        ids = [r[0] for r in conn.execute("SELECT id FROM conf ORDER BY id LIMIT 50 OFFSET %s",
                                          (rng.randint(0, 50),)).fetchall()]
        return rng.choice(ids) if ids else None

    def rows(self) -> Rows:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            found = conn.execute("SELECT id::text, v::text, note FROM conf").fetchall()
        return {(i,): (v, note) for i, v, note in found}

    def position(self, entry: dict) -> OpId | None:
        from olake_cli.sources.postgres.lsn import parse_lsn

        inner = entry["stream_state"]
        if entry["sync_type"] != "cdc" or not isinstance(inner.get("cursor_field"), str):
            return None
        return OpId(parse_lsn(inner["cursor_field"]), int(inner.get("op_seq", 0)))

    def released(self) -> int | None:
        """The slot's confirmed position now (None: no slot yet)."""
        from olake_cli.sources.postgres.lsn import parse_lsn

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                               (self.slot,)).fetchone()
        return None if row is None or row[0] is None else parse_lsn(row[0])

    def cleanup(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = %s AND NOT active", (self.slot,))


class MongoAdapter(SourceAdapter):
    """Collection ``conf`` of documents ``{_id, v, note}``; several changes of one call share a transaction
    (one cluster time)."""

    name, key = "conf", ["_id"]
    kinds = ("insert", "update", "replace", "delete")

    def __init__(self, uri: str, database: str) -> None:
        self.uri, self.namespace, self.next_id = uri, database, 1
        self.touched: set[int] = set()  # documents updated or replaced: never deleted after (see ``_one``)

    def create(self, rows: int) -> None:
        from tests.support.mongo import connect

        with connect(self.uri) as client:
            client[self.namespace].conf.insert_many([{"_id": i, "v": i, "note": f"doc {i}"}
                                                     for i in range(1, rows + 1)])
        self.next_id = rows + 1

    def config(self) -> dict:
        return {"type": "mongodb", "uri": self.uri, "database": self.namespace}

    def change(self, rng: random.Random, kinds: tuple[str, ...]) -> None:
        from tests.support.mongo import connect

        with connect(self.uri) as client:
            coll = client[self.namespace].conf
            if len(kinds) == 1:
                self._one(coll, rng, kinds[0], None)
                return
            with client.start_session() as session, session.start_transaction():
                for kind in kinds:
                    self._one(coll, rng, kind, session)

    def _one(self, coll, rng: random.Random, kind: str, session) -> None:
        found = [d["_id"] for d in coll.find({}, {"_id": 1}, session=session).sort("_id", 1).skip(rng.randint(0, 50))
                 .limit(50)]
        if kind == "delete":  # an update of a document deleted later is no safe point until its delete (by design)
            found = [i for i in found if i not in self.touched]
        target = rng.choice(found) if found else None
        if kind == "insert" or target is None:
            coll.insert_one({"_id": self.next_id, "v": rng.randint(-99, 99), "note": "new"}, session=session)
            self.next_id += 1
        elif kind == "update":
            coll.update_one({"_id": target}, {"$inc": {"v": 1}, "$set": {"note": f"u{rng.randint(0, 999)}"}},
                            session=session)
        elif kind == "replace":  # the whole document: ``v`` is gone
            coll.replace_one({"_id": target}, {"note": "replaced"}, session=session)
        else:
            coll.delete_one({"_id": target}, session=session)
        if kind in ("update", "replace"):
            self.touched.add(target)

    def rows(self) -> Rows:
        from tests.support.mongo import connect

        with connect(self.uri) as client:
            return {(str(d["_id"]),): (_text(d.get("v")), _text(d.get("note"))) for d in client[self.namespace].conf.find()}

    def position(self, entry: dict) -> OpId | None:
        op = entry["stream_state"].get("op_id")
        return None if entry["sync_type"] != "cdc" or op is None else OpId.from_json(op)


class DynamoAdapter(SourceAdapter):
    """Table ``(pk S, sk N)`` with attributes ``v`` (N) and ``note`` (S) on moto's server; its safe points
    are the ends of its reads (no transactions), so ``transaction_of`` puts every record in one."""

    namespace, key = "dynamodb", ["pk", "sk"]
    kinds = ("put", "overwrite", "update", "delete")

    def __init__(self, server, table: str) -> None:
        self.server, self.name, self.client, self.next_id = server, table, server.client(), 1

    def create(self, rows: int) -> None:
        from tests.support.dynamo import create_table, put_items

        create_table(self.client, self.name)
        put_items(self.client, self.name, [self._item(i, i, f"item {i}") for i in range(1, rows + 1)])
        self.next_id = rows + 1

    @staticmethod
    def _item(i: int, v: int, note: str | None) -> dict:
        item = {"pk": {"S": f"p{i % 7}"}, "sk": {"N": str(i)}, "v": {"N": str(v)}}
        return item if note is None else {**item, "note": {"S": note}}

    def config(self) -> dict:
        return self.server.config(tables=[self.name], segments=2, checkpoint_items=40, page_items=20)

    def change(self, rng: random.Random, kinds: tuple[str, ...]) -> None:
        for kind in kinds:
            self._one(rng, kind)

    def _one(self, rng: random.Random, kind: str) -> None:
        target = rng.randrange(1, self.next_id)
        key = {"pk": {"S": f"p{target % 7}"}, "sk": {"N": str(target)}}
        if kind == "put":
            self.client.put_item(TableName=self.name, Item=self._item(self.next_id, rng.randint(-99, 99), "new"))
            self.next_id += 1
        elif kind == "overwrite":  # the whole item: ``note`` is gone
            self.client.put_item(TableName=self.name, Item=self._item(target, rng.randint(-99, 99), None))
        elif kind == "update":
            self.client.update_item(TableName=self.name, Key=key, UpdateExpression="SET v = :v, note = :n",
                                    ExpressionAttributeValues={":v": {"N": str(rng.randint(-99, 99))},
                                                               ":n": {"S": f"u{rng.randint(0, 999)}"}})
        else:
            self.client.delete_item(TableName=self.name, Key=key)

    def rows(self) -> Rows:
        from tests.support.dynamo import all_items

        return {(i["pk"]["S"], i["sk"]["N"]): (i["v"]["N"], i["note"]["S"] if "note" in i else None)
                for i in all_items(self.client, self.name)}

    def position(self, entry: dict) -> OpId | None:
        from olake_cli.core.stream_state import StreamState
        from olake_cli.sources.dynamodb.positions import END, cursor_of, record_op

        held = cursor_of(StreamState.from_dict(entry))
        if held is None or entry["sync_type"] != "cdc":
            return None
        marks = [record_op(m) for m in held[0].shards.values() if m != END]
        return max(marks, default=OpId(0, 0))

    def transaction_of(self, op: OpId) -> object:
        return None


class Writer(WriterThread):
    """Changes the source until stopped: one transaction of its common kinds (``pause`` s apart)."""

    def __init__(self, adapter: SourceAdapter, seed: int, pause: float = 0.01) -> None:
        super().__init__(seed)
        self.adapter, self.pause = adapter, pause
        self.kinds = tuple(k for k in adapter.kinds if k != "truncate")

    def write(self) -> None:
        while not self.stop_event.wait(self.pause):
            self.adapter.change(self.rng, tuple(self.rng.sample(self.kinds, self.rng.randint(1, 2))))
            self.transactions += 1


class Run:
    """``olake sync`` of an adapter's stream into Parquet at ``tmp_path/lake``, with one state file."""

    def __init__(self, adapter: SourceAdapter, tmp_path: Path) -> None:
        self.adapter, self.tmp_path, self.root = adapter, tmp_path, tmp_path / "lake"
        self.src = write_json(tmp_path / "src.json", adapter.config())
        self.dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(self.root)})
        self.catalog, self.state, self.log = tmp_path / "catalog.json", tmp_path / "state.json", tmp_path / "sync.log"
        self.runs = 0

    def discover(self) -> None:
        """The catalog: the stream alone, in cdc mode (discovered in this process)."""
        _, kind, config = load_config(self.src, "source")
        catalog = make_source(kind, config).discover()
        for stream in catalog["streams"]:
            ours = (stream["namespace"], stream["name"]) == (self.adapter.namespace, self.adapter.name)
            stream.update(sync_mode="cdc", selected=ours)
        self.catalog.write_text(json.dumps(catalog))

    def capture(self) -> object:
        """The source's change capture of the catalog's stream, made in this process (nothing connects)."""
        from olake_cli.core.catalog import parse_catalog

        _, kind, config = load_config(self.src, "source")
        streams = [s for s in parse_catalog(json.loads(self.catalog.read_text())).streams if s.selected]
        return make_source(kind, config).change_capture(streams, lambda line: None)

    def args(self, follow: bool) -> list[str]:
        """``sync``'s arguments (``follow``: with ``--follow``)."""
        args = ["sync", "--source", self.src, "--destination", self.dst, "--catalog", str(self.catalog),
                "--state", str(self.state)]
        return args + ["--follow", "--commit-interval", "0.5"] if follow else args

    def bounded(self) -> list[dict]:
        """One ``olake sync``, asserted to succeed; the STATEs it printed."""
        self.runs += 1
        out = self.tmp_path / f"states-{self.runs}.jsonl"
        with open(out, "wb") as stdout:
            proc = start_olake(self.args(False), self.log, stdout=stdout)
            proc.wait(timeout=300)
        assert proc.returncode == 0, self.log.read_text()[-3000:]
        return self.states(out)

    def follow(self) -> tuple[subprocess.Popen, Path]:
        """``olake sync --follow`` started in the background, once it follows; it and the file its stdout
        goes to."""
        self.runs += 1
        out = self.tmp_path / f"states-{self.runs}.jsonl"
        following = self.log.read_text().count("following the change log") if self.log.exists() else 0
        with open(out, "wb") as stdout:
            proc = start_olake(self.args(True), self.log, stdout=stdout)
        wait_until(lambda: self.log.read_text().count("following the change log") > following, "the run follows",
                   run=proc)
        return proc, out

    def states(self, out: Path) -> list[dict]:
        """The stream's entries of the STATEs a run printed to ``out``, in order."""
        found = [m for m in messages(out.read_bytes()) if m["type"] == "STATE"]
        ours = (self.adapter.namespace, self.adapter.name)
        return [s for m in found for s in m["state"]["streams"]
                if (s.get("stream_namespace"), s["stream_name"]) == ours]

    def converged(self) -> bool:
        """Whether the destination's current rows equal the source's."""
        try:
            return self.adapter.lake_rows(self.root) == self.adapter.rows()
        except Exception:  # no file yet  # noqa: BLE001
            return False

    def committed(self) -> dict | None:
        """The stream entry the destination committed last (its manifest's state), or None."""
        from olake_cli.destinations.parquet.paths import StreamPaths

        manifest = Path(StreamPaths.of(str(self.root), self.adapter.namespace, self.adapter.name).manifest)
        try:
            return json.loads(manifest.read_text())["state"]
        except (OSError, ValueError):
            return None
