"""Change-capture preflight: find every CDC misconfiguration, print the exact SQL that fixes it,
and (when the user allows it) create the replication slot and the publication.

The change feed reads ``pg_logical_slot_peek_binary_changes(slot, ..., 'proto_version', '1',
'publication_names', pub)``, so it needs: ``wal_level = logical``; a user with REPLICATION (or
superuser); a ``pgoutput`` slot in this database whose WAL is still there; a publication that
covers every selected table, publishes insert/update/delete/truncate and, for partitioned tables,
publishes via the partition root; and a usable replica identity on every table (or partition).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from olake_cli.core.errors import ConfigError, SourceError
from olake_cli.sources.postgres.change_feed import slot_info
from olake_cli.sources.postgres.connection import PostgresSettings

PUBLISH_EVERYTHING = "insert, update, delete, truncate"
DEFAULT_SLOT_NAME = "olake_slot"
DEFAULT_PUBLICATION_NAME = "olake_publication"
_SLOT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


@dataclass(frozen=True)
class CdcProblem:
    """One change-capture misconfiguration: a one-line explanation and the SQL that fixes it."""

    what: str
    fix_sql: str | None = None


@dataclass(frozen=True)
class ResolvedTable:
    """A selected table found in ``pg_class``."""

    schema: str
    name: str
    oid: int
    partitioned: bool

    @property
    def label(self) -> str:
        return f"{self.schema}.{self.name}"


# ---------------------------------------------------------------- entry points

def cdc_problems(conn: psycopg.Connection, settings: PostgresSettings,
                 tables: list[tuple[str, str]]) -> list[CdcProblem]:
    """Every reason change capture of ``tables`` would not work, each with its fix SQL, in check order."""
    problems = [p for p in (wal_level_problem(current_wal_level(conn)),
                            replication_privilege_problem(conn)) if p is not None]
    problems += config_problems(settings)
    if settings.replication_slot and valid_slot_name(settings.replication_slot):
        problems += slot_problems(conn, settings)
    resolved, missing = resolve_tables(conn, tables)
    problems += [CdcProblem(f"table {s}.{t} does not exist in database '{settings.database}'; "
                            "run discover again and fix the catalog") for s, t in missing]
    if settings.publication:
        problems += publication_problems(conn, settings.publication, resolved)
    problems += replica_identity_problems(conn, resolved)
    return problems


def cdc_notes(conn: psycopg.Connection, settings: PostgresSettings,
              tables: list[tuple[str, str]]) -> list[str]:
    """Informational lines (not problems): key-only old rows on deletes, a slot close to losing WAL."""
    notes = []
    if settings.replication_slot:
        info = slot_info(conn, settings.replication_slot)
        if info is not None and info["wal_status"] == "unreserved":
            notes.append(f"replication slot '{settings.replication_slot}' is about to lose WAL it still "
                         "needs (wal_status = 'unreserved'); run the sync soon")
    resolved, _ = resolve_tables(conn, tables)
    key_only = sorted({root.label for root, leaf in _leaf_identities(conn, resolved)
                       if leaf["ident"] in ("d", "i") and _identity_usable(leaf)})
    if key_only:
        shown = ", ".join(key_only[:5]) + (" ..." if len(key_only) > 5 else "")
        notes.append(f"{len(key_only)} table(s) ({shown}) send only the key columns of a deleted row; "
                     "for the whole old row run ALTER TABLE <table> REPLICA IDENTITY FULL;")
    return notes


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


# ---------------------------------------------------------------- publication

def create_publication_sql(conn: psycopg.Connection, publication: str, tables: list[ResolvedTable]) -> str:
    """``CREATE PUBLICATION "pub" FOR TABLE ... WITH (publish_via_partition_root = true);``"""
    parts = [sql.SQL("CREATE PUBLICATION {}").format(sql.Identifier(publication))]
    if tables:
        parts.append(sql.SQL("FOR TABLE {}").format(_table_list(tables)))
    parts.append(sql.SQL("WITH (publish_via_partition_root = true);"))
    return sql.SQL(" ").join(parts).as_string(conn)


def add_tables_sql(conn: psycopg.Connection, publication: str, tables: list[ResolvedTable]) -> str:
    """``ALTER PUBLICATION "pub" ADD TABLE "s"."t1", "s"."t2";``"""
    return sql.SQL("ALTER PUBLICATION {} ADD TABLE {};").format(
        sql.Identifier(publication), _table_list(tables)).as_string(conn)


def publication_problems(conn: psycopg.Connection, publication: str,
                         tables: list[ResolvedTable]) -> list[CdcProblem]:
    """Problems with the publication: missing, tables not covered or filtered, operations, partition root."""
    pub = _publication_row(conn, publication)
    if pub is None:
        return [CdcProblem(f"publication '{publication}' does not exist in this database",
                           create_publication_sql(conn, publication, tables))]
    coverage = {} if pub["puballtables"] else _table_coverage(conn, pub["oid"], tables)
    uncovered = [t for t in tables if t.oid in coverage and not coverage[t.oid][0]]
    problems = []
    if uncovered:
        problems.append(CdcProblem(f"publication '{publication}' does not cover "
                                   f"{', '.join(t.label for t in uncovered)}",
                                   add_tables_sql(conn, publication, uncovered)))
    for table in (t for t in tables if t.oid in coverage and coverage[t.oid][1]):
        fix = sql.SQL("ALTER PUBLICATION {0} DROP TABLE {1};\nALTER PUBLICATION {0} ADD TABLE {1};").format(
            sql.Identifier(publication), sql.Identifier(table.schema, table.name)).as_string(conn)
        problems.append(CdcProblem(f"publication '{publication}' has a row filter or column list on "
                                   f"{table.label}, so some changes would never arrive", fix))
    return problems + _publish_option_problems(conn, publication, pub, tables)


def _publish_option_problems(conn: psycopg.Connection, publication: str, pub: dict[str, Any],
                             tables: list[ResolvedTable]) -> list[CdcProblem]:
    problems = []
    skipped = [op for op in ("insert", "update", "delete", "truncate") if not pub[f"pub{op}"]]
    if skipped:
        problems.append(CdcProblem(
            f"publication '{publication}' does not publish {', '.join(skipped)}",
            sql.SQL("ALTER PUBLICATION {} SET (publish = {});").format(
                sql.Identifier(publication), sql.Literal(PUBLISH_EVERYTHING)).as_string(conn)))
    partitioned = [t.label for t in tables if t.partitioned]
    if partitioned and not pub["pubviaroot"]:
        problems.append(CdcProblem(
            f"publication '{publication}' must publish via the partition root so changes to partitioned "
            f"table(s) {', '.join(partitioned)} arrive under the parent's name",
            sql.SQL("ALTER PUBLICATION {} SET (publish_via_partition_root = true);").format(
                sql.Identifier(publication)).as_string(conn)))
    return problems


def _publication_row(conn: psycopg.Connection, publication: str) -> dict[str, Any] | None:
    cur = conn.execute("SELECT oid, puballtables, pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot"
                       " FROM pg_publication WHERE pubname = %s", (publication,))
    row = cur.fetchone()
    return None if row is None else dict(zip([c.name for c in cur.description], row))


def _table_coverage(conn: psycopg.Connection, pub_oid: int,
                    tables: list[ResolvedTable]) -> dict[int, tuple[bool, bool]]:
    """oid -> (covered, filtered): listed by name or by schema; a row filter or column list on it."""
    if conn.info.server_version >= 150000:
        by_schema = ("EXISTS (SELECT 1 FROM pg_publication_namespace pn"
                     " WHERE pn.pnpubid = %(pub)s AND pn.pnnspid = c.relnamespace)")
        filtered = "coalesce(pr.prqual IS NOT NULL OR pr.prattrs IS NOT NULL, false)"
    else:
        by_schema, filtered = "false", "false"
    rows = conn.execute(
        f"SELECT c.oid, pr.prrelid IS NOT NULL OR {by_schema}, {filtered}"
        " FROM unnest(%(oids)s::oid[]) AS r(oid) JOIN pg_class c ON c.oid = r.oid"
        " LEFT JOIN pg_publication_rel pr ON pr.prpubid = %(pub)s AND pr.prrelid = c.oid",
        {"pub": pub_oid, "oids": [t.oid for t in tables]}).fetchall()
    return {oid: (covered, is_filtered) for oid, covered, is_filtered in rows}


def _table_list(tables: list[ResolvedTable]) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(t.schema, t.name) for t in tables)


# ---------------------------------------------------------------- tables and replica identity

def resolve_tables(conn: psycopg.Connection, tables: list[tuple[str, str]]
                   ) -> tuple[list[ResolvedTable], list[tuple[str, str]]]:
    """(found tables in the given order, (schema, table) pairs that do not exist)."""
    rows = conn.execute(
        "SELECT t.ord, c.oid, c.relkind FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t(s, n, ord)"
        " JOIN pg_namespace ns ON ns.nspname = t.s"
        " JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = t.n AND c.relkind IN ('r', 'p')",
        ([s for s, _ in tables], [n for _, n in tables])).fetchall()
    found = {ord_ - 1: (oid, kind) for ord_, oid, kind in rows}
    resolved = [ResolvedTable(s, n, found[i][0], found[i][1] == "p")
                for i, (s, n) in enumerate(tables) if i in found]
    return resolved, [pair for i, pair in enumerate(tables) if i not in found]


def replica_identity_problems(conn: psycopg.Connection, tables: list[ResolvedTable]) -> list[CdcProblem]:
    """One problem per table whose own (or a partition's) replica identity makes changes unusable."""
    bad: dict[int, list[dict[str, Any]]] = {}
    for root, leaf in _leaf_identities(conn, tables):
        if not _identity_usable(leaf):
            bad.setdefault(root.oid, []).append(leaf)
    problems = []
    for table in tables:
        if table.oid in bad:
            problems.append(_identity_problem(conn, table, bad[table.oid]))
    return problems


def _identity_problem(conn: psycopg.Connection, table: ResolvedTable,
                      leaves: list[dict[str, Any]]) -> CdcProblem:
    reasons = {"n": "REPLICA IDENTITY NOTHING", "d": "no primary key (REPLICA IDENTITY DEFAULT)",
               "i": "a REPLICA IDENTITY USING INDEX whose index no longer exists"}
    targets = [(table.schema, table.name)] if table.partitioned else []
    targets += [(leaf["schema"], leaf["name"]) for leaf in leaves]
    fix = "\n".join(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL;").format(
        sql.Identifier(s, n)).as_string(conn) for s, n in targets)
    if table.partitioned:
        names = ", ".join(f"{leaf['schema']}.{leaf['name']}" for leaf in leaves)
        subject = f"partition(s) {names} of {table.label} have {reasons[leaves[0]['ident']]}"
        later = "; partitions created later need the same fix"
    else:
        subject, later = f"table {table.label} has {reasons[leaves[0]['ident']]}", ""
    return CdcProblem(f"{subject}: PostgreSQL rejects UPDATE and DELETE on published tables without a "
                      f"replica identity, and their changes would carry no key{later}", fix)


def _identity_usable(leaf: dict[str, Any]) -> bool:
    ident = leaf["ident"]
    return ident == "f" or (ident == "d" and leaf["has_pk"]) or (ident == "i" and leaf["has_ident_index"])


def _leaf_identities(conn: psycopg.Connection,
                     tables: list[ResolvedTable]) -> list[tuple[ResolvedTable, dict[str, Any]]]:
    """(table, leaf) for every leaf relation (the table itself, or each partition) with its identity."""
    by_oid = {t.oid: t for t in tables}
    rows = conn.execute(
        "SELECT r.root, ln.nspname, l.relname, l.relreplident,"
        " EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = l.oid AND i.indisprimary),"
        " EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = l.oid AND i.indisreplident)"
        " FROM unnest(%s::oid[]) AS r(root) CROSS JOIN LATERAL ("  # a plain table is its own leaf
        "   SELECT pt.relid FROM pg_partition_tree(r.root::regclass) pt WHERE pt.isleaf"
        "   UNION ALL SELECT c.oid::regclass FROM pg_class c WHERE c.oid = r.root AND c.relkind = 'r'"
        " ) AS leaf(relid) JOIN pg_class l ON l.oid = leaf.relid JOIN pg_namespace ln ON ln.oid = l.relnamespace"
        " ORDER BY ln.nspname, l.relname", ([t.oid for t in tables],)).fetchall()
    keys = ("schema", "name", "ident", "has_pk", "has_ident_index")
    return [(by_oid[row[0]], dict(zip(keys, row[1:]))) for row in rows]


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
    publication = settings.publication
    pub = _publication_row(conn, publication)
    if pub is None:
        if _run_ddl(conn, settings, create_publication_sql(conn, publication, tables)):
            return [f"created publication '{publication}' for {len(tables)} table(s)"]
        pub = _publication_row(conn, publication)  # created meanwhile by someone else
    if pub["puballtables"]:
        return []
    coverage = _table_coverage(conn, pub["oid"], tables)
    uncovered = [t for t in tables if not coverage[t.oid][0]]
    if uncovered and _run_ddl(conn, settings, add_tables_sql(conn, publication, uncovered)):
        return [f"added {', '.join(t.label for t in uncovered)} to publication '{publication}'"]
    return []


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
        raise ConfigError(f"postgres: user '{settings.username}' may not do this ({_first_line(exc)}); ask an "
                          f"administrator to run in database '{settings.database}': {statement}") from None
    except (pg_errors.ObjectNotInPrerequisiteState, pg_errors.ConfigurationLimitExceeded) as exc:
        _finish(conn, conn.rollback)
        raise ConfigError(f"postgres: cannot run {statement} ({_first_line(exc)}); run olake check "
                          "for the fix") from None
    except psycopg.Error as exc:
        _finish(conn, conn.rollback)
        raise SourceError(f"postgres: {statement} failed: {_first_line(exc)}") from None


def _finish(conn: psycopg.Connection, end: Callable[[], None]) -> None:
    if not conn.autocommit:
        end()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
