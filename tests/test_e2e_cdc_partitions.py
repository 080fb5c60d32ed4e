"""Change capture and partitioned tables: leaf changes reach the root stream; a partition's TRUNCATE reloads it.

The cases run the real commands (``read | write`` and ``sync``; each case through one of them by
default, both with OLAKE_TEST_ALL_PATHS=1) against a real server and compare the
current table (the README's DuckDB query) with the source value by value.
"""

from __future__ import annotations

import json

import pytest

from tests.support.matrix import cases
from tests.test_e2e_cdc_stitching import MODES, Setup

PARTITIONED = """
CREATE TABLE events (id int, region text, v int, note text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('eu');
CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('us') PARTITION BY RANGE (id);
CREATE TABLE events_us_low PARTITION OF events_us FOR VALUES FROM (0) TO (1000);
CREATE TABLE events_us_high PARTITION OF events_us FOR VALUES FROM (1000) TO (MAXVALUE);
INSERT INTO events SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g, 'n' || g FROM generate_series(1, 2000) g;
"""


@pytest.mark.parametrize("mode,via_root", cases([(m, v) for v in (False, True) for m in MODES],
                                              [("sync", False), ("pipe", True)]))
def test_changes_of_leaf_partitions_reach_the_root_stream(pg_cluster, pg_db, tmp_path, mode, via_root):
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_part_{mode}_{int(via_root)}")
    setup.execute(PARTITIONED)
    setup.discover({"events": "cdc"})
    setup.run(mode)
    setup.execute(f"ALTER PUBLICATION {setup.slot}_pub SET (publish_via_partition_root = {str(via_root).lower()})")
    setup.execute("UPDATE events SET v = -v WHERE id % 7 = 0",
                  "DELETE FROM events WHERE id BETWEEN 100 AND 150",
                  "INSERT INTO events SELECT g, 'us', g, 'late' FROM generate_series(5000, 5100) g",
                  "UPDATE events SET id = id + 10000 WHERE id BETWEEN 500 AND 520")  # moves across leaves
    stderr = setup.run(mode)
    assert b"change capture:" in stderr
    setup.assert_current("events", ("id", "region"))
    setup.drop_slot()


# tests/test_e2e_resync.py truncates a partition through sync by default
@pytest.mark.parametrize("mode", cases(MODES, ["pipe"]))
def test_truncating_one_partition_reloads_the_stream(pg_cluster, pg_db, tmp_path, mode):
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_ptrunc_{mode}")
    setup.execute(PARTITIONED)
    setup.discover({"events": "cdc"})
    setup.run(mode)
    # with publish_via_partition_root PostgreSQL does not publish a partition's TRUNCATE at all
    setup.execute(f"ALTER PUBLICATION {setup.slot}_pub SET (publish_via_partition_root = false)")
    setup.execute("UPDATE events SET note = 'before' WHERE id <= 10", "TRUNCATE events_eu",
                  "INSERT INTO events VALUES (4, 'eu', 4, 'after')")
    stderr = setup.run(mode)
    assert b"partition public.events_eu was truncated" in stderr
    stream = next(s for s in json.loads(setup.state.read_text())["streams"] if s["stream_name"] == "events")
    assert stream["sync_type"] == "full-load" and stream["stream_state"]["cursor_field"] is None
    setup.run(mode)  # the stream is loaded anew
    setup.assert_current("events", ("id", "region"))
    setup.drop_slot()
