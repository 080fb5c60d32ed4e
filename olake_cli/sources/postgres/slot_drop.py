"""``olake state drop-slot``: remove a pipeline's replication slot, its publication and its claim.

Only what the source config names and olake would have created: a logical ``pgoutput`` slot of the
config's database, and a publication that lists tables (olake never creates ``FOR ALL TABLES`` or
``FOR TABLES IN SCHEMA`` ones) and that no other claimed slot's pipeline reads. A slot in use (a run
reading it right now) is refused. With ``claim_only`` just the claim goes (the pipeline moved to another
destination or state file; the next run claims the slot again).
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from olake_cli.core.errors import ConfigError, SourceError
from olake_cli.sources.postgres.change_feed import slot_info
from olake_cli.sources.postgres.connection import PostgresSettings, connect
from olake_cli.sources.postgres.slot_claim import error_line, other_claims_on, release_claim
from olake_cli.sources.postgres.slot_wal import pretty_bytes, retained_wal_bytes


def drop_slot(settings: PostgresSettings, claim_only: bool = False) -> list[str]:
    """Drop the configured slot and publication and forget the slot's claim; one line per thing done."""
    slot = settings.replication_slot
    if not slot:
        raise ConfigError("postgres: the source config names no 'replication_slot'; nothing to drop")
    try:
        with connect(settings) as conn:
            if claim_only:
                return [_forget(conn, slot, "; the next run of change capture on it claims it again (the slot and "
                                            "its publication stay)")]
            lines = [_drop_the_slot(conn, settings)]
            if settings.publication:
                lines.append(_drop_publication(conn, settings.publication, slot))
            return lines + [_forget(conn, slot, ""), "the next run of change capture with this source config "
                            "loads its cdc streams anew (their positions went with the slot)"]
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ConfigError(f"postgres: user '{settings.username}' may not drop it ({error_line(exc)}); run "
                          "olake state drop-slot as a user with REPLICATION that owns the publication") from None
    except psycopg.errors.ObjectInUse:
        raise ConfigError(_in_use(slot, None)) from None
    except psycopg.Error as exc:
        raise SourceError(f"postgres: drop-slot failed: {error_line(exc)}") from None


def _drop_the_slot(conn: psycopg.Connection, settings: PostgresSettings) -> str:
    """Drop the slot unless it is missing, not olake's kind, of another database or in use."""
    slot, info = settings.replication_slot, slot_info(conn, settings.replication_slot)
    if info is None:
        return f"replication slot '{slot}' does not exist (nothing to drop)"
    if info["slot_type"] != "logical" or info["plugin"] != "pgoutput" or info["database"] != settings.database:
        kind = f"a {info['slot_type']} slot" + (f" of plugin '{info['plugin']}'" if info["plugin"] else "")
        raise ConfigError(f"postgres: replication slot '{slot}' is {kind} in database '{info['database']}', not "
                          f"one olake would have created in '{settings.database}'; not dropped (drop it by hand "
                          f"if you are sure: SELECT pg_drop_replication_slot('{slot}');)")
    if info["active"]:
        pid = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
        raise ConfigError(_in_use(slot, pid[0] if pid else None))
    retained = retained_wal_bytes(conn, slot)
    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    kept = f" (it retained {pretty_bytes(retained)} of WAL, which the source may now remove)" if retained else ""
    return f"dropped replication slot '{slot}'{kept}"


def _drop_publication(conn: psycopg.Connection, publication: str, slot: str) -> str:
    """Drop the publication unless it is missing, not olake's kind, or read by another claimed slot."""
    row = conn.execute("SELECT p.puballtables, EXISTS (SELECT 1 FROM pg_catalog.pg_publication_namespace n"
                       " WHERE n.pnpubid = p.oid) FROM pg_publication p WHERE p.pubname = %s"
                       if conn.info.server_version >= 150000 else
                       "SELECT p.puballtables, false FROM pg_publication p WHERE p.pubname = %s",
                       (publication,)).fetchone()
    if row is None:
        return f"publication '{publication}' does not exist (nothing to drop)"
    if row[0] or row[1]:
        return (f"kept publication '{publication}': it publishes all tables or whole schemas, which olake never "
                "creates")
    others = other_claims_on(conn, publication, slot)
    if others:
        return f"kept publication '{publication}': the pipelines of slot(s) {', '.join(others)} read it"
    conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
    return f"dropped publication '{publication}'"


def _forget(conn: psycopg.Connection, slot: str, after: str) -> str:
    claim = release_claim(conn, slot)
    if claim is None:
        return f"replication slot '{slot}' was not claimed by any pipeline"
    return f"forgot the claim on replication slot '{slot}' by {claim.describe()}{after}"


def _in_use(slot: str, pid: int | None) -> str:
    by = f" by the server process {pid}" if pid else ""
    return (f"postgres: replication slot '{slot}' is in use{by} (a run reading it right now); stop that run, "
            "then run olake state drop-slot again")
