"""Nodes of a replication mesh between databases of the real clusters, and the directions between them.

Each node holds the same seed rows of ``t (id int PRIMARY KEY, v text, n int)``; each direction is a
``cdc`` stream that starts without a load (``skip_initial_load``), every source with ``skip_origins:
"*"`` and every destination writing under the origin ``from_<source>`` (its own changes count as
``from_<node>``). Directions run the real commands (``sync``, or ``read | write``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import run_olake, write_json
from tests.support.pg_compare import table_texts
from tests.support.pgcluster import PgCluster

SEED = "CREATE TABLE t (id int PRIMARY KEY, v text, n int); INSERT INTO t SELECT g, 'seed', 0 FROM generate_series(1, 20) g"


@dataclass
class Node:
    """One database of the mesh."""

    name: str
    cluster: PgCluster
    db: str

    @property
    def dsn(self) -> str:
        return self.cluster.dsn(self.db)

    def execute(self, *statements: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def rows(self) -> dict[str, tuple]:
        return {r[0]: tuple(r[1:]) for r in table_texts(self.dsn, "public", "t", ["id", "v", "n"])}

    def conflicts(self) -> list[dict]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute("SELECT key, operation, applying_origin, incoming_row, incoming_origin, target_row, "
                               "target_origin, winner, incoming_commit_ts < target_commit_ts AS older, "
                               "source_position IS NOT NULL AS positioned FROM _olake.conflicts ORDER BY id")
            names = [c.name for c in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]


class Mesh:
    """Directions between nodes: configs, catalogs and state files in ``tmp``."""

    def __init__(self, tmp: Path, nodes: list[Node]) -> None:
        self.tmp, self.nodes = tmp, {n.name: n for n in nodes}
        for node in nodes:
            node.execute(SEED)

    def source(self, src: str, dst: str) -> str:
        node = self.nodes[src]
        return write_json(self.tmp / f"{src}_{dst}_src.json", node.cluster.source_config(
            node.db, replication_slot=f"{src}_to_{dst}_{node.db}", publication="pub", create_slot_and_publication=True,
            skip_origins="*"))

    def destination(self, src: str, dst: str) -> str:
        node = self.nodes[dst]
        return write_json(self.tmp / f"{src}_{dst}_dst.json", node.cluster.destination_config(
            node.db, origin=f"from_{src}", local_origin=f"from_{dst}"))

    def paths(self, src: str, dst: str) -> tuple[str, Path, str, Path]:
        """(source config, catalog, destination config, state file) of a direction, made on first use."""
        catalog = self.tmp / f"{src}_{dst}_catalog.json"
        source = self.source(src, dst)
        if not catalog.exists():
            discover_catalog(source, catalog, {"t": "cdc"})
            edited = json.loads(catalog.read_text())
            edited["streams"][0]["skip_initial_load"] = True
            catalog.write_text(json.dumps(edited))
        return source, catalog, self.destination(src, dst), self.tmp / f"{src}_{dst}_state.json"

    def sync(self, src: str, dst: str) -> str:
        """One ``sync`` run of the direction; its stderr."""
        source, catalog, destination, state = self.paths(src, dst)
        result = run_olake("sync", "--source", source, "--destination", destination, "--catalog", str(catalog),
                           "--state", str(state))
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        return result.stderr.decode()

    def pipe(self, src: str, dst: str) -> str:
        """One ``read | write`` run of the direction; write's stderr."""
        source, catalog, destination, state = self.paths(src, dst)
        return sync_once(source, catalog, destination, state).write_stderr.decode()

    def both_ways(self, x: str, y: str, rounds: int = 2) -> list[str]:
        """``rounds`` rounds of x → y then y → x: ``sync`` then ``read | write`` in even rounds, the other
        way round in odd ones (each path writes in each direction); the runs' stderr."""
        out = []
        for number in range(rounds):
            first, second = (self.sync, self.pipe) if number % 2 == 0 else (self.pipe, self.sync)
            out += [first(x, y), second(y, x)]
        return out

    def drop_slots(self) -> None:
        for node in self.nodes.values():
            with psycopg.connect(node.dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                             "WHERE database = current_database()")


def meshes(tmp: Path) -> Iterator:
    """For a fixture: yields ``make(nodes) -> Mesh``; every slot of the nodes' databases is dropped after."""
    made: list[Mesh] = []
    yield lambda nodes: made.append(Mesh(tmp, nodes)) or made[-1]
    for mesh in made:
        mesh.drop_slots()
