"""Discovery: every collection of the configured database becomes one catalog stream."""

from __future__ import annotations

from typing import Any

from olake_cli.core.errors import ConfigError
from olake_cli.core.stream_filter import keep_streams
from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS, infer_json_schema
from olake_cli.sources.mongodb.connection import MongoSettings, server_hello

# x-olake-type -> the $type aliases of its bracket: a cursor's values must be ordered by MongoDB
CURSOR_BRACKETS: dict[str, tuple[str, ...]] = {
    "int32": ("int", "long", "double", "decimal"), "int64": ("int", "long", "double", "decimal"),
    "float64": ("int", "long", "double", "decimal"), "decimal128": ("int", "long", "double", "decimal"),
    "datetime_ms": ("date",), "objectid": ("objectId",),
}
CDC_NEEDS_REPLICA_SET = ("change streams (sync mode cdc) need a replica set or a sharded cluster; convert "
                         "to a one-node replica set: start mongod with --replSet rs0 and run rs.initiate()")


def supports_change_streams(hello: dict[str, Any]) -> bool:
    """Whether the deployment answering ``hello`` has change streams (replica set or mongos)."""
    return bool(hello.get("setName")) or hello.get("msg") == "isdbgrid"


def require_database(client, settings: MongoSettings) -> None:
    """A ConfigError when the configured database does not exist (MongoDB lists a database once it has a
    collection): ``check``, ``discover`` and every run refuse a misspelt one instead of finding nothing in
    it. Nothing is said when the user may not list databases."""
    from pymongo.errors import OperationFailure

    try:
        databases = client.list_database_names()
    except OperationFailure:
        return
    if settings.database not in databases:
        shown = ", ".join(sorted(d for d in databases if d not in ("admin", "config", "local"))[:10])
        raise ConfigError(f"mongodb: database '{settings.database}' does not exist on {settings.where()} "
                          f"(it has no collections); databases: {shown or 'none'}; fix 'database'")


def list_collections(db, settings: MongoSettings, restrict: bool = True) -> list[str]:
    """The names of the database's ordinary collections (no views, no ``system.*``), sorted;
    restricted to ``collections`` when configured (a ConfigError names one that does not exist) and
    to what the ``include``/``exclude`` patterns keep."""
    names = sorted(info["name"] for info in db.list_collections(filter={"type": "collection"})
                   if not info["name"].startswith("system."))
    if settings.collections and restrict:
        missing = [c for c in settings.collections if c not in names]
        if missing:
            raise ConfigError(f"mongodb: collection(s) {', '.join(missing)} do not exist in database "
                              f"'{settings.database}'; fix 'collections'")
        names = [n for n in names if n in settings.collections]
    if restrict:
        found = [(settings.database, n) for n in names]
        names = [n for _, n in keep_streams(found, settings.include, settings.exclude, "mongodb")]
    return names


def sample_documents(coll, sample_size: int) -> list[dict]:
    """Up to ``sample_size`` documents: all of a small collection, else a random ``$sample``."""
    coll = coll.with_options(codec_options=BSON_CODEC_OPTIONS)
    if coll.estimated_document_count() <= sample_size:
        return list(coll.find({}, limit=sample_size))
    return list(coll.aggregate([{"$sample": {"size": sample_size}}], allowDiskUse=True))


def cursor_candidates(json_schema: dict) -> list[str]:
    """Top-level fields whose type MongoDB orders within one bracket (usable as incremental cursor)."""
    return [name for name, prop in json_schema.get("properties", {}).items()
            if isinstance(prop, dict) and prop.get("x-olake-type") in CURSOR_BRACKETS]


def discover_stream(db, name: str, settings: MongoSettings, change_streams: bool) -> dict[str, Any]:
    """One catalog stream for a collection: schema inferred from a sample, ``_id`` key, sync modes."""
    documents = sample_documents(db[name], settings.sample_size)
    json_schema = infer_json_schema(documents)
    candidates = cursor_candidates(json_schema)
    modes = ["full_refresh"] + (["incremental"] if candidates else []) + (["cdc"] if change_streams else [])
    extras: dict[str, Any] = {"collection": name, "sampled_documents": len(documents)}
    if not change_streams:
        extras["cdc_unsupported"] = CDC_NEEDS_REPLICA_SET
    return {
        "name": name,
        "namespace": settings.database,
        "json_schema": json_schema,
        "supported_sync_modes": modes,
        "source_defined_primary_key": [["_id"]],
        "default_cursor_field": [],  # the user picks one of cursor_candidates for incremental
        "cursor_candidates": candidates,
        "selected": True,
        "sync_mode": "full_refresh",
        "x-olake": extras,
    }


def discover_catalog(client, settings: MongoSettings) -> dict[str, Any]:
    """The catalog object (``{"streams": [...]}``) of every collection of the configured database (a
    ConfigError when it does not exist)."""
    change_streams = supports_change_streams(server_hello(client))
    require_database(client, settings)
    db = client[settings.database]
    return {"streams": [discover_stream(db, name, settings, change_streams)
                        for name in list_collections(db, settings)]}
