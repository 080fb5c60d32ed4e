"""Discovery: each table the config names becomes one catalog stream, its schema inferred from a sample."""

from __future__ import annotations

from typing import Any

from olake_cli.sources.dynamodb.connection import DynamoSettings, aws_error
from olake_cli.sources.dynamodb.schema import infer_json_schema
from olake_cli.sources.dynamodb.tables import TableInfo, configured_tables


def sample_items(client, settings: DynamoSettings, table: str) -> list[dict]:
    """Up to ``sample_size`` items: the first pages of a scan (DynamoDB scans in hash order of the
    partition key, so these are spread over the key space)."""
    items: list[dict] = []
    kwargs: dict[str, Any] = {"TableName": table}
    try:
        while len(items) < settings.sample_size:
            page = client.scan(**kwargs, Limit=settings.sample_size - len(items))
            items += page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    except Exception as exc:
        raise aws_error(settings, exc, f"sampling table '{table}'") from None
    return items


def discover_stream(client, settings: DynamoSettings, info: TableInfo) -> dict[str, Any]:
    """One catalog stream: schema from a sample, the key schema as primary key, sync modes."""
    items = sample_items(client, settings, info.name)
    problem = info.stream_problem()
    extras: dict[str, Any] = {"table": info.name, "sampled_items": len(items),
                              "stream_view_type": info.stream_view}
    if problem is not None:
        extras["cdc_unsupported"] = problem
    return {
        "name": info.name,
        "namespace": settings.namespace,
        "json_schema": infer_json_schema(items, list(info.key_attributes)),
        "supported_sync_modes": ["full_refresh"] + ([] if problem else ["cdc"]),
        "source_defined_primary_key": [[name] for name in info.key_names],
        "default_cursor_field": [],
        "selected": True,
        "sync_mode": "full_refresh" if problem else "cdc",
        "x-olake": extras,
    }


def discover_catalog(settings: DynamoSettings) -> dict[str, Any]:
    """The catalog object (``{"streams": [...]}``) of every table the config names."""
    client = settings.client()
    return {"streams": [discover_stream(client, settings, info) for info in configured_tables(client, settings)]}
