"""The MongoDB source: check, discover, and the read session and change capture of a run."""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from olake_cli.core.errors import ConfigError, OlakeError
from olake_cli.sources.mongodb import discover as disco
from olake_cli.sources.mongodb.connection import (
    MongoSettings, connection_error, open_client, read_error, server_hello,
)
from olake_cli.sources.mongodb.session import MongoReadSession


class MongoSource:
    """The ``mongodb`` source connector (see ``core.contracts.Source``)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.settings = MongoSettings.from_config(config)

    def check(self) -> str:
        """Connect and log in, find the database and read every collection; say whether ``cdc`` works."""
        settings = self.settings
        with open_client(settings) as client:
            try:
                hello = server_hello(client)
                names = self._readable_collections(client)
            except OlakeError:
                raise
            except Exception as exc:
                raise connection_error(settings, exc) from None
        if disco.supports_change_streams(hello):
            kind = f"replica set '{hello['setName']}'" if hello.get("setName") else "sharded cluster"
            cdc = f"; change streams available ({kind})"
        else:
            cdc = f"; note: standalone server: {disco.CDC_NEEDS_REPLICA_SET}"
        return (f"connected to {settings.describe()}; {len(names)} collection(s) readable in "
                f"'{settings.database}'{cdc}")

    def _readable_collections(self, client) -> list[str]:
        """The collections discover would list, each read once; ConfigError if there are none."""
        settings = self.settings
        disco.require_database(client, settings)
        db = client[settings.database]
        names = disco.list_collections(db, settings)
        if not names:
            raise ConfigError(f"mongodb: database '{settings.database}' on {settings.where()} has no "
                              "collections to read (views and system collections are skipped)")
        for name in names:
            db[name].find_one({}, projection={"_id": 1})  # Unauthorized surfaces here
        return names

    def discover(self) -> dict[str, Any]:
        """The catalog of every collection of the configured database."""
        with open_client(self.settings) as client:
            try:
                return disco.discover_catalog(client, self.settings)
            except OlakeError:
                raise
            except Exception as exc:
                raise read_error(self.settings, exc, f"discovering database '{self.settings.database}'") from None

    def open_session(self, streams: list[Any], log: Callable[[str], None]) -> MongoReadSession:
        """The run's collections checked against the server, and a client for planning."""
        return MongoReadSession(self.settings, streams, log)

    def change_capture(self, streams: list[Any], log: Callable[[str], None]):
        """Change streams for the run's ``cdc`` streams."""
        from olake_cli.sources.mongodb.capture import MongoChangeCapture

        return MongoChangeCapture(self.settings, streams, log)
