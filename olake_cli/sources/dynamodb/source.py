"""The DynamoDB source: check, discover, and the read session and change capture of a run.

Per table it follows three states: DISCOVERY (the tables an allow-list names, or those carrying the
ingestion and environment tags with streams enabled; re-checked on every run), INIT_SYNC (a parallel
scan, one chunk per segment, resumable from the last evaluated key) and SYNC (DynamoDB Streams). In the
state file INIT_SYNC is a ``full-load`` with chunks and SYNC is ``cdc``.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from olake_cli.core.errors import ConfigError, OlakeError
from olake_cli.sources.dynamodb.connection import DynamoSettings, aws_error
from olake_cli.sources.dynamodb.discover import discover_catalog
from olake_cli.sources.dynamodb.session import DynamoReadSession
from olake_cli.sources.dynamodb.tables import TableInfo, configured_tables, describe_table


class DynamoSource:
    """The ``dynamodb`` source connector (see ``core.contracts.Source``)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.settings = DynamoSettings.from_config(config)

    def check(self) -> str:
        """Credentials and endpoint, each table readable, each stream enabled with new images; every
        problem found is named, one line each under a heading (see ``core.contracts.Source.check``)."""
        client = self.settings.client()
        tables, problems = self._tables(client)
        for info in tables:
            problem = self._read_problem(client, info) or info.stream_problem() \
                or self._stream_read_problem(info)
            if problem is not None:
                problems.append(problem)
        if problems:
            raise ConfigError(f"dynamodb: {len(problems)} problem(s) in {self.settings.where()}:\n"
                              + "\n".join(f"  {problem}" for problem in problems))
        names = ", ".join(info.name for info in tables)
        return (f"connected to {self.settings.where()}; {len(tables)} table(s) readable with streams of new "
                f"images: {names}")

    def _tables(self, client) -> tuple[list[TableInfo], list[str]]:
        """The configured tables and, for an allow-list, a problem line per table that does not exist."""
        if self.settings.tables is None:
            return configured_tables(client, self.settings), []
        tables, problems = [], []
        for name in self.settings.tables:
            try:
                tables.append(describe_table(client, self.settings, name))
            except ConfigError as exc:
                if type(exc) is not ConfigError:  # credentials, endpoint: nothing else can work
                    raise
                problems.append(exc.message.removeprefix("dynamodb: "))
        return tables, problems

    def _read_problem(self, client, info: TableInfo) -> str | None:
        """Why the table cannot be scanned (one line), or None."""
        try:
            client.scan(TableName=info.name, Limit=1)
        except Exception as exc:
            return str(aws_error(self.settings, exc, f"scanning table '{info.name}'")).removeprefix("dynamodb: ")
        return None

    def _stream_read_problem(self, info: TableInfo) -> str | None:
        """Why the table's stream cannot be described (one line), or None."""
        try:
            self.settings.client("dynamodbstreams").describe_stream(StreamArn=info.stream_arn, Limit=1)
        except Exception as exc:
            return str(aws_error(self.settings, exc, f"reading the stream of table '{info.name}'")
                       ).removeprefix("dynamodb: ")
        return None

    def discover(self) -> dict[str, Any]:
        """The catalog of every table the config names."""
        try:
            return discover_catalog(self.settings)
        except OlakeError:
            raise
        except Exception as exc:
            raise aws_error(self.settings, exc, "discovering tables") from None

    def open_session(self, streams: list[Any], log: Callable[[str], None]) -> DynamoReadSession:
        """The run's tables checked against the account."""
        return DynamoReadSession(self.settings, streams, log)

    def change_capture(self, streams: list[Any], log: Callable[[str], None]):
        """DynamoDB Streams for the run's ``cdc`` streams."""
        from olake_cli.sources.dynamodb.capture import DynamoChangeCapture

        return DynamoChangeCapture(self.settings, streams, log)
