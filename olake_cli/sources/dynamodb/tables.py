"""Which tables a config names (DISCOVERY): an allow-list, or tag discovery; and what each table is
(key schema, stream), with the problems that stop reading it as one actionable line each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from olake_cli.core.errors import ConfigError
from olake_cli.sources.dynamodb.connection import DynamoSettings, aws_error, error_code

IMAGE_VIEWS = ("NEW_IMAGE", "NEW_AND_OLD_IMAGES")


@dataclass(frozen=True)
class TableInfo:
    """What DescribeTable says about a table."""

    name: str
    arn: str
    table_id: str  # TableId (or the creation time): a table dropped and created again differs
    key_attributes: tuple[tuple[str, str], ...]  # (name, S|N|B): partition key, then sort key
    stream_arn: str | None
    stream_view: str | None
    item_count: int | None

    @classmethod
    def of(cls, table: dict[str, Any]) -> TableInfo:
        """From DescribeTable's ``Table``."""
        types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
        keys = sorted(table["KeySchema"], key=lambda k: k["KeyType"] != "HASH")
        spec = table.get("StreamSpecification") or {}
        enabled = spec.get("StreamEnabled") and table.get("LatestStreamArn")
        return cls(name=table["TableName"], arn=table["TableArn"],
                   table_id=str(table.get("TableId") or table.get("CreationDateTime")),
                   key_attributes=tuple((k["AttributeName"], types[k["AttributeName"]]) for k in keys),
                   stream_arn=table["LatestStreamArn"] if enabled else None,
                   stream_view=spec.get("StreamViewType") if enabled else None,
                   item_count=table.get("ItemCount"))

    @property
    def key_names(self) -> tuple[str, ...]:
        """The key attribute names, partition key first."""
        return tuple(name for name, _ in self.key_attributes)

    def stream_problem(self) -> str | None:
        """Why change capture cannot read this table (one line saying what to do), or None."""
        fix = (f"enable it: aws dynamodb update-table --table-name {self.name} --stream-specification "
               "StreamEnabled=true,StreamViewType=NEW_AND_OLD_IMAGES")
        if self.stream_arn is None:
            return f"table '{self.name}' has no stream enabled (DynamoDB Streams); {fix}"
        if self.stream_view not in IMAGE_VIEWS:
            return (f"table '{self.name}' streams {self.stream_view}, which carries no item images; cdc needs "
                    f"NEW_IMAGE or NEW_AND_OLD_IMAGES (disable the stream, then {fix})")
        return None


def describe_table(client, settings: DynamoSettings, name: str) -> TableInfo:
    """The table's description; a ConfigError when it does not exist."""
    try:
        return TableInfo.of(client.describe_table(TableName=name)["Table"])
    except Exception as exc:
        if error_code(exc) == "ResourceNotFoundException":
            raise ConfigError(f"dynamodb: table '{name}' does not exist in {settings.where()}; fix 'tables' "
                              "(or the tags), or run discover again") from None
        raise aws_error(settings, exc, f"describing table '{name}'") from None


def table_names(client, settings: DynamoSettings) -> list[str]:
    """Every table of the account and region, sorted."""
    names: list[str] = []
    kwargs: dict[str, Any] = {}
    try:
        while True:
            page = client.list_tables(**kwargs)
            names += page.get("TableNames", [])
            if "LastEvaluatedTableName" not in page:
                return sorted(names)
            kwargs["ExclusiveStartTableName"] = page["LastEvaluatedTableName"]
    except Exception as exc:
        raise aws_error(settings, exc, "listing tables") from None


def table_tags(client, settings: DynamoSettings, info: TableInfo) -> dict[str, str]:
    """The table's tags as a dict."""
    tags: dict[str, str] = {}
    kwargs: dict[str, Any] = {"ResourceArn": info.arn}
    try:
        while True:
            page = client.list_tags_of_resource(**kwargs)
            tags.update((t["Key"], t["Value"]) for t in page.get("Tags", []))
            if "NextToken" not in page:
                return tags
            kwargs["NextToken"] = page["NextToken"]
    except Exception as exc:
        raise aws_error(settings, exc, f"reading the tags of table '{info.name}'") from None


def configured_tables(client, settings: DynamoSettings) -> list[TableInfo]:
    """The tables the config names: the allow-list (each must exist), or every table carrying the
    tags with streams enabled (at least one)."""
    if settings.tables is not None:
        return [describe_table(client, settings, name) for name in settings.tables]
    found = []
    for name in table_names(client, settings):
        info = describe_table(client, settings, name)
        if settings.tags.matches(table_tags(client, settings, info)) and info.stream_problem() is None:
            found.append(info)
    if not found:
        raise ConfigError(f"dynamodb: no table in {settings.where()} carries {settings.tags.describe()} with a "
                          "stream of new images enabled; tag the tables (aws dynamodb tag-resource) or fix "
                          "'tags'")
    return found


def still_configured(client, settings: DynamoSettings, info: TableInfo) -> str | None:
    """Why a table of the catalog no longer passes the config's tag filter (DISCOVERY re-checked on
    every run), or None (always None for an allow-list)."""
    if settings.tags is None:
        return None
    if not settings.tags.matches(table_tags(client, settings, info)):
        return f"table '{info.name}' no longer carries {settings.tags.describe()}"
    return info.stream_problem()
