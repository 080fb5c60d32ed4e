"""The physical identity ctid chunks refer to, read from a real server: relfilenode of a table or of
every leaf partition, changed by a rewrite or by attaching or detaching a partition."""

from __future__ import annotations

import psycopg

from olake_cli.sources.postgres.chunks import table_identity


def test_identity_follows_rewrites_and_partition_changes(pg_cluster, pg_db):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("""CREATE TABLE plain (id int PRIMARY KEY, v text);
                        INSERT INTO plain SELECT g, 'v' || g FROM generate_series(1, 50) g;
                        CREATE TABLE parted (id int, region text) PARTITION BY LIST (region);
                        CREATE TABLE parted_eu PARTITION OF parted FOR VALUES IN ('eu');
                        CREATE TABLE parted_us PARTITION OF parted FOR VALUES IN ('us')
                          PARTITION BY RANGE (id);
                        CREATE TABLE parted_us_low PARTITION OF parted_us FOR VALUES FROM (0) TO (100);""")
        plain = table_identity(conn, "public", "plain")
        assert list(plain) == ["public.plain"]
        conn.execute("UPDATE plain SET v = v || '!' WHERE id < 10")
        assert table_identity(conn, "public", "plain") == plain  # ordinary writes keep the file
        seen = [plain["public.plain"]]
        for rewrite in ("VACUUM FULL plain", "CLUSTER plain USING plain_pkey",
                        "ALTER TABLE plain ALTER id TYPE bigint"):
            conn.execute(rewrite)
            seen.append(table_identity(conn, "public", "plain")["public.plain"])
        assert len(set(seen)) == len(seen), seen

        parted = table_identity(conn, "public", "parted")
        assert list(parted) == ["public.parted_eu", "public.parted_us_low"]  # leaves at any depth
        conn.execute("VACUUM FULL parted_eu")
        rewritten = table_identity(conn, "public", "parted")
        assert rewritten["public.parted_eu"] != parted["public.parted_eu"]
        assert rewritten["public.parted_us_low"] == parted["public.parted_us_low"]
        conn.execute("ALTER TABLE parted_us DETACH PARTITION parted_us_low")
        assert list(table_identity(conn, "public", "parted")) == ["public.parted_eu"]
