"""Which pipeline uses a replication slot: a claim recorded in the source database, refused to others.

A slot has one confirmed position. Two pipelines reading one slot (two state files, two destinations:
the Quickstarts followed one after the other do it) each move it past the other's committed position,
and each then takes its own position for lost and loads every stream anew, run after run. So the
first run of change capture on a slot records a claim in the source database, in table
``_olake.slot_claims`` (one row per slot): the pipeline's identity (``core.pipeline_identity``: the
destination it writes into and the state file it resumes from, whichever of the two the run's command
names) and a description for people. A later run on the slot goes on unless a part both know differs
(a part the claim lacks is filled in; a run that shares no part with the claim, such as ``read
--state-from`` after ``read --state | write``, says so and goes on), and stops otherwise, before it
reads or changes anything, with one line naming the slot, the claim and the fix.

Why a row on the source and not the slot's position: the slot is the thing shared, so its claim must
live beside it, where every pipeline sees it; a position ahead of a state can also mean a stream that
was deselected for a while, which is a lost position of that stream, not another pipeline. A claim
lives as long as its slot: a run that finds the claimed slot gone (dropped by hand, with or without its
publication) removes the claim, says so in one line, and claims the slot it creates for its own pipeline,
whichever that is. A slot dropped and created again by hand between two runs keeps its claim: PostgreSQL
gives a slot no identity beyond its name, so nothing tells it from the slot that was claimed (``olake
state drop-slot --claim-only`` forgets the claim). ``olake state drop-slot`` removes both. A run that names neither a destination nor a state file
(``read`` alone, to look at what it prints) neither claims the slot nor is refused it: it starts from the
slot's position and never moves it (a run moves the slot only up to positions its state held at the start).

Where the role may not create ``_olake.slot_claims`` (no CREATE on the database, a read-only server),
the run goes on and says that a second pipeline would go unnoticed, with the SQL that allows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from collections.abc import Callable

import psycopg
from psycopg import sql

from olake_cli.core.errors import ConfigError
from olake_cli.core.pipeline_identity import PipelineIdentity
from olake_cli.sources.postgres.connection import PostgresSettings

SCHEMA, TABLE = "_olake", "slot_claims"
_CREATE = """
CREATE TABLE IF NOT EXISTS _olake.slot_claims (
  slot_name text PRIMARY KEY,
  destination text,
  state_file text,
  description text NOT NULL,
  publication text,
  claimed_at timestamptz NOT NULL DEFAULT now(),
  last_run_at timestamptz NOT NULL DEFAULT now())"""
_COLUMNS = "slot_name, destination, state_file, description, publication, claimed_at, last_run_at"


@dataclass(frozen=True)
class SlotClaim:
    """One row of ``_olake.slot_claims``."""

    slot: str
    identity: PipelineIdentity
    publication: str | None
    claimed_at: datetime
    last_run_at: datetime

    def describe(self) -> str:
        """Who claimed the slot and when it last ran, for people."""
        return (f"{self.identity.description} (claimed {self.claimed_at:%Y-%m-%d %H:%M:%S %Z}, "
                f"last run {self.last_run_at:%Y-%m-%d %H:%M:%S %Z})")


def claim_slot(conn: psycopg.Connection, settings: PostgresSettings, pipeline: PipelineIdentity | None,
               log: Callable[[str], None]) -> None:
    """Claim ``settings.replication_slot`` for ``pipeline``, or raise ConfigError if another pipeline has."""
    slot = settings.replication_slot
    if pipeline is None or not pipeline.known:
        return
    try:
        with conn.transaction():
            _ensure_table(conn)
            claim = _live_claim(conn, slot, log)
            if claim is None:
                _insert(conn, slot, pipeline, settings.publication)
                log(f"replication slot '{slot}' is now claimed by this pipeline ({pipeline.description}); "
                    "another pipeline on it will be refused")
                return
            if pipeline.contradicts(claim.identity):
                raise ConfigError(refusal(slot, claim))
            if not pipeline.same_pipeline(claim.identity):
                log(f"replication slot '{slot}' is claimed by {claim.identity.description}, which names neither "
                    "this run's destination nor its state file; taking this run for the same pipeline and "
                    "recording both in the claim")
            _touch(conn, slot, pipeline, claim.identity, settings.publication)
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction) as exc:
        log(f"warning: cannot record that this pipeline uses replication slot '{slot}' "
            f"({error_line(exc)}), so a second pipeline on it would go unnoticed; to allow it, run as an "
            f"administrator: {claims_table_sql(conn, settings.username)}")


def _live_claim(conn: psycopg.Connection, slot: str, log: Callable[[str], None]) -> SlotClaim | None:
    """The claim on ``slot``, locked; a claim whose slot no longer exists in this database is removed
    (with one line saying so) and None returned: it was about a slot that is gone."""
    claim = read_claim(conn, slot, lock=True)
    if claim is None or conn.execute("SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = %s AND "
                                     "database = current_database())", (slot,)).fetchone()[0]:
        return claim
    release_claim(conn, slot)
    log(f"replication slot '{slot}' no longer exists (dropped since it was claimed), so the claim of "
        f"{claim.describe()} on it is removed")
    return None


def refusal(slot: str, claim: SlotClaim) -> str:
    """The one line that refuses a run on a slot another pipeline claimed, with the fixes."""
    return (f"postgres: replication slot '{slot}' is used by another pipeline: {claim.describe()}; two "
            "pipelines on one slot move it past each other's position and force each other into full "
            "re-syncs. Give this pipeline a slot of its own (another \"replication_slot\" in its source "
            "config); or, if that pipeline is gone, run: olake state drop-slot --config SOURCE.json (drops the "
            "slot and its publication; the next run loads anew); or, if it is this pipeline with a new "
            "destination or state file: olake state drop-slot --config SOURCE.json --claim-only")


def read_claim(conn: psycopg.Connection, slot: str, lock: bool = False) -> SlotClaim | None:
    """The claim on ``slot`` (None: unclaimed, or no claims table)."""
    if conn.execute("SELECT to_regclass('_olake.slot_claims')").fetchone()[0] is None:
        return None
    row = conn.execute(f"SELECT {_COLUMNS} FROM _olake.slot_claims WHERE slot_name = %s"
                       + (" FOR UPDATE" if lock else ""), (slot,)).fetchone()
    return None if row is None else _claim(row)


def release_claim(conn: psycopg.Connection, slot: str) -> SlotClaim | None:
    """Remove the claim on ``slot``; the claim removed, or None."""
    if conn.execute("SELECT to_regclass('_olake.slot_claims')").fetchone()[0] is None:
        return None
    row = conn.execute(f"DELETE FROM _olake.slot_claims WHERE slot_name = %s RETURNING {_COLUMNS}",
                       (slot,)).fetchone()
    return None if row is None else _claim(row)


def other_claims_on(conn: psycopg.Connection, publication: str, slot: str) -> list[str]:
    """The other claimed slots whose pipelines read ``publication``."""
    if conn.execute("SELECT to_regclass('_olake.slot_claims')").fetchone()[0] is None:
        return []
    return [r[0] for r in conn.execute("SELECT slot_name FROM _olake.slot_claims WHERE publication = %s "
                                       "AND slot_name <> %s ORDER BY 1", (publication, slot)).fetchall()]


def claims_table_sql(conn: psycopg.Connection, user: str) -> str:
    """What an administrator runs so that ``user`` may keep the claims table."""
    role = sql.Identifier(user).as_string(conn)
    if conn.execute("SELECT to_regnamespace('_olake') IS NULL").fetchone()[0]:
        return f"CREATE SCHEMA _olake AUTHORIZATION {role};"
    if conn.execute("SELECT to_regclass('_olake.slot_claims') IS NULL").fetchone()[0]:
        return f"GRANT USAGE, CREATE ON SCHEMA _olake TO {role};"
    return f"GRANT USAGE ON SCHEMA _olake TO {role}; GRANT SELECT, INSERT, UPDATE, DELETE ON _olake.slot_claims TO {role};"


def _ensure_table(conn: psycopg.Connection) -> None:
    """The claims table, created when missing (``CREATE ... IF NOT EXISTS`` needs CREATE even then)."""
    if conn.execute("SELECT to_regclass('_olake.slot_claims')").fetchone()[0] is not None:
        return
    if conn.execute("SELECT to_regnamespace('_olake') IS NULL").fetchone()[0]:
        conn.execute("CREATE SCHEMA IF NOT EXISTS _olake")
    conn.execute(_CREATE)


def _insert(conn: psycopg.Connection, slot: str, pipeline: PipelineIdentity, publication: str | None) -> None:
    conn.execute("INSERT INTO _olake.slot_claims (slot_name, destination, state_file, description, publication)"
                 " VALUES (%s, %s, %s, %s, %s)",
                 (slot, pipeline.destination, pipeline.state_file, pipeline.description, publication))


def _touch(conn: psycopg.Connection, slot: str, run: PipelineIdentity, claimed: PipelineIdentity,
           publication: str | None) -> None:
    """Record this run: the parts of the identity the claim lacked, the publication, the time (and this
    run's description when it names both parts)."""
    described = run.description if run.destination and run.state_file else None
    pipeline = run.filled_from(claimed)
    conn.execute("UPDATE _olake.slot_claims SET destination = %s, state_file = %s, publication = %s,"
                 " description = coalesce(%s, description), last_run_at = now() WHERE slot_name = %s",
                 (pipeline.destination, pipeline.state_file, publication, described, slot))


def _claim(row: tuple) -> SlotClaim:
    slot, destination, state_file, description, publication, claimed_at, last_run_at = row
    return SlotClaim(slot, PipelineIdentity(destination, state_file, description), publication, claimed_at,
                     last_run_at)


def error_line(exc: BaseException) -> str:
    """The first line of a driver error (its type when it has no text)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
