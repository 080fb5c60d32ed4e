"""MongoDB change capture in process against a real change stream: updates whose post-image is missing.

A change stream's ``updateLookup`` gives ``fullDocument: null`` when the lookup finds nothing (the
document was deleted before it, or, on SecantusDB, a document whose ``_id`` is null). Such an update
is looked up again by key; when the document is gone the update is skipped only once its delete has
been read in the same run, even when that delete lies beyond the run's bound. Following a quiet
collection while the rest of the database changes moves its position to the post-batch resume token,
and nothing made after such a position is taken for a change already read.
"""

from __future__ import annotations

import json

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.follow import Follow
from olake_cli.core.opid import OpId
from olake_cli.core.state import State, StreamState
from olake_cli.sources.mongodb.change_events import ChangeEventReader
from olake_cli.sources.mongodb.change_positions import MongoPosition, cluster_op, idle_position, token_time
from olake_cli.sources.mongodb.source import MongoSource
from tests.support.cdc import discover_catalog
from tests.support.cli import write_json
from tests.support.current_view import iceberg_table
from tests.support.inprocess import read_write, sync
from tests.support.mongo import connect
from tests.support.verify import latest_versions, read_parquet


def _capture(mongo_server, database: str, name: str):
    source = MongoSource({"type": "mongodb", "uri": mongo_server.uri, "database": database})
    entry = next(s for s in source.discover()["streams"] if s["name"] == name)
    stream = CatalogStream.from_dict({**entry, "sync_mode": "cdc"})
    capture = source.change_capture([stream], lambda line: None)
    capture.preflight(State())
    position = capture.start_position()
    state = State(streams=[capture.with_position(StreamState("cdc", name, database, None), position)])
    return capture, stream, state


def _changes(batches) -> list[tuple[str, object, dict]]:
    """(op, _id, data) of every change of the batches, in log order (data as wire values)."""
    found = []
    for batch in batches:
        for run in batch.runs:
            columns = {name: texts.to_pylist() for name, texts in run.data.items()}
            for row, op in enumerate(run.op.to_pylist()):
                data = {name: json.loads(texts[row]) for name, texts in columns.items() if texts[row] is not None}
                found.append((op, data["_id"], data))
    return found


def test_an_update_of_a_document_with_a_null_id_carries_the_document(mongo_server, mongo_db):
    with connect(mongo_server.uri) as client:
        client[mongo_db].things.insert_many([{"_id": None, "v": 1}, {"_id": 7, "v": 1}])
        capture, stream, state = _capture(mongo_server, mongo_db, "things")
        client[mongo_db].things.update_one({"_id": None}, {"$set": {"v": 2}})
    changes = _changes(capture.read([stream], state))
    assert [(op, _id, data["v"]) for op, _id, data in changes] == [("u", "null", 2)]


def test_an_update_whose_document_is_deleted_in_the_same_run_gives_way_to_the_delete(mongo_server, mongo_db):
    with connect(mongo_server.uri) as client:
        coll = client[mongo_db].things
        coll.insert_many([{"_id": i, "v": 0} for i in range(1, 4)])
        capture, stream, state = _capture(mongo_server, mongo_db, "things")
        coll.update_one({"_id": 1}, {"$set": {"v": 1}})
        coll.update_one({"_id": 2}, {"$set": {"v": 1}})
        coll.delete_one({"_id": 1})
    changes = _changes(capture.read([stream], state))
    assert [(op, _id) for op, _id, _ in changes] == [("u", 2), ("d", 1)]


def test_a_gone_document_makes_the_run_read_past_its_bound_to_the_delete(mongo_server, mongo_db):
    """The update lies within the run's bound, its delete after it: the run reads on to that delete
    (and sets no checkpoint between them), so no run ends with the update skipped and the delete unread."""
    with connect(mongo_server.uri) as client:
        coll = client[mongo_db].things
        coll.insert_many([{"_id": i, "v": 0} for i in range(1, 4)])
        capture, stream, state = _capture(mongo_server, mongo_db, "things")
        with client.start_session() as session:
            coll.update_one({"_id": 1}, {"$set": {"v": 1}}, session=session)
            bound = cluster_op(session.operation_time)
        coll.update_one({"_id": 3}, {"$set": {"v": 1}})  # after the bound: not part of this run
        coll.delete_one({"_id": 1})
        coll.update_one({"_id": 2}, {"$set": {"v": 1}})  # after the delete: not part of this run
        position = capture.position_of(state.find(mongo_db, "things"))
        with capture._watch(client, {"_data": position.token}) as change_stream:
            reader = ChangeEventReader(capture, [stream], capture._database(client))
            batches = list(reader.batches(change_stream, bound))
    assert [(op, _id) for op, _id, _ in _changes(batches)] == [("u", 3), ("d", 1)]
    assert batches[-1].position.op > bound
    assert all(batch.position is None for batch in batches[:-1])


def test_updates_without_a_post_image_reach_both_destinations(mongo_server, mongo_db, tmp_path, spark):
    """End to end (``read | write`` into Parquet, ``sync`` into Iceberg): the update of the document
    whose ``_id`` is null arrives, and an update followed by the document's delete leaves no row."""
    with connect(mongo_server.uri) as client:
        client[mongo_db].things.insert_many([{"_id": None, "v": 1}, {"_id": 1, "v": 1}, {"_id": 2, "v": 1}])
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db})
    discover_catalog(src, tmp_path / "cat.json", {"things": "cdc"})
    lake = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    ice = write_json(tmp_path / "ice.json", {"type": "iceberg", "path": str(tmp_path / "ice")})
    paths = [(read_write, lake, tmp_path / "st.json",
              lambda: latest_versions(read_parquet(str(tmp_path / "lake" / mongo_db / "things")), ["_id"])),
             (sync, ice, tmp_path / "ice-st.json",
              lambda: iceberg_table(tmp_path / "ice", mongo_db, "things").scan().to_arrow())]
    for run, dst, state, _ in paths:
        run(src, tmp_path / "cat.json", dst, state)
    with connect(mongo_server.uri) as client:
        coll = client[mongo_db].things
        coll.update_one({"_id": None}, {"$set": {"v": 2}})
        coll.update_one({"_id": 1}, {"$set": {"v": 2}})
        coll.update_one({"_id": 2}, {"$set": {"v": 2}})
        coll.delete_one({"_id": 2})
    for run, dst, state, rows in paths:
        run(src, tmp_path / "cat.json", dst, state)
        got = {r["_id"]: r["v"] for r in rows().select(["_id", "v"]).to_pylist()}
        assert got == {"null": 2, '{"$numberInt": "1"}': 2}  # _id is bson (null, ints): canonical EJSON


def test_following_a_quiet_collection_moves_to_the_post_batch_token_and_misses_nothing(
        mongo_server, mongo_db):
    """Only another collection changes: each idle checkpoint carries a newer post-batch token with a
    growing op id, and a change made after the last one is read from it and kept above its op id."""
    with connect(mongo_server.uri) as client:
        client[mongo_db].things.insert_one({"_id": 1, "v": 0})
        capture, stream, state = _capture(mongo_server, mongo_db, "things")
        follow, idle = Follow(commit_interval_s=0.1), []
        follow.policy.idle_s = 0.2  # 10 s in a run
        for batch in capture.follow([stream], state, follow):
            assert not batch.runs and batch.position is not None
            idle.append(batch.position)
            client[mongo_db].other.insert_one({"n": len(idle)})  # the rest of the database moves on
            if len({p.token for p in idle}) == 3:
                follow.stop.set()
        client[mongo_db].things.update_one({"_id": 1}, {"$set": {"v": 1}})
    ops = [p.op for p in idle]
    assert ops == sorted(set(ops)) and ops[0] > capture.start_position().op
    resumed = State(streams=[capture.with_position(state.find(mongo_db, "things"), idle[-1])])
    batches = list(capture.read([stream], resumed))
    assert [(op, _id, data["v"]) for op, _id, data in _changes(batches)] == [("u", 1, 1)]
    assert sum(len(run.after(idle[-1].op)) for batch in batches for run in batch.runs) == 1


def test_an_idle_token_never_covers_more_than_the_cluster_time_it_names():
    """A MongoDB (KeyString) token resuming at an earlier cluster time than the one read before its empty
    batch (a lagging majority point) is paired with its own, and so is SecantusDB's (BSON, its ``t``); a
    token in another form names none and covers only the last change read, or where the stream started."""
    mongod = "82612E8513000000012B022C0100296E5A1004A5093ABB38FE4B9EA67F01BB1A96D812463C5F6964003C5F5F5F78000004"
    named = (1630438675 << 32) | 1
    assert token_time(mongod) == named
    assert idle_position(mongod, OpId(named + 5, 0), None).op == OpId(named, 0)
    assert idle_position(mongod, OpId(named - 5, 0), None).op == OpId(named - 5, 0)
    assert idle_position(mongod, OpId(named - 5, 0), MongoPosition("x", OpId(named, 3))).op == OpId(named, 3)
    secantus = "3b0000001073000200000011740007000000d67c0a6b026e001500000070726f62652e24636d642e6167677265676174650003" \
               "6b00050000000000"
    secantus_named = (1795849430 << 32) | 7
    assert token_time(secantus) == secantus_named and idle_position(secantus, OpId(9, 0), None).op == OpId(9, 0)
    assert idle_position(secantus, OpId(secantus_named + 5, 0), None).op == OpId(secantus_named, 0)
    other = "0102030405060708090a"
    assert token_time(other) is None and idle_position(other, OpId(99, 0), None, OpId(7, 0)).op == OpId(7, 0)
    assert idle_position(other, OpId(99, 0), MongoPosition("x", OpId(8, 2)), OpId(7, 0)).op == OpId(8, 2)
