"""State files of the release before the typed state load through it and are written back unchanged.

``tests/fixtures/state_v1/`` holds state files and STATE messages written by that release for each
source and phase (see its README): PostgreSQL full loads stopped mid-chunks, change capture and
incremental passes; MongoDB and DynamoDB INIT_SYNC mid-segments and change capture; plus the states
the tests and docs spell out. Each loads into ``StreamState`` (olake's keys in typed fields, the
source's own keys in ``source``) and is written back as the same JSON, byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olake_cli.core.state import load_state, state_to_json
from olake_cli.core.stream_state import TYPED_KEYS

FIXTURES = Path(__file__).parent / "fixtures" / "state_v1"
FILES = sorted(FIXTURES.glob("*.json"))
# (source, sync_type, a chunk still to do): every phase a release's file must be read in
PHASES = {("postgres", "full-load", True), ("postgres", "cdc", False), ("postgres", "incremental", False),
          ("postgres", "full-load", False), ("mongodb", "full-load", True), ("mongodb", "cdc", False),
          ("dynamodb", "full-load", True), ("dynamodb", "cdc", False)}
_SOURCE_OF = {"ctid": "postgres", "_id": "mongodb", "scan_segment": "dynamodb"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_release_state_file_round_trips_byte_for_byte(path: Path) -> None:
    text = path.read_bytes()
    state = load_state(path)
    assert state.to_dict() == json.loads(text)
    assert state_to_json(state) == text  # the same keys in the same order
    for ss, entry in zip(state.streams, json.loads(text)["streams"]):
        inner = entry["stream_state"]
        assert {key: getattr(ss, key) for key in TYPED_KEYS if key in inner} == \
            {key: inner[key] for key in TYPED_KEYS if key in inner}
        assert all(getattr(ss, key) is None for key in TYPED_KEYS if key not in inner)
        assert ss.source == {k: v for k, v in inner.items() if k not in (*TYPED_KEYS, "cursor_field", "chunks")}
        assert ss.copy().to_dict() == entry


def test_the_release_files_cover_every_source_and_phase() -> None:
    seen = set()
    for path in FILES:
        for ss in load_state(path).streams:
            column = "ctid" if isinstance(ss.chunk_column, list) else ss.chunk_column  # key columns: postgres
            pending = any(c.status != "succeed" for c in ss.chunks or [])
            seen.add((_SOURCE_OF.get(column), ss.sync_type, pending))
    assert PHASES <= seen, PHASES - seen
