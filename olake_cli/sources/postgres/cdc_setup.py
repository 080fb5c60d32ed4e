"""Change-capture preflight: find every CDC misconfiguration, print the exact SQL that fixes it,
and (when the user allows it) create the replication slot and the publication.

The change feed reads ``pg_logical_slot_peek_binary_changes(slot, ..., 'proto_version', '1',
'publication_names', pub)``, so it needs: ``wal_level = logical``; a user with REPLICATION (or
superuser); a ``pgoutput`` slot in this database whose WAL is still there; a publication that
covers every selected table (each leaf partition, directly or through an ancestor), publishes
insert/update/delete/truncate; and a usable replica identity on every selected table (see
replica_identity: tables without one are never published by olake, so the source keeps working).
Publication details live in ``publication``.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from olake_cli.core.errors import ConfigError, SourceError
from olake_cli.sources.postgres.change_feed import slot_info
from olake_cli.sources.postgres.connection import PostgresSettings
from olake_cli.sources.postgres.publication import (PUBLISH_ACTIONS, CdcProblem, PublicationView, add_tables_sql,
                                                    coverage_problems, create_publication_sql,
                                                    inspect_publication, keyless_fix_sql, keyless_problem,
                                                    publish_everything_sql, skipped_actions, via_root_note)
from olake_cli.sources.postgres.slot_claim import error_line
from olake_cli.sources.postgres.replica_identity import KeylessTable, ResolvedTable, keyless_tables, resolve_tables

DEFAULT_SLOT_NAME = "olake_slot"
DEFAULT_PUBLICATION_NAME = "olake_publication"
_SLOT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


# ---------------------------------------------------------------- entry points

def cdc_problems(conn: psycopg.Connection, settings: PostgresSettings,
                 tables: list[tuple[str, str]]) -> list[CdcProblem]:
    """Every reason change capture of ``tables`` would not work, each with its fix SQL, in check order.

    For ``check``, which sees every table: a keyless table is a problem only when it is already
    published (the source's UPDATE and DELETE on it fail now); otherwise ``cdc_notes`` names it.
    """
    problems = [p for p in (wal_level_problem(current_wal_level(conn)),
                            replication_privilege_problem(conn)) if p is not None]
    problems += config_problems(settings)
    if settings.replication_slot and valid_slot_name(settings.replication_slot):
        problems += slot_problems(conn, settings)
    resolved, missing = resolve_tables(conn, tables)
    problems += [CdcProblem(f"table {s}.{t} does not exist in database '{settings.database}'; "
                            "run discover again and fix the catalog") for s, t in missing]
    view, keyless = _inspect(conn, settings, resolved)
    return problems + _coverage_problems(conn, view, resolved, keyless) + [
        keyless_problem(conn, view, k) for k in keyless.values() if view is not None and view.covers(k.table)]


def publication_problems(conn: psycopg.Connection, settings: PostgresSettings,
                         tables: list[tuple[str, str]]) -> list[CdcProblem]:
    """Why the selected ``cdc`` tables would not receive every change: the publication is missing, leaves a
    table (or a leaf partition) out, filters it or skips an action; or a table has no usable replica
    identity. Tables that do not exist are left to ``cdc_problems``."""
    resolved, _ = resolve_tables(conn, tables)
    view, keyless = _inspect(conn, settings, resolved)
    return _coverage_problems(conn, view, resolved, keyless) + [
        keyless_problem(conn, view, k) for k in keyless.values()]


def _inspect(conn: psycopg.Connection, settings: PostgresSettings, resolved: list[ResolvedTable]
             ) -> tuple[PublicationView | None, dict[int, KeylessTable]]:
    """(the configured publication as seen for ``resolved``, or None without one; the keyless tables)."""
    view = inspect_publication(conn, settings.publication, resolved) if settings.publication else None
    return view, keyless_tables(conn, resolved)


def _coverage_problems(conn: psycopg.Connection, view: PublicationView | None, resolved: list[ResolvedTable],
                       keyless: dict[int, KeylessTable]) -> list[CdcProblem]:
    if view is None:
        return []
    return coverage_problems(conn, view, [t for t in resolved if t.oid not in keyless])


def require_publication_ready(conn: psycopg.Connection, settings: PostgresSettings,
                              tables: list[tuple[str, str]]) -> None:
    """Raise ConfigError (one line naming each table and its fix SQL) unless ``publication_problems`` is empty.

    ``read`` and ``sync`` call it before reading anything, after ``ensure_slot_and_publication``.
    """
    problems = publication_problems(conn, settings, tables)
    if problems:
        raise ConfigError(f"postgres: change capture cannot start, {len(problems)} problem(s): "
                          f"{one_line(problems)}")


def cdc_notes(conn: psycopg.Connection, settings: PostgresSettings,
              tables: list[tuple[str, str]]) -> list[str]:
    """Informational lines (not problems): the WAL the slot retains (a warning past slot_wal_warn_bytes),
    a slot close to losing WAL, which pipeline claimed the slot, tables that cannot use cdc, a publication
    via the partition root. Tables that qualify get no advice (a key-only old row on a delete is all change
    capture needs)."""
    notes = _slot_notes(conn, settings) if settings.replication_slot else []
    resolved, _ = resolve_tables(conn, tables)
    view, keyless = _inspect(conn, settings, resolved)
    unpublished = [k for k in keyless.values() if view is None or not view.covers(k.table)]
    if unpublished:
        notes.append(_keyless_note(conn, view, unpublished))
    via_root = via_root_note(conn, view, resolved) if view is not None else None
    return notes + ([via_root] if via_root else [])


def _slot_notes(conn: psycopg.Connection, settings: PostgresSettings) -> list[str]:
    """What the slot retains, whether it is about to lose WAL, and who claimed it."""
    from olake_cli.sources.postgres.slot_claim import read_claim
    from olake_cli.sources.postgres.slot_wal import retained_wal_bytes, retained_wal_lines

    slot = settings.replication_slot
    info = slot_info(conn, slot)
    if info is None:
        return []
    notes = retained_wal_lines(slot, retained_wal_bytes(conn, slot), settings.slot_wal_warn_bytes)
    if info["wal_status"] == "unreserved":
        notes.append(f"replication slot '{slot}' is about to lose WAL it still needs (wal_status = "
                     "'unreserved'); run the sync soon")
    try:
        claim = read_claim(conn, slot)
    except psycopg.errors.InsufficientPrivilege:
        return notes + [f"replication slot '{slot}': may not read which pipeline claimed it (_olake.slot_claims)"]
    notes.append(f"replication slot '{slot}' is used by: {claim.describe()}" if claim is not None else
                 f"replication slot '{slot}' is not claimed yet: the first run of change capture claims it "
                 "for its pipeline, and refuses it to any other")
    return notes


def _keyless_note(conn: psycopg.Connection, view: PublicationView | None, keyless: list[KeylessTable]) -> str:
    """A heading line, then one indented line per table with the SQL that enables cdc for it."""
    tables = "".join(f"\n  {k.table.label} ({k.reason}) (fix: {' '.join(keyless_fix_sql(conn, view, k).splitlines())})"
                     for k in keyless)
    return (f"{len(keyless)} table(s) cannot use cdc (left out of the publication; full_refresh still works) "
            f"until they get a primary key or REPLICA IDENTITY FULL:{tables}")


def one_line(problems: list[CdcProblem]) -> str:
    """All problems on one line: ``what (fix: sql sql)`` joined by ``; ``."""
    return "; ".join(p.what + (f" (fix: {' '.join(p.fix_sql.splitlines())})" if p.fix_sql else "")
                     for p in problems)


def render_problems(problems: list[CdcProblem], notes: list[str] | tuple[str, ...] = ()) -> str:
    """Human text: each problem on its own line, then ``  fix: <sql>`` (continuation lines aligned)."""
    lines = []
    for problem in problems:
        lines.append(f"- {problem.what}")
        if problem.fix_sql:
            sql_lines = problem.fix_sql.splitlines()
            lines.append(f"  fix: {sql_lines[0]}")
            lines.extend(f"       {line}" for line in sql_lines[1:])
    lines.extend(f"note: {note}" for note in notes)
    return "\n".join(lines)


# ---------------------------------------------------------------- server and role

def current_wal_level(conn: psycopg.Connection) -> str:
    """The server's ``wal_level`` setting."""
    return conn.execute("SELECT current_setting('wal_level')").fetchone()[0]


def wal_level_problem(wal_level: str) -> CdcProblem | None:
    """A problem unless ``wal_level`` is ``logical``."""
    if wal_level == "logical":
        return None
    return CdcProblem(f"wal_level is '{wal_level}' but change capture needs 'logical'; run the fix as a "
                      "superuser, then restart PostgreSQL", "ALTER SYSTEM SET wal_level = logical;")


def replication_privilege_problem(conn: psycopg.Connection) -> CdcProblem | None:
    """A problem when the connected role is neither superuser nor has the REPLICATION attribute."""
    user, is_super, can_replicate = conn.execute(
        "SELECT rolname, rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user").fetchone()
    if is_super or can_replicate:
        return None
    role = sql.Identifier(user).as_string(conn)
    return CdcProblem(f"user '{user}' lacks the REPLICATION attribute (and is not a superuser), so it cannot "
                      f"read replication slots (on Amazon RDS: GRANT rds_replication TO {role};)",
                      f"ALTER ROLE {role} WITH REPLICATION;")


def config_problems(settings: PostgresSettings) -> list[CdcProblem]:
    """Problems with the config fields change capture needs: missing, or a slot name PostgreSQL refuses."""
    problems = []
    if not settings.replication_slot:
        problems.append(CdcProblem("the source config has no 'replication_slot'; add e.g. "
                                   f"\"replication_slot\": \"{DEFAULT_SLOT_NAME}\""))
    elif not valid_slot_name(settings.replication_slot):
        problems.append(CdcProblem(f"replication_slot '{settings.replication_slot}' is not a valid slot name "
                                   "(at most 63 lower-case letters, digits and underscores); rename it"))
    if not settings.publication:
        problems.append(CdcProblem("the source config has no 'publication'; add e.g. "
                                   f"\"publication\": \"{DEFAULT_PUBLICATION_NAME}\""))
    return problems


# ---------------------------------------------------------------- replication slot

def valid_slot_name(name: str) -> bool:
    """Whether PostgreSQL accepts ``name`` as a replication slot name."""
    return 0 < len(name) <= 63 and all(ch in _SLOT_NAME_CHARS for ch in name)


def create_slot_sql(conn: psycopg.Connection, slot: str) -> str:
    """``SELECT pg_create_logical_replication_slot('slot', 'pgoutput');``"""
    return sql.SQL("SELECT pg_create_logical_replication_slot({}, 'pgoutput');").format(
        sql.Literal(slot)).as_string(conn)


def recreate_slot_sql(conn: psycopg.Connection, slot: str) -> str:
    """Drop the slot, then create it again with pgoutput (two statements, one per line)."""
    drop = sql.SQL("SELECT pg_drop_replication_slot({});").format(sql.Literal(slot)).as_string(conn)
    return f"{drop}\n{create_slot_sql(conn, slot)}"


def slot_problems(conn: psycopg.Connection, settings: PostgresSettings) -> list[CdcProblem]:
    """At most one problem about ``settings.replication_slot``: missing, elsewhere, wrong kind, or lost."""
    slot, database = settings.replication_slot, settings.database
    info = slot_info(conn, slot)
    if info is None:
        return [CdcProblem(f"replication slot '{slot}' does not exist; create it in database '{database}'"
                           + _slot_capacity_hint(conn), create_slot_sql(conn, slot))]
    recreate = recreate_slot_sql(conn, slot)
    if info["database"] != database:
        where = f"database '{info['database']}'" if info["database"] else "no database (physical slot)"
        return [CdcProblem(f"replication slot '{slot}' belongs to {where}, not '{database}'; set "
                           "'replication_slot' to another name, or (if nothing else uses it) drop it and "
                           f"create it again in database '{database}'", recreate)]
    if info["slot_type"] != "logical" or info["plugin"] != "pgoutput":
        kind = f"plugin '{info['plugin']}'" if info["plugin"] else f"a {info['slot_type']} slot"
        return [CdcProblem(f"replication slot '{slot}' uses {kind} but olake reads 'pgoutput'; drop it and "
                           "create it again", recreate)]
    if info["wal_status"] == "lost":
        return [CdcProblem(f"replication slot '{slot}' has lost WAL it needed (wal_status = 'lost'), so its "
                           f"position is gone; drop it and create it again; {_after_loss(settings)}", recreate)]
    return []


def require_usable_slot(info: dict | None, slot: str) -> None:
    """A ConfigError unless the slot exists, decodes with pgoutput and still has its WAL."""
    if info is None:
        raise ConfigError(f"postgres: replication slot '{slot}' does not exist; create it: SELECT "
                          f"pg_create_logical_replication_slot('{slot}', 'pgoutput'); or set "
                          f"create_slot_and_publication (if it was dropped, the streams' positions are lost and "
                          f"the next run with the slot loads them anew)")
    if info["plugin"] != "pgoutput":
        raise ConfigError(f"postgres: replication slot '{slot}' uses plugin '{info['plugin']}', not pgoutput")
    if info["wal_status"] == "lost":
        raise ConfigError(f"postgres: replication slot '{slot}' is invalidated; drop and recreate it: "
                          f"SELECT pg_drop_replication_slot('{slot}'); "
                          f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput');")


def _slot_capacity_hint(conn: psycopg.Connection) -> str:
    used, limit = conn.execute("SELECT (SELECT count(*) FROM pg_replication_slots),"
                               " current_setting('max_replication_slots')::int").fetchone()
    if used < limit:
        return ""
    return (f" (all {limit} slots allowed by max_replication_slots are in use: raise it with ALTER SYSTEM "
            "and restart, or drop an unused slot)")


def _after_loss(settings: PostgresSettings) -> str:
    if settings.on_position_lost == "resync":
        return "olake will then re-sync every cdc stream with a new full load (on_position_lost = 'resync')"
    return ("olake stops with an error meanwhile (on_position_lost = 'fail'); set on_position_lost to "
            "'resync' to re-sync the cdc streams with a new full load")


# ---------------------------------------------------------------- creation

def ensure_slot_and_publication(conn: psycopg.Connection, settings: PostgresSettings,
                                tables: list[tuple[str, str]]) -> list[str]:
    """Create the missing publication (or add its missing tables) and the missing slot; never drops.

    Does nothing unless ``settings.create_slot_and_publication``; tables that do not exist are left
    to ``cdc_problems``. Returns one human line per action taken; a missing privilege raises
    ConfigError quoting the SQL an administrator should run.
    """
    if not settings.create_slot_and_publication:
        return []
    missing = [f for f, v in (("replication_slot", settings.replication_slot),
                              ("publication", settings.publication)) if not v]
    if missing:
        raise ConfigError(f"postgres: create_slot_and_publication is on but the config has no "
                          f"{' or '.join(repr(f) for f in missing)}; add it")
    if not valid_slot_name(settings.replication_slot):
        raise ConfigError(config_problems(settings)[0].what)
    resolved, _ = resolve_tables(conn, tables)
    done = _ensure_publication(conn, settings, resolved)
    if slot_info(conn, settings.replication_slot) is None:
        statement = create_slot_sql(conn, settings.replication_slot)
        if _run_ddl(conn, settings, statement):
            done.append(f"created replication slot '{settings.replication_slot}' (pgoutput)")
    return done


def _ensure_publication(conn: psycopg.Connection, settings: PostgresSettings,
                        tables: list[ResolvedTable]) -> list[str]:
    """Publish the keyed tables with every action; tables without a usable replica identity stay out."""
    publication = settings.publication
    keyless = keyless_tables(conn, tables)
    keyed = [t for t in tables if t.oid not in keyless]
    done = []
    view = inspect_publication(conn, publication, keyed)
    if view.row is None and _run_ddl(conn, settings, create_publication_sql(conn, publication, keyed)):
        done.append(f"created publication '{publication}' for {len(keyed)} table(s)")
    else:  # it existed, or was created meanwhile by someone else
        view = inspect_publication(conn, publication, keyed)
        uncovered = [t for t in keyed if not view.covers(t)]
        if uncovered and _run_ddl(conn, settings, add_tables_sql(conn, publication, uncovered)):
            done.append(f"added {', '.join(t.label for t in uncovered)} to publication '{publication}'")
        if skipped_actions(view) and _run_ddl(conn, settings, publish_everything_sql(conn, publication)):
            done.append(f"set publication '{publication}' to publish {', '.join(PUBLISH_ACTIONS)}")
    if keyless:
        names = ", ".join(sorted(k.table.label for k in keyless.values()))
        done.append(f"left {names} out of publication '{publication}': without a primary key or REPLICA "
                    "IDENTITY FULL, PostgreSQL would reject UPDATE and DELETE on them (run olake check for the fix)")
    return done


def _run_ddl(conn: psycopg.Connection, settings: PostgresSettings, statement: str) -> bool:
    """Run one statement (committed at once); False if the object appeared meanwhile."""
    try:
        conn.execute(statement)
        _finish(conn, conn.commit)
        return True
    except pg_errors.DuplicateObject:
        _finish(conn, conn.rollback)
        return False
    except pg_errors.InsufficientPrivilege as exc:
        _finish(conn, conn.rollback)
        raise ConfigError(f"postgres: user '{settings.username}' may not do this ({error_line(exc)}); ask an "
                          f"administrator to run in database '{settings.database}': {statement}") from None
    except (pg_errors.ObjectNotInPrerequisiteState, pg_errors.ConfigurationLimitExceeded) as exc:
        _finish(conn, conn.rollback)
        raise ConfigError(f"postgres: cannot run {statement} ({error_line(exc)}); run olake check "
                          "for the fix") from None
    except psycopg.Error as exc:
        _finish(conn, conn.rollback)
        raise SourceError(f"postgres: {statement} failed: {error_line(exc)}") from None


def _finish(conn: psycopg.Connection, end: Callable[[], None]) -> None:
    if not conn.autocommit:
        end()
