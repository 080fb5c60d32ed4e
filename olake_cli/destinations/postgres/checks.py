"""``olake check`` for the PostgreSQL destination: every privilege writing needs, each missing one as the
exact statement that grants it.

What a run does in the target, and the privilege each needs: schema ``_olake`` for its bookkeeping
(CREATE on the database while it is missing; then USAGE and CREATE on it, and DML on its tables); the
target schema (CREATE on the database while it is missing; then USAGE and CREATE on it); temporary tables
for changes (TEMPORARY on the database); and the server functions in :data:`FUNCTIONS` (PostgreSQL
grants the replication origin ones to superusers only). ``tests/test_pg_destination_privileges.py``
greps this package for every ``pg_*()`` call, so a function added to the writes without its privilege
here fails the suite. Existing target tables need their owner to be the user (``ALTER`` for new
columns), which ``check`` cannot judge without the catalog; a run says so when it opens them.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from olake_cli.core.errors import ConfigError
from olake_cli.destinations.postgres.config import TargetSettings

# Every server function the destination calls: (the signature checked, when it is needed): "always",
# "origin" (unless "origin" is null), "conflicts" (an origin, and track_commit_timestamp on).
FUNCTIONS = {
    "pg_advisory_xact_lock": ("pg_advisory_xact_lock(integer, integer)", "always"),
    "pg_advisory_lock": ("pg_advisory_lock(integer, integer)", "origin"),
    "pg_advisory_unlock": ("pg_advisory_unlock(integer, integer)", "origin"),
    "pg_replication_origin_oid": ("pg_replication_origin_oid(text)", "origin"),
    "pg_replication_origin_create": ("pg_replication_origin_create(text)", "origin"),
    "pg_replication_origin_session_setup": ("pg_replication_origin_session_setup(text)", "origin"),
    "pg_replication_origin_session_reset": ("pg_replication_origin_session_reset()", "origin"),
    "pg_replication_origin_xact_setup": ("pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone)",
                                         "origin"),
    "pg_xact_commit_timestamp_origin": ("pg_xact_commit_timestamp_origin(xid)", "conflicts"),
    "pg_xact_commit_timestamp": ("pg_xact_commit_timestamp(xid)", "conflicts"),
    "pg_current_xact_id": ("pg_current_xact_id()", "conflicts"),
}
CATALOGS = {"pg_catalog.pg_replication_origin": "conflicts"}  # read by the apply's conflict rule
_OLAKE_TABLES_LACKING_DML = """
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = '_olake'::regnamespace AND c.relkind IN ('r', 'p') AND NOT pg_has_role(c.relowner, 'USAGE')
  AND NOT (has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT')
           AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE'))
ORDER BY 1"""


@dataclass(frozen=True)
class Grant:
    """A privilege the user lacks: what it is for, and the statement that grants it."""

    what: str
    statement: str


def check_target(conn, settings: TargetSettings) -> str:
    """A success text, or a ConfigError listing each missing privilege as the statement that grants it."""
    user, tracked = conn.execute("SELECT current_user, current_setting('track_commit_timestamp') = 'on'").fetchone()
    needs = {"always"} | ({"origin"} | ({"conflicts"} if tracked else set()) if settings.origin is not None else set())
    missing = missing_grants(conn, settings, user, needs)
    conn.rollback()
    if missing:
        lines = "".join(f"\n  {g.statement}" for g in missing)
        raise ConfigError(f"postgres destination: user '{user}' lacks {len(missing)} privilege(s) that writing into "
                          f"{settings.describe()} needs ({'; '.join(g.what for g in missing)}); run as a superuser:"
                          f"{lines}")
    origin = ("without a replication origin" if settings.origin is None else
              f"writes under replication origin '{settings.origin}'")
    conflicts = ("track_commit_timestamp is on: conflicts are decided by the later commit"
                 if tracked and settings.origin is not None else
                 "track_commit_timestamp is off: fine for a one-way replica; two-way replication needs "
                 "ALTER SYSTEM SET track_commit_timestamp = on; and a restart" if not tracked else
                 "no origin: conflicts are not detected")
    schema = f"schema '{settings.schema}'" if settings.schema else "each stream's namespace as schema"
    return (f"connected to {settings.describe()}; tables go to {schema}; {origin}; {conflicts}; every privilege "
            "writing needs is granted")


def missing_grants(conn, settings: TargetSettings, user: str, needs: set[str]) -> list[Grant]:
    """The privileges ``user`` lacks for what ``needs`` names (see :data:`FUNCTIONS`), in grant order."""
    role = sql.Identifier(user).as_string(conn)
    database = sql.Identifier(settings.database).as_string(conn)
    schemas = ["_olake"] + ([settings.schema] if settings.schema else [])
    missing_schemas = [s for s in schemas if _schema_oid(conn, s) is None]
    found = []
    if missing_schemas and not _has(conn, "has_database_privilege(current_database(), 'CREATE')"):
        found.append(Grant(f"CREATE on database '{settings.database}' (to create schema "
                           f"{', '.join(missing_schemas)})", f"GRANT CREATE ON DATABASE {database} TO {role};"))
    if not _has(conn, "has_database_privilege(current_database(), 'TEMPORARY')"):
        found.append(Grant("TEMPORARY on the database (changes are applied through temporary tables)",
                           f"GRANT TEMPORARY ON DATABASE {database} TO {role};"))
    for schema in schemas:
        if schema not in missing_schemas:
            found += _schema_grants(conn, schema, role)
    for name, (signature, when) in FUNCTIONS.items():
        if when in needs and not _has(conn, "has_function_privilege(%s, 'EXECUTE')", signature):
            found.append(Grant(f"EXECUTE on {name}", f"GRANT EXECUTE ON FUNCTION {signature} TO {role};"))
    for catalog, when in CATALOGS.items():
        if when in needs and not _has(conn, "has_table_privilege(%s, 'SELECT')", catalog):
            found.append(Grant(f"SELECT on {catalog}", f"GRANT SELECT ON {catalog} TO {role};"))
    return found


def _schema_grants(conn, schema: str, role: str) -> list[Grant]:
    """USAGE and CREATE on an existing schema; for ``_olake`` also DML on each of its tables."""
    name = sql.Identifier(schema).as_string(conn)
    lacking = [p for p in ("USAGE", "CREATE") if not _has(conn, "has_schema_privilege(%s, %s)", schema, p)]
    found = [Grant(f"{' and '.join(lacking)} on schema {schema}",
                   f"GRANT {', '.join(lacking)} ON SCHEMA {name} TO {role};")] if lacking else []
    if schema == "_olake":
        tables = conn.execute(_OLAKE_TABLES_LACKING_DML).fetchall()
        if tables:
            found.append(Grant(f"SELECT, INSERT, UPDATE, DELETE on {', '.join('_olake.' + t[0] for t in tables)}",
                               f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {name} TO {role};"))
    return found


def _schema_oid(conn, schema: str) -> int | None:
    return conn.execute("SELECT to_regnamespace(%s)::oid", (sql.Identifier(schema).as_string(conn),)).fetchone()[0]


def _has(conn, expression: str, *params: object) -> bool:
    return bool(conn.execute(f"SELECT {expression}", params).fetchone()[0])
