"""``olake check`` for the PostgreSQL destination: what writing needs, each problem with its fix."""

from __future__ import annotations

from psycopg import sql

from olake_cli.core.errors import ConfigError
from olake_cli.destinations.postgres.config import TargetSettings

_ORIGIN_FUNCTIONS = ("pg_replication_origin_create(text)", "pg_replication_origin_session_setup(text)",
                     "pg_replication_origin_session_reset()", "pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone)")


def check_target(conn, settings: TargetSettings) -> str:
    """A success text, or a ConfigError naming what is missing and the SQL that grants it."""
    user = conn.execute("SELECT current_user").fetchone()[0]
    role = sql.Identifier(user).as_string(conn)
    can_create = conn.execute("SELECT has_database_privilege(current_database(), 'CREATE')").fetchone()[0]
    has_bookkeeping = conn.execute("SELECT to_regnamespace('_olake') IS NOT NULL").fetchone()[0]
    if not can_create and not has_bookkeeping:
        database = sql.Identifier(settings.database).as_string(conn)
        raise ConfigError(f"postgres destination: user '{user}' may not create schemas in database "
                          f"'{settings.database}' (olake keeps its state in schema _olake); run as an admin: "
                          f"GRANT CREATE ON DATABASE {database} TO {role};")
    origin = "without a replication origin"
    if settings.origin is not None:
        denied = [f for f in _ORIGIN_FUNCTIONS
                  if not conn.execute("SELECT has_function_privilege(%s, 'EXECUTE')", (f,)).fetchone()[0]]
        if denied:
            grants = " ".join(f"GRANT EXECUTE ON FUNCTION {f} TO {role};" for f in denied)
            raise ConfigError(f"postgres destination: user '{user}' may not use replication origins (origin "
                              f"'{settings.origin}'); run as a superuser: {grants} (or set \"origin\": null)")
        origin = f"writes under replication origin '{settings.origin}'"
    tracked = conn.execute("SELECT current_setting('track_commit_timestamp')").fetchone()[0] == "on"
    conflicts = ("track_commit_timestamp is on: conflicts are decided by the later commit"
                 if tracked and settings.origin is not None else
                 "track_commit_timestamp is off: fine for a one-way replica; two-way replication needs "
                 "ALTER SYSTEM SET track_commit_timestamp = on; and a restart" if not tracked else
                 "no origin: conflicts are not detected")
    schema = f"schema '{settings.schema}'" if settings.schema else "each stream's namespace as schema"
    return f"connected to {settings.describe()}; tables go to {schema}; {origin}; {conflicts}"
