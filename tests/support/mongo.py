"""A MongoDB wire-protocol server for tests: SecantusDB in this process, or a real mongod.

SecantusDB (``from secantus import SecantusDBServer``) runs in-process over WiredTiger as a one-node
replica set with change streams; it starts in about 0.4 s. When ``OLAKE_TEST_MONGO_URI`` is set, that
server is used instead and nothing is started.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from pymongo import MongoClient

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


__all__ = ["MONGO_URI_ENV", "MongoServer", "connect", "start_mongo_server"]
