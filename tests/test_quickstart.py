"""The Quickstart page's "your own PostgreSQL" walkthrough, step by step through the real commands, as the
page writes them (its olake commands and its changes are read from the page): check says what change
capture lacks and the SQL for it; discover --output; cdc in the catalog; sync; change rows; sync again;
query the Iceberg table. Each run ends with a summary line per stream."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.support.cli import messages, run_olake, write_json
from tests.support.verify import latest_versions, read_parquet
from tests.test_docs_site import code_blocks, olake_commands, section

ROOT = Path(__file__).resolve().parents[1]
ICEBERG_PAGE = ROOT / "docs" / "destinations" / "iceberg.md"
QUICKSTART_PAGE = ROOT / "docs" / "quickstart.md"


def _page_steps(folder: Path) -> tuple[list[list[str]], list[str]]:
    """The walkthrough's olake commands (argv, its .json files in ``folder``) and the SQL of its changes."""
    blocks = code_blocks(section(QUICKSTART_PAGE, "Your own PostgreSQL"), "bash")
    commands = [[str(folder / word) if word.endswith(".json") else word for word in argv]
                for block in blocks for argv in olake_commands(block)]
    psql_lines = re.findall(r"^psql .*?(?<!\\)$", blocks[-1], re.M | re.S)  # continuation lines included
    psql = [shlex.split(line.replace("\\\n", " ")) for line in psql_lines]
    changes = [words[n + 1] for words in psql for n, word in enumerate(words) if word == "-c"]
    return commands, changes


def test_own_postgres_quickstart_from_check_to_a_queried_result(pg_cluster, pg_db, tmp_path):
    slot, publication = f"{pg_db}_slot", f"{pg_db}_publication"
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, total numeric(10,2))")
        conn.execute("INSERT INTO orders SELECT g, 'new', g * 10.5 FROM generate_series(1, 5) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=slot, publication=publication))
    write_json(tmp_path / "dst.json", {"type": "iceberg", "path": str(tmp_path / "lake")})
    catalog_file, state = tmp_path / "catalog.json", tmp_path / "state.json"
    (check_cmd, check_again, discover_cmd, first_sync, second_sync), changes = _page_steps(tmp_path)
    assert [check_cmd[0], check_again[0], discover_cmd[0], first_sync[0], second_sync[0]] == [
        "check", "check", "discover", "sync", "sync"] and first_sync == second_sync
    assert check_cmd[check_cmd.index("--config") + 1] == src and "--output" in discover_cmd

    # 1. check: full loads are ready, change capture lacks a slot and a publication, each with its SQL
    check = run_olake(*check_cmd)
    assert check.returncode == 0, check.stderr.decode()
    status = messages(check.stdout)[0]["connectionStatus"]["message"]
    create_slot = f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput');"
    create_publication = f'CREATE PUBLICATION "{publication}" FOR TABLE "public"."orders";'
    assert "cdc NOT ready, 2 problem(s)" in status and create_slot in status and create_publication in status

    # 2. the SQL check printed, run as a user with REPLICATION (here the superuser)
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute(create_slot)
        conn.execute(create_publication)
    ready = run_olake(*check_again)
    assert "change capture ready" in messages(ready.stdout)[0]["connectionStatus"]["message"]

    # 3. discover into an editable file; 4. choose cdc
    assert run_olake(*discover_cmd).returncode == 0
    catalog = json.loads(catalog_file.read_text())
    [orders] = catalog["streams"]
    orders["sync_mode"] = "cdc"
    catalog_file.write_text(json.dumps(catalog, indent=2))

    # 5. the first sync copies the table
    first = _sync(first_sync)
    assert re.fullmatch(r"olake: summary: public\.orders: 5 rows loaded \(1/1 chunks\); changes: 0 inserted, "
                        r"0 updated, 0 deleted; \d+\.\ds; position [0-9A-F]+/[0-9A-F]+", first), first

    # 6. change rows; 7. the second sync captures the changes
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        assert len(changes) == 3, changes
        for statement in changes:
            conn.execute(statement)
        expected = conn.execute("SELECT id, status, total FROM orders ORDER BY id").fetchall()
    second = _sync(second_sync)
    position = json.loads(state.read_text())["streams"][0]["stream_state"]["cursor_field"]
    assert re.fullmatch(rf"olake: summary: public\.orders: 0 rows loaded; changes: 1 inserted, 1 updated, "
                        rf"1 deleted; \d+\.\ds; position {position}", second), second

    # 8. the page's query of the current rows, as written, with only what `pip install .` brings (no DuckDB)
    assert _page_query(tmp_path) == [["id", "status", "total"], *([str(value) for value in row] for row in expected)]
    if os.environ.get("OLAKE_TEST_DUCKDB_ICEBERG") == "1":  # opt-in: installs DuckDB 1.4.4 from PyPI
        assert _readme_duckdb_route(tmp_path) == f"{len(expected)}", "DuckDB's iceberg_scan sees other rows"


def _page_query(folder: Path) -> list[list[str]]:
    """Run the walkthrough's last step (its lines from ``py=`` on) in ``folder``, which holds ``lake/``, with
    this environment's ``olake`` on the PATH and DuckDB unimportable; the words of each line it prints."""
    block = code_blocks(section(QUICKSTART_PAGE, "Your own PostgreSQL"), "bash")[-1]
    blocker = folder / "no_duckdb"
    blocker.mkdir()
    (blocker / "duckdb.py").write_text("raise ImportError('duckdb is not installed')\n")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(blocker)}
    result = subprocess.run(["bash", "-euc", block[block.index("\npy=") + 1:]], cwd=folder, capture_output=True,
                            text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return [line.split() for line in result.stdout.splitlines()]


def _readme_duckdb_route(folder: Path) -> str:
    """Run the Iceberg page's offline DuckDB route (its bash block, as written) in ``folder``, which holds
    ``lake/``; the count it prints."""
    text = ICEBERG_PAGE.read_text(encoding="utf-8")
    start = text.index("```bash\npython3 -m venv duckdb-iceberg\n") + len("```bash\n")
    block = text[start:text.index("```", start)]
    result = subprocess.run(["bash", "-euc", block], cwd=folder, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-2].strip("│ ")


def _sync(command: list[str]) -> str:
    """Run the ``olake sync`` command; its one summary line."""
    result = run_olake(*command)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    [summary] = [line for line in result.stderr.decode().splitlines() if line.startswith("olake: summary: ")]
    return summary


def _demo_module():
    """``scripts/demo.py`` as a module (the Quickstart's first command runs it as a script)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("olake_demo", ROOT / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_shows_change_capture_into_iceberg(pg_cluster, pg_db, tmp_path, capsys):
    """The demo's change-capture part as it runs in the Quickstart, on the suite's cluster: its slot and
    publication SQL, a first sync, its changes, a second sync; what it prints about shop.orders, and the
    Iceberg table equal to the source table value by value; then its Kafka step: shop.orders through a
    topic and back into Parquet, equal to the source."""
    from tests.test_iceberg_e2e import assert_stream_matches

    demo = _demo_module()
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((ROOT / "fixtures" / "postgres" / "demo.sql").read_text())
    src = pg_cluster.source_config(pg_db, schemas=["shop"], replication_slot=demo.SLOT, publication=demo.PUBLICATION)
    write_json(tmp_path / "src.json", src)
    discovered = run_olake("discover", "--config", str(tmp_path / "src.json"))  # the demo's discover > catalog.json
    assert discovered.returncode == 0, discovered.stderr.decode()
    (tmp_path / "catalog.json").write_bytes(discovered.stdout)
    try:
        demo.iceberg_demo(tmp_path, dsn)
        printed = capsys.readouterr().out
        assert ("shop.orders held 20000 rows after the first sync, 20001 after the second;\n  orders 1-3 are now "
                "shipped, shipped, shipped; new orders 20001 (paid, 42.50), 20002 (pending, 9.99); order 19999 "
                "is gone") in printed, printed
        catalog = json.loads((tmp_path / "cdc-catalog.json").read_text())
        [orders] = [s for s in catalog["streams"] if s["name"] == "orders"]
        assert orders["sync_mode"] == "cdc"
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert_stream_matches(conn, tmp_path / "iceberg", orders)
        demo.kafka_demo(tmp_path)  # shop.orders into a topic and back out into Parquet
        assert "back out into Parquet: 20001 rows" in capsys.readouterr().out
        back = latest_versions(read_parquet(str(tmp_path / "from-kafka" / "shop" / "orders")), ["order_id"])
        texts = [[None if v is None else str(v) for v in back.column(c).to_pylist()]
                 for c in ("order_id", "status", "total_amount")]
        lake = sorted(zip(*texts), key=repr)
        with psycopg.connect(dsn, autocommit=True) as conn:
            source = conn.execute("SELECT order_id::text, status, total_amount::text FROM shop.orders").fetchall()
        assert lake == sorted(source, key=repr)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                         (demo.SLOT,))
