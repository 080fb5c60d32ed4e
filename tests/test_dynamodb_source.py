"""DynamoDB ``check`` and ``discover`` against a real endpoint (moto's server): by allow-list and by tags,
and bad configs failing with one clear line each (an unknown table, streams disabled or without images,
a wrong endpoint, refused credentials, a denied permission, both or neither of ``tables`` and ``tags``),
and the tags checked again when a run opens its session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import messages, run_olake, write_json
from tests.support.dynamo import CREDENTIALS, create_table, iam_enforced, iam_user, put_items
from tests.test_check_command import assert_check_failed, connection_statuses


def _config(tmp_path: Path, moto_server, **extra) -> str:
    return write_json(tmp_path / "src.json", moto_server.config(**extra))


def _discover(config: str) -> list[dict]:
    result = run_olake("discover", "--config", config)
    assert result.returncode == 0, result.stderr.decode()
    return [m for m in messages(result.stdout) if m["type"] == "CATALOG"][0]["catalog"]["streams"]


def test_check_and_discover_by_tags(moto_server, dynamo_table, tmp_path):
    client = moto_server.client()
    env = f"env-{dynamo_table}"  # the tag value of this test only: other tests' tables never match
    tags = {"olake-ingest": "yes", "olake-env": env}
    create_table(client, f"{dynamo_table}_a", tags=tags)
    create_table(client, f"{dynamo_table}_b", sort_key=None, stream="NEW_IMAGE", tags=tags)
    create_table(client, f"{dynamo_table}_other_env", tags={**tags, "olake-env": "prod"})
    create_table(client, f"{dynamo_table}_untagged")
    create_table(client, f"{dynamo_table}_no_stream", stream=None, tags=tags)
    put_items(client, f"{dynamo_table}_a", [{"pk": {"S": "x"}, "sk": {"N": str(i)}, "v": {"N": f"{i}.5"}}
                                            for i in range(5)])
    config = _config(tmp_path, moto_server, tags={"ingestion_key": "olake-ingest", "environment_key": "olake-env",
                                                  "environment_value": env})
    result = run_olake("check", "--config", config)
    assert result.returncode == 0, result.stderr.decode()
    status = connection_statuses(result.stdout)[0]
    assert status["status"] == "SUCCEEDED"
    assert f"2 table(s) readable with streams of new images: {dynamo_table}_a, {dynamo_table}_b" in status["message"]

    streams = _discover(config)
    assert [s["name"] for s in streams] == [f"{dynamo_table}_a", f"{dynamo_table}_b"]
    first, second = streams
    assert first["namespace"] == "dynamodb" and first["source_defined_primary_key"] == [["pk"], ["sk"]]
    assert second["source_defined_primary_key"] == [["pk"]]
    assert first["supported_sync_modes"] == ["full_refresh", "cdc"] and first["sync_mode"] == "cdc"
    assert first["json_schema"]["properties"]["v"]["x-olake-type"] == "decimal(38,1)"
    assert first["x-olake"]["sampled_items"] == 5


def test_check_and_discover_by_allow_list(moto_server, dynamo_table, tmp_path):
    client = moto_server.client()
    create_table(client, dynamo_table)
    create_table(client, f"{dynamo_table}_plain", stream=None)
    config = _config(tmp_path, moto_server, tables=[dynamo_table], namespace="shop")
    result = run_olake("check", "--config", config)
    assert result.returncode == 0, result.stderr.decode()
    assert f"1 table(s) readable with streams of new images: {dynamo_table}" in \
        connection_statuses(result.stdout)[0]["message"]
    # discover lists an allow-listed table without a stream, offering full_refresh only
    config = _config(tmp_path, moto_server, tables=[dynamo_table, f"{dynamo_table}_plain"], namespace="shop")
    streams = _discover(config)
    assert [(s["namespace"], s["name"]) for s in streams] == [("shop", dynamo_table), ("shop", f"{dynamo_table}_plain")]
    plain = streams[1]
    assert plain["supported_sync_modes"] == ["full_refresh"] and plain["sync_mode"] == "full_refresh"
    assert "has no stream enabled" in plain["x-olake"]["cdc_unsupported"]


def _bad_unknown_table(moto_server, name):
    return {"tables": [f"{name}_missing"]}, [f"table '{name}_missing' does not exist", "fix 'tables'"]


def _bad_streams_disabled(moto_server, name):
    create_table(moto_server.client(), name, stream=None)
    return {"tables": [name]}, [f"table '{name}' has no stream enabled", "update-table", "StreamEnabled=true"]


def _bad_keys_only(moto_server, name):
    create_table(moto_server.client(), name, stream="KEYS_ONLY")
    return {"tables": [name]}, [f"table '{name}' streams KEYS_ONLY", "NEW_IMAGE or NEW_AND_OLD_IMAGES"]


def _bad_endpoint(moto_server, name):
    from tests.support.pgcluster import free_port

    return ({"tables": [name], "endpoint_url": f"http://127.0.0.1:{free_port()}", "connect_timeout": 1},
            ["cannot reach http://127.0.0.1:", "check 'endpoint_url' and 'region'"])


def _bad_tables_and_tags(moto_server, name):
    return ({"tables": [name], "tags": {"ingestion_key": "a", "environment_key": "b", "environment_value": "c"}},
            ["give 'tables'", "or 'tags'", "exactly one of them"])


def _bad_no_tagged_table(moto_server, name):
    return ({"tags": {"ingestion_key": "a", "environment_key": "b", "environment_value": f"none-{name}"}},
            ["no table in", f"carries tag 'a' and tag 'b' = 'none-{name}'"])


@pytest.mark.parametrize("case", [_bad_unknown_table, _bad_streams_disabled, _bad_keys_only, _bad_endpoint,
                                  _bad_tables_and_tags, _bad_no_tagged_table])
def test_bad_configs_fail_with_one_clear_line(moto_server, dynamo_table, tmp_path, case):
    changes, needles = case(moto_server, dynamo_table)
    config = _config(tmp_path, moto_server, **changes)
    result = run_olake("check", "--config", config)
    assert_check_failed(result, *needles, secrets=(CREDENTIALS["secret_access_key"],),
                        failure_type="transient_error" if case is _bad_endpoint else "config_error")


def test_check_names_refused_credentials_and_denied_permissions(moto_server, dynamo_table, tmp_path):
    """An endpoint that checks signatures and IAM policies (moto's server with IAM enforced): wrong keys
    and a user missing a permission each get one line naming what to fix, the secret never shown."""
    create_table(moto_server.client(), dynamo_table)
    describe = ["dynamodb:DescribeTable", "dynamodb:ListTables"]
    reader = iam_user(moto_server, f"reader-{dynamo_table}", describe)
    scanner = iam_user(moto_server, f"scanner-{dynamo_table}", [*describe, "dynamodb:Scan"])
    wrong = {"access_key_id": reader["access_key_id"], "secret_access_key": "not-the-secret"}
    with iam_enforced(moto_server):
        results = [run_olake("check", "--config", _config(tmp_path, moto_server, tables=[dynamo_table], **user))
                   for user in (wrong, reader, scanner)]
    refused, no_scan, no_stream = results
    assert_check_failed(refused, "refused the credentials while describing table", "SignatureDoesNotMatch",
                        "check the access key and secret", secrets=("not-the-secret",))
    assert_check_failed(no_scan, f"access denied while scanning table '{dynamo_table}'", "dynamodb:Scan",
                        "grant the IAM permission it names", secrets=(reader["secret_access_key"],))
    assert_check_failed(no_stream, f"access denied while reading the stream of table '{dynamo_table}'",
                        "dynamodb:DescribeStream", "grant the IAM permission it names",
                        secrets=(scanner["secret_access_key"],))


def test_discover_of_an_unknown_table_fails_with_one_line(moto_server, dynamo_table, tmp_path):
    from tests.test_bad_input import assert_one_error

    config = _config(tmp_path, moto_server, tables=[dynamo_table])
    result = run_olake("discover", "--config", config)
    assert_one_error(result, "config_error", f"table '{dynamo_table}' does not exist",
                     secrets=(CREDENTIALS["secret_access_key"],))


def test_spec_prints_the_dynamodb_schema():
    result = run_olake("spec", "--source", "dynamodb")
    assert result.returncode == 0, result.stderr.decode()
    spec = json.loads(result.stdout)["spec"]["connectionSpecification"]
    assert {"region", "endpoint_url", "tables", "tags", "segments", "safe_zone_hours", "init_sync"} <= \
        set(spec["properties"])


def test_tags_are_checked_again_on_every_run(moto_server, dynamo_table):
    """DISCOVERY re-checked when a run opens its session: a table tagged since discover is named (not
    copied), a table of the catalog that lost its tags stops the run with one line."""
    from olake_cli.core.catalog import parse_catalog
    from olake_cli.core.errors import CatalogError
    from olake_cli.sources.dynamodb.source import DynamoSource

    client = moto_server.client()
    env = f"env-{dynamo_table}"
    tags = {"olake-ingest": "yes", "olake-env": env}
    create_table(client, dynamo_table, tags=tags)
    source = DynamoSource(moto_server.config(tags={"ingestion_key": "olake-ingest", "environment_key": "olake-env",
                                                   "environment_value": env}))
    streams = parse_catalog(source.discover()).streams
    assert [s.name for s in streams] == [dynamo_table]
    assert source.open_session(streams, print).warnings == []

    create_table(client, f"{dynamo_table}_new", tags=tags)
    assert source.open_session(streams, print).warnings == [
        f"dynamodb: table '{dynamo_table}_new' now carries tag 'olake-ingest' and tag 'olake-env' = '{env}' but is "
        "not in the catalog; run discover again to copy it"]

    arn = client.describe_table(TableName=dynamo_table)["Table"]["TableArn"]
    client.untag_resource(ResourceArn=arn, TagKeys=["olake-ingest"])
    with pytest.raises(CatalogError) as raised:
        source.open_session(streams, print)
    assert str(raised.value) == (f"catalog: stream 'dynamodb.{dynamo_table}': table '{dynamo_table}' no longer "
                                 f"carries tag 'olake-ingest' and tag 'olake-env' = '{env}'; fix the table or run "
                                 "discover again")
