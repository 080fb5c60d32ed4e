"""What the pages tell a user to run, run: the README's Quickstart commands exist as written, and the
GRANT blocks of the PostgreSQL source and destination pages are all a user needs. A role given exactly
the source page's block (the slot and publication made by an administrator) and a role given exactly
the destination page's block carry a ``cdc`` ``sync``, full load then changes, into a target schema
that already exists, without a warning; the target then equals the source row by row. The destination
block also works before the target schema exists. (The Quickstart page's own commands
are run by tests/test_quickstart.py, which reads them from the page.)"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from tests.support.cli import run_olake, write_json
from tests.support.pg_compare import assert_same_rows
from tests.test_docs_site import DOCS, ROOT, code_blocks, section

ROLE_PASSWORD = "docs-Pa55"


def grant_block(page: Path, database: str, schema: str, role: str, page_database: str, page_schema: str) -> list[str]:
    """The SQL block under the page's grants heading as statements, for ``role`` on ``database`` and
    ``schema`` instead of the page's ``olake``, ``page_database`` and ``page_schema``."""
    heading = "What the user needs" if page.parent.name == "sources" else "Grants"
    [block] = code_blocks(section(page, heading), "sql")
    text = re.sub(r"\bolake\b(?=;| WITH)", sql.Identifier(role).as_string(None), block)
    text = re.sub(rf"\bDATABASE {page_database}\b", f"DATABASE {sql.Identifier(database).as_string(None)}", text)
    text = re.sub(rf"\bSCHEMA (IF NOT EXISTS )?{page_schema}\b",
                  lambda found: f"SCHEMA {found[1] or ''}{sql.Identifier(schema).as_string(None)}", text)
    statements = [s.strip() for s in text.split(";") if s.strip()]
    assert statements and all(role in s for s in statements), statements
    return statements


def create_role(dsn: str, role: str, statements: list[str]) -> None:
    """A LOGIN role with nothing but ``statements`` granted (run by the cluster's superuser)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role),
                                                                        sql.Literal(ROLE_PASSWORD)))
        for statement in statements:
            conn.execute(statement)


def test_the_readme_quickstart_names_the_scripts_that_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [block] = code_blocks(section(ROOT / "README.md", "Quickstart"), "bash")
    commands = [line.split("#")[0].split() for line in block.splitlines()]
    assert commands == [["bash", "scripts/demo.sh"], ["bash", "scripts/test.sh"]]
    assert all((ROOT / script).is_file() for _, script in commands)
    assert "docs/quickstart.md" in readme
    assert code_blocks(section(DOCS / "quickstart.md", "The demo"), "bash")[0] == block


def _orders(dsn: str, statements: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _sync(src: str, dst: str, catalog: str, state: str) -> None:
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", catalog, "--state", state)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert "warning" not in result.stderr.decode(), result.stderr.decode()[-3000:]  # e.g. the slot's claim


def test_the_grant_blocks_are_all_a_cdc_sync_needs(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    reader, writer = f"docs_reader_{suffix}", f"docs_writer_{suffix}"
    slot, publication = f"docs_slot_{suffix}", f"docs_pub_{suffix}"
    source_dsn, target_dsn = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    _orders(source_dsn, ["CREATE TABLE public.orders (id bigint PRIMARY KEY, status text NOT NULL, note text)",
                         "INSERT INTO public.orders SELECT g, 'new', repeat('x', g) FROM generate_series(1, 20) g",
                         f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')",
                         f"CREATE PUBLICATION {publication} FOR TABLE public.orders"])
    _orders(target_dsn, ["CREATE SCHEMA shop_copy"])  # exists already: the page's schema grant is needed
    create_role(source_dsn, reader, grant_block(DOCS / "sources" / "postgres.md", pg_db, "public", reader,
                                                "shop", "public"))
    create_role(target_dsn, writer, grant_block(DOCS / "destinations" / "postgres.md", target_db, "shop_copy",
                                                writer, "analytics", "shop_copy"))
    src = write_json(tmp_path / "src.json", {**pg_cluster.source_config(
        pg_db, replication_slot=slot, publication=publication), "username": reader, "password": ROLE_PASSWORD})
    dst = write_json(tmp_path / "dst.json", {**pg_target.destination_config(target_db, schema="shop_copy"),
                                             "username": writer, "password": ROLE_PASSWORD})
    catalog, state = str(tmp_path / "catalog.json"), str(tmp_path / "state.json")
    try:
        assert run_olake("check", "--config", dst).returncode == 0
        assert run_olake("discover", "--config", src, "--output", catalog).returncode == 0
        chosen = json.loads(Path(catalog).read_text())
        [orders] = chosen["streams"]
        orders["sync_mode"] = "cdc"
        Path(catalog).write_text(json.dumps(chosen))
        _sync(src, dst, catalog, state)
        _orders(source_dsn, ["INSERT INTO public.orders VALUES (21, 'new', 'late')",
                             "UPDATE public.orders SET status = 'paid' WHERE id IN (2, 3)",
                             "DELETE FROM public.orders WHERE id = 5"])
        _sync(src, dst, catalog, state)
        assert_same_rows(source_dsn, ("public", "orders"), target_dsn, ("shop_copy", "orders"),
                         ["id", "status", "note"])
    finally:
        _orders(source_dsn, [f"SELECT pg_drop_replication_slot('{slot}')"])


def test_the_destination_grant_block_works_before_the_target_schema_exists(pg_cluster, pg_db, pg_target, target_db,
                                                                            tmp_path):
    writer = f"docs_writer_{uuid.uuid4().hex[:8]}"
    source_dsn, target_dsn = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    _orders(source_dsn, ["CREATE TABLE public.items (id bigint PRIMARY KEY, name text)",
                         "INSERT INTO public.items SELECT g, 'item ' || g FROM generate_series(1, 5) g"])
    create_role(target_dsn, writer, grant_block(DOCS / "destinations" / "postgres.md", target_db, "fresh_copy",
                                                writer, "analytics", "shop_copy"))
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    dst = write_json(tmp_path / "dst.json", {**pg_target.destination_config(target_db, schema="fresh_copy"),
                                             "username": writer, "password": ROLE_PASSWORD})
    catalog = str(tmp_path / "catalog.json")
    assert run_olake("check", "--destination", dst).returncode == 0
    assert run_olake("discover", "--config", src, "--output", catalog).returncode == 0
    _sync(src, dst, catalog, str(tmp_path / "state.json"))
    assert_same_rows(source_dsn, ("public", "items"), target_dsn, ("fresh_copy", "items"), ["id", "name"])
    with psycopg.connect(target_dsn) as conn:
        owner = conn.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'fresh_copy'").fetchone()
    assert owner == (writer,)
