"""Which optional abilities (the capabilities of core/contracts.py, and NewStreamChecks of core/live_discovery.py)
each connector of the registry offers.

``OFFERED`` is the declaration, per registry entry: what the connector itself offers and what the objects
it hands out offer (a destination's chunk sink and its stream targets, a source's change capture and
chunk readers). The
test asserts it against ``isinstance`` (``issubclass`` for a chunk reader class: a reader needs a live
source to exist), so a new capability, or a new connector, must be declared here first.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from olake_cli.core import contracts
from olake_cli.core.catalog import parse_catalog
from olake_cli.core.live_discovery import NewStreamChecks
from olake_cli.core.registry import DESTINATIONS, SOURCES, make_destination, make_source

READER_CAPABILITIES = [contracts.WireColumnsReader, contracts.ResumableReader, contracts.BinaryCopyReader]
CAPABILITIES = [contracts.SlotOwner, *READER_CAPABILITIES, contracts.BinaryCopySink, contracts.SpillingTarget,
                contracts.ChangeAppender, contracts.BackgroundCommits, contracts.RunSummary,
                contracts.FollowingCapture, contracts.SourceBacklog, contracts.FollowCadence, NewStreamChecks]
OFFERED = {
    ("source", "postgres"): {"SlotOwner", "WireColumnsReader", "BinaryCopyReader", "FollowingCapture", "SourceBacklog",
                             "NewStreamChecks"},
    ("source", "mongodb"): {"FollowingCapture"},
    ("source", "dynamodb"): {"ResumableReader", "FollowingCapture"},
    ("source", "kafka"): {"FollowingCapture"},
    ("destination", "parquet"): {"SpillingTarget", "ChangeAppender", "FollowCadence"},
    ("destination", "iceberg"): {"SpillingTarget", "FollowCadence"},
    ("destination", "postgres"): {"BinaryCopySink", "BackgroundCommits", "RunSummary", "FollowCadence"},
    ("destination", "kafka"): {"FollowCadence"},
}
CONFIGS = {"postgres": {"host": "127.0.0.1", "port": 5432, "database": "d", "username": "u", "password": "p",
                        "replication_slot": "s", "publication": "p"},
           "mongodb": {"uri": "mongodb://127.0.0.1:27017", "database": "d"},
           "dynamodb": {"region": "us-east-1", "tables": ["t"]},
           "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["t"]}}
STREAM = {"name": "t", "namespace": "public", "sync_mode": "cdc", "supported_sync_modes": ["cdc"],
          "source_defined_primary_key": [["id"]],
          "json_schema": {"type": "object", "properties": {"id": {"type": ["integer"], "x-olake-type": "int32"}}}}


def test_every_capability_and_every_connector_is_declared():
    assert {c.__name__ for c in CAPABILITIES} == {
        name for name, value in vars(contracts).items()
        if getattr(value, "_is_runtime_protocol", False) and name not in ("ChunkReader",)} | {"NewStreamChecks"}
    assert set(OFFERED) == {("source", k) for k in SOURCES} | {("destination", k) for k in DESTINATIONS}


@pytest.mark.parametrize("kind", list(SOURCES))
def test_a_source_offers_what_it_declares(kind):
    source = make_source(kind, {"type": kind, **CONFIGS[kind]})
    capture = source.change_capture(parse_catalog({"streams": [STREAM]}).streams, lambda line: None)
    offered = {c.__name__ for c in CAPABILITIES for o in (source, capture) if isinstance(o, c)}
    for reader in _reader_classes(f"olake_cli.sources.{kind}") if kind != "kafka" else []:  # (a topic: no chunks)
        offered |= {c.__name__ for c in READER_CAPABILITIES if issubclass(reader, c)}
    assert offered == OFFERED[("source", kind)]


@pytest.mark.parametrize("kind", list(DESTINATIONS))
def test_a_destination_offers_what_it_declares(kind, request, tmp_path):
    if kind == "postgres":
        config = request.getfixturevalue("pg_target").destination_config(request.getfixturevalue("target_db"))
    elif kind == "kafka":
        config = request.getfixturevalue("kafka_broker").config(topic_prefix=request.getfixturevalue("kafka_prefix"))
    else:
        config = {"type": kind, "path": str(tmp_path / "out")}
    destination = make_destination(kind, config, lambda line: None)
    destination.open(parse_catalog({"streams": [STREAM]}))
    objects = [destination, destination.chunk_sink(), destination.stream_target(("public", "t"))]
    offered = {c.__name__ for c in CAPABILITIES for o in objects if isinstance(o, c)}
    assert offered == OFFERED[("destination", kind)]


def _reader_classes(package: str) -> list[type]:
    """The chunk reader classes defined in a source's package."""
    found = []
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        loaded = importlib.import_module(f"{package}.{module.name}")
        found += [cls for _, cls in inspect.getmembers(loaded, inspect.isclass)
                  if cls.__module__ == loaded.__name__ and issubclass(cls, contracts.ChunkReader)]
    assert found, f"{package} defines no chunk reader"
    return found

