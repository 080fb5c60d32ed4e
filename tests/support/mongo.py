"""A MongoDB wire-protocol server for tests: SecantusDB in this process, or a real mongod.

SecantusDB (``from secantus import SecantusDBServer``) runs in-process over WiredTiger as a one-node
replica set with change streams; it starts in about 0.4 s. When ``OLAKE_TEST_MONGO_URI`` is set, that
server is used instead and nothing is started. Also: a writer thread changing a collection, and the
comparison of a collection with its Parquet copy.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pymongo import MongoClient

from tests.support.verify import latest_versions, read_parquet

MONGO_URI_ENV = "OLAKE_TEST_MONGO_URI"


@dataclass
class MongoServer:
    """A running server: ``uri`` to connect; ``real_mongod`` when it comes from OLAKE_TEST_MONGO_URI."""

    uri: str
    real_mongod: bool
    _stop: Callable[[], None] | None = field(default=None, repr=False)

    def stop(self) -> None:
        """Stop the server if this process started it (a real mongod is left alone)."""
        if self._stop is not None:
            self._stop()
            self._stop = None


def start_mongo_server() -> MongoServer:
    """The server of OLAKE_TEST_MONGO_URI, or a fresh SecantusDB server in a temporary directory."""
    uri = os.environ.get(MONGO_URI_ENV)
    if uri:
        return MongoServer(uri=uri, real_mongod=True)
    from secantus import SecantusDBServer

    directory = tempfile.mkdtemp(prefix="olake-secantus-")
    server = SecantusDBServer(storage_path=directory)
    server.start()

    def stop() -> None:
        try:
            server.stop()
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    return MongoServer(uri=server.uri, real_mongod=False, _stop=stop)


def connect(uri: str) -> MongoClient:
    """A client reading BSON exactly: dates as DatetimeMS, Int64 kept, subtype-4 binaries as UUIDs."""
    return MongoClient(uri, uuidRepresentation="standard", datetime_conversion="DATETIME_MS")


def seed_documents(uri: str, database: str, coll: str, count: int) -> None:
    """Documents ``{_id: i, v: i, note: "seed"}`` for i in 1..count."""
    with connect(uri) as client:
        client[database][coll].insert_many([{"_id": i, "v": i, "note": "seed"} for i in range(1, count + 1)])


def lake_rows(folder: Path) -> dict:
    """``{_id: (v, note)}`` of the current documents a Parquet stream folder holds (its change rows)."""
    current = latest_versions(read_parquet(str(folder)), ["_id"]).to_pylist()
    return {r["_id"]: (r["v"], r["note"]) for r in current}


def collection_rows(uri: str, database: str, coll: str) -> dict:
    """``{_id: (v, note)}`` of the collection's documents now."""
    with connect(uri) as client:
        return {d["_id"]: (d.get("v"), d.get("note")) for d in client[database][coll].find()}


def assert_lake_equals_collection(uri: str, database: str, coll: str, folder: Path) -> None:
    """The Parquet copy's current documents equal the collection's, value by value."""
    assert lake_rows(folder) == collection_rows(uri, database, coll)


class MongoWriter(threading.Thread):
    """Inserts, updates, replaces and deletes documents of ``coll`` until stopped (``pause`` seconds
    between operations)."""

    def __init__(self, uri: str, database: str, coll: str, max_id: int, seed: int = 5, pause: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.uri, self.database, self.coll, self.max_id, self.pause = uri, database, coll, max_id, pause
        self.rng, self.next_id, self.ops = random.Random(seed), max_id + 1, 0
        self.stop_event, self.error = threading.Event(), None

    def run(self) -> None:
        try:
            with connect(self.uri) as client:
                coll = client[self.database][self.coll]
                while not self.stop_event.is_set():
                    self._one(coll)
                    self.ops += 1
                    if self.pause:
                        time.sleep(self.pause)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def _one(self, coll) -> None:
        action, target = self.rng.random(), self.rng.randint(1, self.max_id)
        if action < 0.3:
            coll.insert_one({"_id": self.next_id, "v": self.next_id, "note": "new"})
            self.next_id += 1
        elif action < 0.6:
            coll.update_one({"_id": target}, {"$inc": {"v": 1}, "$set": {"note": "updated"}})
        elif action < 0.8:
            coll.replace_one({"_id": target}, {"v": -target, "note": "replaced"})
        else:
            coll.delete_one({"_id": target})

    def stop(self) -> None:
        """Stop and re-raise any error the writer hit."""
        self.stop_event.set()
        self.join(timeout=30)
        if self.error:
            raise self.error


__all__ = ["MONGO_URI_ENV", "MongoServer", "MongoWriter", "assert_lake_equals_collection", "collection_rows",
           "connect", "lake_rows", "seed_documents", "start_mongo_server"]
