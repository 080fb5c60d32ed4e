"""What the destination conformance suite (tests/test_destination_conformance.py) needs: one stream's
protocol input as ``olake read`` sends it, ``olake write`` runs of it into any destination, and that
destination's current contents read back the way its users read them.

The stream ``public.docs`` has a key ``id``, a text ``v``, a number ``n`` and a large text ``body``;
its rows are kept as ``{id: (v, n, body)}``. Full-load rows rank at ``LOAD_KEY`` (their load's
position); changes carry operation ids above it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psycopg
from psycopg import sql

from olake_cli.core.opid import OpId
from tests.support.cli import run_olake, write_json
from tests.support.current_view import current_view, iceberg_rows
from tests.support.protocol_lines import write

NAMESPACE, NAME = "public", "docs"
LOAD_KEY = OpId(16, 0).to_key()
Rows = dict[int, tuple]


def body(tag: object) -> str:
    """A large text value (more than a PostgreSQL page, as TOASTed values are)."""
    return f"body-{tag}-" * 700


def columns(n_type: str = "int32") -> dict:
    """The stream's json_schema properties (``n`` of olake type ``n_type``)."""
    def prop(json_type: str, olake_type: str) -> dict:
        return {"type": [json_type, "null"], "x-olake-type": olake_type}

    return {"id": {"type": ["integer"], "x-olake-type": "int32"}, "v": prop("string", "string"),
            "n": prop("integer", n_type), "body": prop("string", "string")}


def catalog(n_type: str = "int32") -> dict:
    """The CATALOG message ``read`` begins with (a ``cdc`` stream keyed by ``id``)."""
    return {"type": "CATALOG", "catalog": {"streams": [{
        "name": NAME, "namespace": NAMESPACE, "sync_mode": "cdc", "supported_sync_modes": ["full_refresh", "cdc"],
        "source_defined_primary_key": [["id"]],
        "json_schema": {"type": "object", "properties": columns(n_type)}}]}}


def state(load_id: str | None, chunks: list[str] | None, cursor: str = "0/10", **extra: object) -> dict:
    """A STATE of the stream: a full load ``load_id`` with ``chunks`` statuses, or (``chunks`` None)
    change capture from ``cursor`` after that load."""
    inner: dict = {"cursor_field": cursor, "sync_mode": "cdc", **extra}
    if load_id is not None:
        inner.update(load_id=load_id, load_op_key=LOAD_KEY)
    if chunks is not None:
        inner["chunks"] = [{"status": s, "min": str(i), "max": str(i + 1)} for i, s in enumerate(chunks)]
    entry = {"sync_type": "full-load" if chunks is not None else "cdc", "stream_name": NAME,
             "stream_namespace": NAMESPACE, "stream_state": inner}
    return {"type": "STATE", "state": {"level": "stream", "version": "v1", "streams": [entry]}}


def record(data: dict) -> dict:
    """A RECORD of the stream."""
    return {"type": "RECORD", "record": {"stream": NAME, "namespace": NAMESPACE, "emitted_at": 0, "data": data}}


def load_rows(rows: Rows) -> list[dict]:
    """RECORDs of full-load rows."""
    return [record({"id": i, "v": v, "n": n, "body": b}) for i, (v, n, b) in rows.items()]


def change(op: str, commit: int, seq: int, **data: object) -> dict:
    """A RECORD of a change (``op`` c, u, d or t) with operation id ``[commit, seq]``."""
    return record({**data, "_olake_op": op, "_olake_op_id": [commit, seq],
                   "_olake_commit_ts": 1_700_000_000_000_000 + commit * 1000 + seq})


def full_load(load_id: str, chunks: list[Rows], done: int = 0, upto: int | None = None) -> list[dict]:
    """What ``read`` sends for load ``load_id`` whose first ``done`` chunks are done, up to chunk ``upto``
    (the STATE after the last chunk moves the stream on to change capture)."""
    statuses = ["succeed"] * done + ["pending"] * (len(chunks) - done)
    lines = [state(load_id, list(statuses))]
    for index in range(done, len(chunks) if upto is None else upto):
        lines += load_rows(chunks[index])
        statuses[index] = "succeed"
        lines.append(state(load_id, None if "pending" not in statuses else list(statuses)))
    return lines


class Destination:
    """One destination under test: its config, ``olake write`` into it, its contents and its state."""

    def __init__(self, kind: str, tmp_path: Path, pg_target=None, target_db: str | None = None,
                 kafka: tuple | None = None) -> None:
        self.kind, self.tmp_path = kind, tmp_path
        self.root = tmp_path / "out"
        if kind == "postgres":
            config = pg_target.destination_config(target_db)
            self.dsn = pg_target.dsn(target_db)
        elif kind == "kafka":  # (broker, topic prefix)
            self.broker, self.prefix = kafka
            config = self.broker.config(topic_prefix=self.prefix)
        else:
            config = {"type": kind, "path": str(self.root)}
        self.config = write_json(tmp_path / "dst.json", config)
        self.catalog_file = write_json(tmp_path / "catalog.json", catalog()["catalog"])
        self.state_file = tmp_path / "state.json"

    def write(self, lines: list[dict], state: bool = True, crash_at: str | None = None,
              crash_after: int = 0) -> subprocess.CompletedProcess:
        """``olake write`` of ``lines`` (with ``--state`` unless not ``state``), asserted to succeed
        unless killed at ``crash_at``."""
        result = write(self.config, lines, self.state_file if state else None, crash_at, crash_after)
        if crash_at is None:
            assert result.returncode == 0, result.stderr.decode()[-3000:]
        return result

    def rows(self) -> Rows:
        """The stream's current contents, read as its users read them: ``{id: (v, n, body)}``."""
        names = ["id", "v", "n", "body"]
        if self.kind == "parquet":
            table = current_view(str(self.root / NAMESPACE / NAME), names, ["id"])
        elif self.kind == "iceberg":
            table = iceberg_rows(self.root, NAMESPACE, NAME).select(names)
        elif self.kind == "kafka":  # the messages the state topic covers, reduced by the consumer rules
            from tests.support.kafka_broker import covered_offsets, read_topic, replicate

            covered = covered_offsets(self.broker.bootstrap, self.prefix, f"{NAMESPACE}.{NAME}")
            replica = replicate(read_topic(self.broker.bootstrap, f"{self.prefix}{NAMESPACE}.{NAME}"), covered=covered)
            return {r["id"]: (r["v"], r["n"], r["body"]) for r in replica.rows.values()}
        else:
            with psycopg.connect(self.dsn) as conn:
                found = conn.execute(sql.SQL("SELECT id, v, n, body FROM {}").format(
                    sql.Identifier(NAMESPACE, NAME))).fetchall()
            return {r[0]: tuple(r[1:]) for r in found}
        return {r["id"]: (r["v"], r["n"], r["body"]) for r in table.to_pylist()}

    def recovered(self) -> dict:
        """The stream's entry in the state ``olake state recover`` reads back from the destination."""
        result = run_olake("state", "recover", "--config", self.config, "--catalog", self.catalog_file)
        assert result.returncode == 0, result.stderr.decode()
        [stream] = json.loads(result.stdout)["state"]["streams"]
        return stream

    def saved(self) -> dict:
        """The stream's entry in the ``--state`` file."""
        [stream] = json.loads(self.state_file.read_text())["streams"]
        return stream
