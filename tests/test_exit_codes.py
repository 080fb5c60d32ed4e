"""Exit statuses a service manager or a scheduler can act on (docs/troubleshooting.md#exit-codes): a
config error exits 78 (EX_CONFIG: fix something first), a transient failure 75 (EX_TEMPFAIL: run it again
as it is), through the real commands. A source config naming a schema, database, tag set or allow-list
that does not exist is a config error for ``discover``, ``read`` and ``sync`` alike, as it is for ``check``
(it used to discover and copy nothing, exit 0, run after run)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from tests.support.cli import messages, run_olake, write_json
from tests.support.pgcluster import free_port
from tests.test_bad_input import assert_one_error

EXIT_TRANSIENT, EXIT_CONFIG = 75, 78


def _empty_catalog(tmp_path: Path) -> str:
    """A catalog without streams: what ``discover`` made of a config that found nothing."""
    return write_json(tmp_path / "catalog.json", {"streams": []})


def _runs(src: str, tmp_path: Path) -> list:
    """``discover``, ``read`` and ``sync`` (into Parquet) of the source config ``src``."""
    catalog = _empty_catalog(tmp_path)
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    return [run_olake("discover", "--config", src),
            run_olake("read", "--config", src, "--catalog", catalog),
            run_olake("sync", "--source", src, "--destination", dst, "--catalog", catalog,
                      "--state", str(tmp_path / "state.json"))]


def test_a_misspelt_postgres_schema_is_a_config_error_for_every_command(pg_cluster, pg_db, tmp_path):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE public.orders (id int PRIMARY KEY)")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, schemas=["pubic"]))
    line = f"schema(s) pubic do not exist in database '{pg_db}' (its schemas: public); fix 'schemas'"
    for result in [run_olake("check", "--config", src), *_runs(src, tmp_path)]:
        assert_one_error(result, "config_error", line, secrets=(pg_cluster.password,))
        assert result.returncode == EXIT_CONFIG, result.stderr.decode()
    assert not (tmp_path / "lake").exists() and not (tmp_path / "state.json").exists()


def test_a_postgres_database_that_does_not_exist_is_a_config_error(pg_cluster, tmp_path):
    src = write_json(tmp_path / "src.json", pg_cluster.source_config("no_such_db"))
    for result in _runs(src, tmp_path):
        assert_one_error(result, "config_error", "database 'no_such_db' does not exist",
                         secrets=(pg_cluster.password,))
        assert result.returncode == EXIT_CONFIG, result.stderr.decode()


def test_an_unreachable_source_is_a_transient_failure(pg_cluster, tmp_path):
    port = free_port()
    src = write_json(tmp_path / "src.json", pg_cluster.source_config("shop", port=port))
    for result in [run_olake("check", "--config", src), *_runs(src, tmp_path)]:
        assert_one_error(result, "transient_error", f"nothing accepts connections at 127.0.0.1:{port}",
                         secrets=(pg_cluster.password,))
        assert result.returncode == EXIT_TRANSIENT, result.stderr.decode()


def test_a_bad_config_file_and_a_wrong_password_are_config_errors(pg_cluster, pg_db, tmp_path):
    bad = write_json(tmp_path / "bad.json", {**pg_cluster.source_config(pg_db), "port": "5432x"})
    result = run_olake("discover", "--config", bad)
    assert_one_error(result, "config_error", "field 'port'")
    assert result.returncode == EXIT_CONFIG
    wrong = write_json(tmp_path / "wrong.json", {**pg_cluster.source_config(pg_db), "password": "Wr0ng-pw"})
    for result in _runs(wrong, tmp_path):
        assert_one_error(result, "config_error", "wrong username or password", secrets=("Wr0ng-pw",))
        assert result.returncode == EXIT_CONFIG, result.stderr.decode()
    usage = run_olake("discover", "--no-such-option")
    assert usage.returncode == 2, usage.stderr.decode()


def test_a_mongodb_database_that_does_not_exist_is_a_config_error(mongo_server, mongo_db, tmp_path):
    from tests.support.mongo import connect

    with connect(mongo_server.uri) as client:
        client[mongo_db]["orders"].insert_one({"_id": 1})
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": mongo_server.uri,
                                             "database": mongo_db + "_misspelt"})
    for result in [run_olake("check", "--config", src), *_runs(src, tmp_path)]:
        assert_one_error(result, "config_error", f"database '{mongo_db}_misspelt' does not exist", mongo_db,
                         "fix 'database'")
        assert result.returncode == EXIT_CONFIG, result.stderr.decode()


def test_dynamodb_tags_or_tables_matching_nothing_are_a_config_error(moto_server, dynamo_table, tmp_path):
    from tests.support.dynamo import create_table

    env = f"prod-{dynamo_table}"
    create_table(moto_server.client(), dynamo_table, tags={"olake-ingest": "yes", "olake-env": env})
    tags = {"ingestion_key": "olake-ingest", "environment_key": "olake-env", "environment_value": "prd"}
    for changes, needle in (({"tags": tags}, "no table in"), ({"tables": [dynamo_table + "x"]}, "does not exist")):
        src = write_json(tmp_path / "src.json", moto_server.config(**changes))
        for result in _runs(src, tmp_path):
            assert_one_error(result, "config_error", needle)
            assert result.returncode == EXIT_CONFIG, result.stderr.decode()
    src = write_json(tmp_path / "src.json", moto_server.config(tags={**tags, "environment_value": env}))
    found = run_olake("discover", "--config", src)
    assert found.returncode == 0 and [s["name"] for s in json.loads(found.stdout)["catalog"]["streams"]] == \
        [dynamo_table], found.stderr.decode()
    assert [m["type"] for m in messages(found.stdout)] == ["CATALOG"]
