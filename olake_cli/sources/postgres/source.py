"""The PostgreSQL source: check, discover, and the read session and change capture of a run."""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from olake_cli.core.errors import ConfigError
from olake_cli.sources.postgres import discover as disco
from olake_cli.sources.postgres import new_streams
from olake_cli.sources.postgres.connection import PostgresSettings, connect
from olake_cli.sources.postgres.session import PostgresReadSession


class PostgresSource:
    """The ``postgres`` source connector (see ``core.contracts.Source``)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.settings = PostgresSettings.from_config(config)

    def check(self) -> str:
        """Connect and verify SELECT privilege on every table of the configured schemas."""
        with connect(self.settings) as conn:
            disco.require_schemas(conn, self.settings.schemas)
            denied = new_streams.denied_tables(conn, list(self.settings.schemas))
            if denied:
                raise ConfigError(f"postgres: {new_streams.select_problem(conn, self.settings.username, denied)}")
            tables = [(t[0], t[1]) for t in disco.list_tables(conn, self.settings.schemas, disco.TABLE_KINDS)]
            cdc = self._check_change_capture(conn, tables) + self._check_two_way(conn)
        return (f"connected to {self.settings.describe()}; {len(tables)} table(s) readable in "
                f"{', '.join(self.settings.schemas)}\n{cdc}")

    def _check_change_capture(self, conn, tables: list[tuple[str, str]]) -> str:
        """When a slot or publication is configured: every CDC problem with the SQL that fixes it.

        Only a problem that breaks the source application now fails the check; the rest say that
        ``cdc`` is not ready while ``full_refresh`` and ``incremental`` are.
        """
        from olake_cli.sources.postgres import cdc_setup

        if not (self.settings.replication_slot or self.settings.publication):
            return "cdc: not configured (set replication_slot and publication)"
        problems = cdc_setup.cdc_problems(conn, self.settings, tables)
        if self.settings.create_slot_and_publication:  # read creates these itself
            problems = [p for p in problems if not _creatable(p.what)]
        breaking = [p for p in problems if p.breaks_source]
        if breaking:
            raise ConfigError(f"postgres: change capture setup breaks the source, {len(breaking)} problem(s):\n"
                              f"{_problem_lines(breaking)}")
        notes = "".join(f"\n{n}" if n.startswith("warning: ") else f"\nnote: {n}"
                        for n in cdc_setup.cdc_notes(conn, self.settings, tables))
        if problems:
            return (f"full_refresh and incremental ready; cdc NOT ready, {len(problems)} problem(s):\n"
                    f"{_problem_lines(problems)}{notes}")
        return "change capture ready" + notes

    def _check_two_way(self, conn) -> str:
        """With ``skip_origins`` this database also receives the other direction's changes, whose
        conflicts are decided by commit time: track_commit_timestamp must be on."""
        if not self.settings.two_way:
            return ""
        if conn.execute("SELECT current_setting('track_commit_timestamp')").fetchone()[0] != "on":
            raise ConfigError("postgres: 'skip_origins' is set (two-way replication), but track_commit_timestamp is "
                              "off, so conflicts with the other direction cannot be decided by commit time; run "
                              "ALTER SYSTEM SET track_commit_timestamp = on; and restart the server")
        skipped = "every origin" if self.settings.skip_origins == "*" else \
            ", ".join(sorted(self.settings.skip_origins))
        return f"; two-way: transactions applied under {skipped} are not captured"

    def discover(self) -> dict[str, Any]:
        """The catalog of every table in the configured schemas."""
        with connect(self.settings) as conn:
            return disco.discover_catalog(conn, self.settings.schemas, self.settings.include, self.settings.exclude)

    def unreadable(self, streams: list[Any]) -> dict[tuple, str]:
        """Why each of the tables discovery found while following could not be read now, with the fix
        (``new_streams``)."""
        with connect(self.settings) as conn:
            return new_streams.unreadable(conn, self.settings, streams)

    def drop_slot(self, claim_only: bool = False) -> list[str]:
        """Drop the configured replication slot and publication, and the slot's claim (see slot_drop)."""
        from olake_cli.sources.postgres.slot_drop import drop_slot

        return drop_slot(self.settings, claim_only)

    def open_session(self, streams: list[Any], log: Callable[[str], None]) -> PostgresReadSession:
        """The run's tables resolved against the database, and one exported snapshot for every chunk."""
        return PostgresReadSession(self.settings, streams, log)

    def change_capture(self, streams: list[Any], log: Callable[[str], None]):
        """Change capture from the configured replication slot for the run's ``cdc`` streams."""
        from olake_cli.sources.postgres.capture import PostgresChangeCapture

        return PostgresChangeCapture(self.settings, streams, log)


def _problem_lines(problems: list) -> str:
    """One indented line per problem, each with its fix SQL (see Source.check)."""
    return "\n".join("  " + p.what + (f" (fix: {' '.join(p.fix_sql.split())})" if p.fix_sql else "")
                     for p in problems)


def _creatable(problem: str) -> bool:
    """Whether ``read`` with create_slot_and_publication fixes this problem by itself."""
    return problem.endswith(("does not exist in this database",)) or (
        problem.startswith("replication slot") and "does not exist" in problem) or (
        problem.startswith("publication") and ("does not cover" in problem or "does not publish" in problem))

