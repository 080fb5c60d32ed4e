"""``include`` and ``exclude`` patterns in the source configs pick the streams ``discover`` lists,
for PostgreSQL (tables, views, partitioned tables) and MongoDB alike."""

from __future__ import annotations

import json

import psycopg
import pytest

from olake_cli.core.errors import ConfigError
from olake_cli.core.stream_filter import keep_streams, kept
from tests.support.cli import run_olake, write_json
from tests.support.mongo import connect as mongo_connect


def test_patterns_match_the_qualified_or_the_bare_name_and_exclude_wins():
    assert kept("sales", "leads", ["sales.*"], [])
    assert kept("public", "orders", ["orders"], []) and kept("shop", "orders", ["orders"], [])
    assert not kept("public", "orders", ["sales.*"], [])
    assert kept("public", "anything", [], [])
    assert not kept("public", "tmp_1", [], ["*.tmp_*"]) and not kept("public", "tmp_1", ["public.*"], ["tmp_*"])
    assert not kept("public", "Orders", ["orders"], [])  # case-sensitive, as PostgreSQL names are
    assert kept("db", "a.b", ["a.b"], [])  # MongoDB collection names may hold dots
    with pytest.raises(ConfigError, match="leave none of the 2 table"):
        keep_streams([("p", "a"), ("p", "b")], ["nothing*"], [], "postgres")
    assert keep_streams([], ["x"], [], "postgres") == []


def _names(result) -> list[str]:
    assert result.returncode == 0, result.stderr.decode()
    return sorted(f"{s['namespace']}.{s['name']}" for s in json.loads(result.stdout)["catalog"]["streams"])


def test_postgres_discover_keeps_what_the_patterns_say(pg_cluster, pg_db, tmp_path):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("""CREATE TABLE orders (id int PRIMARY KEY); CREATE TABLE order_items (id int PRIMARY KEY);
                        CREATE TABLE tmp_scratch (id int); CREATE VIEW order_view AS SELECT id FROM orders;
                        CREATE SCHEMA sales; CREATE TABLE sales.leads (id int PRIMARY KEY);
                        CREATE TABLE sales.parted (id int, r text) PARTITION BY LIST (r);
                        CREATE TABLE sales.parted_eu PARTITION OF sales.parted FOR VALUES IN ('eu');""")
    base = pg_cluster.source_config(pg_db, schemas=["public", "sales"])
    cases = [({}, ["public.order_items", "public.order_view", "public.orders", "public.tmp_scratch",
                   "sales.leads", "sales.parted"]),
             ({"include": ["public.order*", "leads"], "exclude": ["*_items"]},
              ["public.order_view", "public.orders", "sales.leads"]),
             ({"exclude": ["tmp_*", "sales.*"]}, ["public.order_items", "public.order_view", "public.orders"]),
             ({"include": ["sales.*"]}, ["sales.leads", "sales.parted"])]
    for extra, expected in cases:
        config = write_json(tmp_path / "src.json", {**base, **extra})
        assert _names(run_olake("discover", "--config", config)) == expected, extra


@pytest.mark.parametrize("extra, needle", [
    ({"include": ["zzz*"]}, "leave none of the"),
    ({"include": [""]}, "include"),
    ({"exclude": "tmp_*"}, "exclude"),
])
def test_postgres_bad_patterns_are_one_line_config_errors(pg_cluster, pg_db, tmp_path, extra, needle):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    config = write_json(tmp_path / "src.json", {**pg_cluster.source_config(pg_db), **extra})
    result = run_olake("discover", "--config", config)
    errors = [line for line in result.stderr.decode().splitlines() if line.startswith("olake: error")]
    assert result.returncode != 0 and len(errors) == 1 and needle in errors[0], result.stderr.decode()
    assert pg_cluster.password not in result.stderr.decode() + result.stdout.decode()


def test_mongodb_discover_keeps_what_the_patterns_say(mongo_server, mongo_db, tmp_path):
    with mongo_connect(mongo_server.uri) as client:
        for name in ("users", "orders", "tmp_1", "tmp_2"):
            client[mongo_db][name].insert_one({"n": 1})
    base = {"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db}
    for extra, expected in (({"exclude": ["tmp_*"]}, ["orders", "users"]),
                            ({"include": [f"{mongo_db}.*"], "exclude": ["users"]}, ["orders", "tmp_1", "tmp_2"]),
                            ({"include": ["u*", "orders"]}, ["orders", "users"])):
        config = write_json(tmp_path / "src.json", {**base, **extra})
        assert _names(run_olake("discover", "--config", config)) == [f"{mongo_db}.{n}" for n in expected], extra
