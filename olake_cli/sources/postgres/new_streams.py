"""Whether a run can read the tables discovery found while it follows (``core.contracts.NewStreamChecks``).

A table is read only with the role's SELECT on it and USAGE on its schema; a ``cdc`` stream also needs a
usable replica identity and the publication to cover the table (and to filter none of its rows or columns),
unless ``create_slot_and_publication`` lets olake add it, as owner of the table. Each reason is the text
``check`` gives for the same problem, with the SQL that fixes it.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from olake_cli.sources.postgres.cdc_setup import one_line
from olake_cli.sources.postgres.connection import PostgresSettings
from olake_cli.sources.postgres.publication import (filter_problems, inspect_publication, keyless_problem,
                                                    uncovered_problem)
from olake_cli.sources.postgres.replica_identity import ResolvedTable, keyless_tables, resolve_tables

_DENIED_SQL = """
SELECT n.nspname, c.relname, has_schema_privilege(n.oid, 'USAGE')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY(%s) AND c.relkind IN ('r','p','v','m') AND NOT c.relispartition
  AND NOT (has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT'))
ORDER BY 1, 2
"""
_OWNED_SQL = "SELECT oid FROM pg_class WHERE oid = ANY(%s::oid[]) AND pg_has_role(relowner, 'USAGE')"


def denied_tables(conn: psycopg.Connection, schemas: list[str]) -> list[tuple[str, str, bool]]:
    """(schema, table, USAGE on the schema) of each table of ``schemas`` the role may not read, sorted."""
    return [tuple(row) for row in conn.execute(_DENIED_SQL, (list(schemas),)).fetchall()]


def select_problem(conn: psycopg.Connection, username: str, denied: list[tuple[str, str, bool]]) -> str:
    """Which of ``denied`` (``denied_tables``; the first five) the role may not read, and the GRANTs that fix it."""
    names = ", ".join(f"{s}.{t}" for s, t, _ in denied[:5]) + (" ..." if len(denied) > 5 else "")
    role = sql.Identifier(username).as_string(conn)
    usage = sorted({schema for schema, _, may_use in denied[:5] if not may_use})
    grants = [f"GRANT USAGE ON SCHEMA {sql.Identifier(schema).as_string(conn)} TO {role};" for schema in usage]
    grants += [f"GRANT SELECT ON {sql.Identifier(s, t).as_string(conn)} TO {role};" for s, t, _ in denied[:5]]
    return f"user '{username}' lacks SELECT on {names}; run as an admin: {' '.join(grants)}"


def unreadable(conn: psycopg.Connection, settings: PostgresSettings, streams: list[Any]) -> dict[tuple, str]:
    """Of ``streams`` (catalog streams with the sync mode they would join with): why each the run could not
    read now cannot, with the fix; readable ones are not named."""
    tables = {(s.namespace, s.name): s.key for s in streams}
    denied = [row for row in denied_tables(conn, sorted({s.namespace for s in streams})) if row[:2] in tables]
    reasons = {tables[row[:2]]: select_problem(conn, settings.username, [row]) for row in denied}
    cdc = [(s.namespace, s.name) for s in streams if s.sync_mode == "cdc" and s.key not in reasons]
    if cdc and settings.publication:
        resolved, _ = resolve_tables(conn, cdc)
        reasons.update({tables[(t.schema, t.name)]: why for t, why in _cdc_problems(conn, settings, resolved)})
    return reasons


def _cdc_problems(conn: psycopg.Connection, settings: PostgresSettings,
                  tables: list[ResolvedTable]) -> list[tuple[ResolvedTable, str]]:
    """Each of ``tables`` change capture could not follow now, with why and the fix."""
    view = inspect_publication(conn, settings.publication, tables)
    if view.row is None:  # the run's start creates it, or fails for every stream
        return []
    keyless = keyless_tables(conn, tables)
    owned = {row[0] for row in conn.execute(_OWNED_SQL, ([t.oid for t in tables],)).fetchall()}
    found = []
    for table in tables:
        if table.oid in keyless:
            found.append((table, one_line([keyless_problem(conn, view, keyless[table.oid])])))
            continue
        added_by_olake = settings.create_slot_and_publication and table.oid in owned
        problems = [] if added_by_olake else [p for p in [uncovered_problem(conn, view, [table])] if p]
        problems += filter_problems(conn, view, [table])
        if problems:
            found.append((table, one_line(problems)))
    return found
