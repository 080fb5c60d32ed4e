"""The PostgreSQL destination in bench/run.py: copying into a second throwaway cluster, against peers.

Full load (the same ``--rows`` table as run.py's full load, each path into its own database of the
target cluster; output row counts checked):
    pg-copy-pipe   psql ``COPY bench TO STDOUT (FORMAT binary)`` piped into psql ``COPY bench FROM STDIN
                   (FORMAT binary)`` (the limit; the table with its primary key created first, untimed)
    pg-dump        ``pg_dump -t bench | psql``
    sync-postgres  ``olake sync`` into the PostgreSQL destination
    dlt-postgres   dlt ``sql_table`` (connectorx) into dlt's postgres destination
Change apply (run.py's ``--changes`` changes of its change-capture table; each path set up before the
changes are made, untimed):
    cdc-sync-postgres  ``olake sync`` of the changes into the target (after an untimed full load)
    cdc-pipe-postgres  ``olake read | olake write`` of the changes into the target (its own slot and
                       database; the full load before them by ``sync``, untimed)
    pg-subscription    PostgreSQL's own logical replication: a subscription made and synced before the
                       changes, then disabled; timed from ``ALTER SUBSCRIPTION ... ENABLE`` until its slot
                       confirmed the WAL position after the changes
    psql-replay        the changes as one SQL script (one statement per row change, 1,000 per transaction,
                       from a test_decoding slot; written untimed) run by ``psql -f``
Each target table is compared with the source (row count and a checksum of every column) afterwards.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from pathlib import Path
from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[1]

FULL_PATHS = {
    "pg-copy-pipe": "`COPY (FORMAT binary)` piped into `COPY FROM STDIN (FORMAT binary)`",
    "pg-dump": "`pg_dump -t bench \\| psql`",
    "sync-postgres": "`olake sync` → PostgreSQL",
    "dlt-postgres": "dlt `sql_table` (connectorx) → PostgreSQL",
}
CDC_PATHS = {
    "cdc-sync-postgres": "`olake sync` → PostgreSQL (apply)",
    "cdc-pipe-postgres": "`olake read \\| olake write` → PostgreSQL (apply)",
    "pg-subscription": "PostgreSQL logical replication (`CREATE SUBSCRIPTION`), until caught up",
    "psql-replay": "the changes as one SQL script, `psql -f`",
}
SLOT_OLAKE, SLOT_SQL, SUBSCRIPTION = "bench_slot_pg", "bench_slot_sql", "bench_sub"
OLAKE_CDC = {"cdc-sync-postgres": (SLOT_OLAKE, "c_olake"), "cdc-pipe-postgres": (SLOT_OLAKE + "_pipe", "c_pipe")}
_CHECKSUM = "SELECT count(*), md5(string_agg(md5(t::text), '' ORDER BY id)) FROM bench t"


def _psql(cluster, database: str) -> str:
    return (f"{shlex.quote(str(Path(cluster.bin_dir) / 'psql'))} -X -q -v ON_ERROR_STOP=1 -h {cluster.host} "
            f"-p {cluster.port} -U {cluster.superuser} -d {database}")


def _pg_dump(cluster, database: str, *options: str) -> str:
    return (f"{shlex.quote(str(Path(cluster.bin_dir) / 'pg_dump'))} -h {cluster.host} -p {cluster.port} "
            f"-U {cluster.superuser} {' '.join(options)} -t bench {database}")


def checksum(cluster, database: str) -> tuple[int, str]:
    """(rows, md5 over every row's text) of ``bench`` in ``database``."""
    import psycopg

    with psycopg.connect(cluster.dsn(database), autocommit=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        return tuple(conn.execute(_CHECKSUM).fetchone())


def _target_db(b, name: str, schema_from: str | None = None) -> None:
    """A fresh database on the target cluster (with ``bench``'s definition from the source database)."""
    import subprocess

    from tests.support.pgcluster import create_database

    create_database(b.target, name)
    if schema_from:
        subprocess.run(f"{_pg_dump(b.cluster, schema_from, '--schema-only')} | {_psql(b.target, name)} > /dev/null",
                       shell=True, check=True, env=b.env, cwd=b.work)


def full_load(b, selected: set[str], make_row: Callable) -> list:
    """Time the selected full-load paths into the target cluster (the source table ``bench`` exists)."""
    expected = checksum(b.cluster, "bench")
    rows = []

    def path(key: str, database: str, command: str, schema: bool = False):
        row = make_row(key, FULL_PATHS[key], b.args.rows)
        rows.append(row)
        _target_db(b, database, "bench" if schema else None)
        if b.run(row, command, f"{key}.log"):
            _verify(row, expected, lambda: checksum(b.target, database))
        return row

    src = _psql(b.cluster, "bench")
    path("pg-copy-pipe", "t_copy", f"{src} -c \"COPY bench TO STDOUT (FORMAT binary)\" 2> pg-copy-pipe.log | "
         f"{_psql(b.target, 't_copy')} -c \"COPY bench FROM STDIN (FORMAT binary)\" 2>> pg-copy-pipe.log", True)
    if "pg-dump" in selected:
        path("pg-dump", "t_dump", f"{_pg_dump(b.cluster, 'bench')} 2> pg-dump.log | {_psql(b.target, 't_dump')} "
             f"> /dev/null 2>> pg-dump.log")
    if "sync-postgres" in selected:
        b.write_json("dst-sync-postgres.json", b.target.destination_config("t_olake"))
        path("sync-postgres", "t_olake", f"{b.olake} sync --source src.json --destination dst-sync-postgres.json "
             f"--catalog cat.json --state st-sync-postgres.json > /dev/null 2> sync-postgres.log")
    if "dlt-postgres" in selected:
        rows.append(_dlt(b, make_row, expected))
    return rows


def _dlt(b, make_row: Callable, expected: tuple[int, str]):
    from bench import peers

    row = make_row("dlt-postgres", FULL_PATHS["dlt-postgres"], b.args.rows)
    try:
        python = peers.ensure_peers_venv()
    except peers.Unavailable as exc:
        row.status = f"not available: {exc}"
        return row
    _target_db(b, "t_dlt")
    source = b.cluster.uri("bench").replace("postgresql://", "postgresql+psycopg2://", 1)
    b.run(row, f"{shlex.quote(str(python))} {shlex.quote(str(ROOT / 'bench' / 'peers.py'))} dlt --backend connectorx "
               f"--uri {shlex.quote(source)} --table bench --dest-uri {shlex.quote(b.target.uri('t_dlt'))} "
               f"--out unused --dataset public --pipelines-dir {b.work / 'pipelines-pg'} > /dev/null 2> dlt-postgres.log",
          "dlt-postgres.log")
    if row.ok:  # dlt adds its own columns (_dlt_id, _dlt_load_id): count rows only
        import psycopg

        with psycopg.connect(b.target.dsn("t_dlt"), autocommit=True) as conn:
            landed = conn.execute("SELECT count(*) FROM public.bench").fetchone()[0]
        if landed != expected[0]:
            row.status = f"FAILED: {landed:,} rows landed, expected {expected[0]:,}"
    return row


def _verify(row, expected: tuple[int, str], found: Callable[[], tuple[int, str]]) -> None:
    """The target table must equal the source (rows and the checksum of every column's text)."""
    try:
        got = found()
    except Exception as exc:  # noqa: BLE001 - any failure to read the output is the verdict
        row.status = f"FAILED: output unreadable: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return
    if got != expected:
        row.status = f"FAILED: {got[0]:,} rows (checksum {'equal' if got[1] == expected[1] else 'differs'}), " \
                     f"expected {expected[0]:,}"


def before_changes(b, selected: set[str], catalog: str) -> None:
    """Set the change-apply paths up at the source's current position (before the changes)."""
    import psycopg

    for key, (slot, database) in OLAKE_CDC.items():
        if key in selected:
            b.write_json(f"src-{key}.json", b.cluster.source_config(
                "benchcdc", replication_slot=slot, publication="bench_pub", create_slot_and_publication=True))
            b.write_json(f"dst-{key}.json", b.target.destination_config(database))
            _target_db(b, database)
            b.sh(_olake_cdc(b, catalog, key, pipe=False))  # the initial full load, untimed
    if "pg-subscription" in selected:
        _target_db(b, "c_sub", "benchcdc")
        with psycopg.connect(b.target.dsn("c_sub"), autocommit=True) as conn:
            conn.execute(f"CREATE SUBSCRIPTION {SUBSCRIPTION} CONNECTION '{b.cluster.dsn('benchcdc')}' "
                         f"PUBLICATION bench_pub WITH (copy_data = true)")
            while conn.execute("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'").fetchone()[0]:
                time.sleep(0.5)
            conn.execute(f"ALTER SUBSCRIPTION {SUBSCRIPTION} DISABLE")
    if "psql-replay" in selected:
        _target_db(b, "c_sql")
        b.sh(f"{_pg_dump(b.cluster, 'benchcdc')} | {_psql(b.target, 'c_sql')} > /dev/null")
        with psycopg.connect(b.cluster.dsn("benchcdc"), autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (SLOT_SQL,))


def after_changes(b, selected: set[str], catalog: str, changes: int | None, make_row: Callable) -> list:
    """Time the change-apply paths; each target must then equal the source."""
    import psycopg

    expected = checksum(b.cluster, "benchcdc")
    with psycopg.connect(b.cluster.dsn("benchcdc"), autocommit=True) as conn:
        end = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
    rows = []
    for key, (_, database) in OLAKE_CDC.items():
        if key in selected:
            row = make_row(key, CDC_PATHS[key], changes)
            if b.run(row, _olake_cdc(b, catalog, key, pipe=key == "cdc-pipe-postgres"), f"{key}.log"):
                _verify(row, expected, lambda database=database: checksum(b.target, database))
            rows.append(row)
    if "pg-subscription" in selected:
        row = make_row("pg-subscription", CDC_PATHS["pg-subscription"], changes)
        wait = (f"{shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'bench' / 'pg_destination.py'))} caught-up "
                f"{shlex.quote(b.cluster.dsn('benchcdc'))} "
                f"{SUBSCRIPTION} {end}")
        if b.run(row, f"{_psql(b.target, 'c_sub')} -c 'ALTER SUBSCRIPTION {SUBSCRIPTION} ENABLE' 2> pg-subscription.log "
                      f"&& {wait} 2>> pg-subscription.log", "pg-subscription.log"):
            _verify(row, expected, lambda: checksum(b.target, "c_sub"))
        with psycopg.connect(b.target.dsn("c_sub"), autocommit=True) as conn:
            conn.execute(f"DROP SUBSCRIPTION {SUBSCRIPTION}")
        rows.append(row)
    if "psql-replay" in selected:
        row = make_row("psql-replay", CDC_PATHS["psql-replay"], changes)
        write_replay_script(b.cluster.dsn("benchcdc"), b.work / "replay.sql")
        if b.run(row, f"{_psql(b.target, 'c_sql')} -f replay.sql > /dev/null 2> psql-replay.log", "psql-replay.log"):
            _verify(row, expected, lambda: checksum(b.target, "c_sql"))
        rows.append(row)
    return rows


def _olake_cdc(b, catalog: str, key: str, pipe: bool) -> str:
    """The command of olake change-apply path ``key``: ``sync``, or ``read | write`` with ``pipe``."""
    if pipe:
        return (f"{b.olake} read --config src-{key}.json --catalog {catalog} --state st-{key}.json 2>> {key}.log | "
                f"{b.olake} write --config dst-{key}.json --state st-{key}.json > /dev/null 2>> {key}.log")
    return (f"{b.olake} sync --source src-{key}.json --destination dst-{key}.json "
            f"--catalog {catalog} --state st-{key}.json > /dev/null 2>> {key}.log")


_FIELD = re.compile(r"(\w+)\[[^\]]+\]:('(?:[^']|'')*'|\S+)")


def write_replay_script(dsn: str, path: Path) -> int:
    """The changes to ``public.bench`` that ``bench_slot_sql`` (test_decoding) holds, as SQL statements;
    returns how many (the slot decodes every table of the database, olake's ``_olake`` tables too)."""
    import psycopg

    count = 0
    with psycopg.connect(dsn) as conn, conn.cursor(name="replay") as cur, open(path, "w") as out:
        cur.execute(f"SELECT data FROM pg_logical_slot_peek_changes('{SLOT_SQL}', NULL, NULL)")
        for (line,) in cur:
            if line.startswith(("BEGIN", "COMMIT")):
                out.write(line.split()[0] + ";\n")
                continue
            table, _, change = line.partition(": ")
            if table != "table public.bench":  # olake's own bookkeeping (_olake.slot_claims) is not replayed
                continue
            kind, _, rest = change.partition(": ")
            fields = _FIELD.findall(rest)
            if kind == "INSERT":
                out.write(f"INSERT INTO bench ({', '.join(n for n, _ in fields)}) "
                          f"VALUES ({', '.join(v for _, v in fields)});\n")
            elif kind == "UPDATE":
                sets = ", ".join(f"{n} = {v}" for n, v in fields if n != "id")
                out.write(f"UPDATE bench SET {sets} WHERE id = {dict(fields)['id']};\n")
            elif kind == "DELETE":
                out.write(f"DELETE FROM bench WHERE id = {dict(fields)['id']};\n")
            count += kind in ("INSERT", "UPDATE", "DELETE")
        conn.rollback()
    return count


def wait_caught_up(dsn: str, subscription: str, lsn: str) -> None:
    """Wait until the subscription's slot on the source has confirmed ``lsn``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        while not conn.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                               "WHERE slot_name = %s", (lsn, subscription)).fetchone()[0]:
            time.sleep(0.05)


if __name__ == "__main__" and sys.argv[1:2] == ["caught-up"]:
    wait_caught_up(*sys.argv[2:5])
