"""A DynamoDB-compatible endpoint for tests (moto's server mode), tables on it, and an independent
oracle of what a destination row holds for a DynamoDB item.

moto implements tables, tags, parallel scans (``Segment``/``TotalSegments``) and Streams over HTTP, with
one shard per table. It does not emulate the 24-hour trimming of stream records, shard splits, or
records old enough to leave the safe zone; tests reach those paths through the stored position instead
(a position older than ``safe_zone_hours``, a shard id that does not exist, a stream that was replaced).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import random
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.support.cli import end_process, messages, run_olake, write_json
from tests.support.verify import latest_versions, read_parquet

REGION = "us-east-1"
NAMESPACE = "dynamodb"  # the namespace of every DynamoDB stream
CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing-secret"}


@dataclass
class MotoServer:
    """A running ``moto_server`` (DynamoDB, its Streams and S3 on one endpoint): its endpoint, and the
    process to stop."""

    endpoint: str
    process: subprocess.Popen

    def client(self, service: str = "dynamodb"):
        """A boto3 client of the endpoint."""
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=CREDENTIALS["access_key_id"],
                            aws_secret_access_key=CREDENTIALS["secret_access_key"])

    def config(self, **extra: Any) -> dict:
        """A ``dynamodb`` source config for this endpoint."""
        return {"type": "dynamodb", "region": REGION, "endpoint_url": self.endpoint, **CREDENTIALS, **extra}

    def stop(self) -> None:
        """Stop the server (this process started it)."""
        end_process(self.process)


def start_moto_server() -> MotoServer:
    """``moto_server -H 127.0.0.1 -p PORT`` on a free port, once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return MotoServer(f"http://127.0.0.1:{port}", process)
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("moto_server did not start within 60 s")


@contextmanager
def iam_enforced(server: MotoServer):
    """While inside, the server checks every request's signature and IAM permissions (moto's
    ``/moto-api/reset-auth``); the requests of other tests never see it."""
    import requests

    previous = requests.post(f"{server.endpoint}/moto-api/reset-auth", data=b"0").json()
    try:
        yield
    finally:
        requests.post(f"{server.endpoint}/moto-api/reset-auth",
                      data=previous["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"].encode())


def iam_user(server: MotoServer, name: str, actions: list[str]) -> dict[str, str]:
    """An IAM user allowed ``actions`` on every resource; its credentials as config fields."""
    iam = server.client("iam")
    iam.create_user(UserName=name)
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}
    iam.put_user_policy(UserName=name, PolicyName="olake", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"access_key_id": key["AccessKeyId"], "secret_access_key": key["SecretAccessKey"]}


def create_table(client, name: str, sort_key: tuple[str, str] | None = ("sk", "N"),
                 stream: str | None = "NEW_AND_OLD_IMAGES", tags: dict[str, str] | None = None,
                 partition_key: tuple[str, str] = ("pk", "S")) -> None:
    """A table keyed by ``partition_key`` (and ``sort_key``), with a stream of ``stream`` view (None: off)."""
    keys = [partition_key] + ([sort_key] if sort_key else [])
    request: dict[str, Any] = {
        "TableName": name, "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": n, "KeyType": kind} for (n, _), kind in zip(keys, ("HASH", "RANGE"))],
        "AttributeDefinitions": [{"AttributeName": n, "AttributeType": t} for n, t in keys]}
    if stream:
        request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream}
    if tags:
        request["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
    client.create_table(**request)


def put_items(client, table: str, items: list[dict]) -> None:
    """Write items (low-level attribute values) in batches of 25."""
    for start in range(0, len(items), 25):
        batch = [{"PutRequest": {"Item": item}} for item in items[start:start + 25]]
        client.batch_write_item(RequestItems={table: batch})


def all_items(client, table: str) -> list[dict]:
    """Every item of the table now."""
    items, request = [], {"TableName": table}
    while True:
        page = client.scan(**request)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def expected_row(item: dict, json_schema: dict) -> dict:
    """The row a destination should hold for ``item``, built from the DynamoDB values alone (sets sorted)."""
    return {name: _expected(item.get(name), prop) for name, prop in json_schema["properties"].items()}


def _expected(value: dict | None, prop: dict) -> Any:
    olake_type = prop["x-olake-type"]
    if olake_type == "json":
        return None if value is None else json.loads(json.dumps(_dynamo_json(value)))
    if value is None or "NULL" in value:
        return None
    (tag, payload), = value.items()
    if olake_type.startswith("array<"):
        element = {**prop.get("items", {}), "x-olake-type": olake_type[6:-1]}
        members = payload if tag == "L" else [{tag[0]: m} for m in payload]
        values = [_expected(m, element) for m in members]
        return values if tag == "L" else sorted(values, key=repr)
    if olake_type == "document":
        return {name: _expected(payload.get(name), sub) for name, sub in prop["properties"].items()}
    if olake_type.startswith("decimal"):
        return Decimal(payload)
    if olake_type == "bytes":
        return bytes(payload)
    return payload  # string, bool, numeric (the text)


def _dynamo_json(value: dict) -> dict:
    (tag, payload), = value.items()
    if tag == "B":
        return {"B": base64.b64encode(bytes(payload)).decode()}
    if tag == "BS":
        return {"BS": [base64.b64encode(bytes(b)).decode() for b in payload]}
    if tag == "M":
        return {"M": {k: _dynamo_json(v) for k, v in payload.items()}}
    if tag == "L":
        return {"L": [_dynamo_json(v) for v in payload]}
    return {tag: payload}


def actual_row(row: dict, json_schema: dict) -> dict:
    """A destination row (Arrow ``to_pylist``) in :func:`expected_row`'s form: json parsed, sets sorted."""
    return {name: _actual(row[name], prop) for name, prop in json_schema["properties"].items()}


def _actual(value: Any, prop: dict) -> Any:
    olake_type = prop["x-olake-type"]
    if value is None:
        return None
    if olake_type == "json":
        return json.loads(value)
    if olake_type.startswith("array<"):
        element = {**prop.get("items", {}), "x-olake-type": olake_type[6:-1]}
        values = [_actual(v, element) for v in value]
        return values if prop.get("x-olake-dynamodb-type") == "L" else sorted(values, key=repr)
    if olake_type == "document":
        return {name: _actual(value.get(name), sub) for name, sub in prop["properties"].items()}
    return value


def every_type_items(count: int) -> list[dict]:
    """Items holding every DynamoDB type, consistent shapes (structs, lists) and mixed ones (json)."""
    items = []
    for i in range(count):
        item = {
            "pk": {"S": f"user#{i % 17}"}, "sk": {"N": str(10**37 + i) if i % 5 == 0 else str(i)},
            "s": {"S": ["plain", "ünïcode ✓", 'quote " and \\ slash', "tab\tnew\nline", ""][i % 5]},
            "price": {"N": ["12.5", "-0.125", "99999999999999999999999999999999999.999", "0", "7"][i % 5]},
            "huge": {"N": ["1E+100", "0.5", "-3"][i % 3]},
            "raw": {"B": bytes([i % 256, 0, 255])}, "ok": {"BOOL": i % 2 == 0},
            "tags": {"SS": [f"t{i}", "common"]}, "scores": {"NS": [str(i), "0.25"]},
            "blobs": {"BS": [b"\x00", bytes([i % 256 or 1, 7])]},
            "addr": {"M": {"city": {"S": f"c{i}"}, "zip": {"N": str(1000 + i)},
                           "geo": {"M": {"lat": {"N": "1.5"}, "ok": {"BOOL": True}}}}},
            "events": {"L": [{"M": {"at": {"N": str(i)}, "what": {"S": "x"}}}]},
            "words": {"L": [{"S": "a"}, {"S": f"w{i}"}]},
            "mixed": [{"S": "s"}, {"N": "1.5"}, {"L": [{"S": "a"}, {"N": "2"}]}, {"BS": [b"\x01"]}][i % 4],
            "varmap": {"M": {f"k{i % 3}": {"N": str(i)}}},
            "gone": {"NULL": True},
        }
        if i % 4 == 1:
            del item["ok"], item["addr"]  # missing attributes are null
        if i % 6 == 2:
            item["s"] = {"NULL": True}
        items.append(item)
    return items


def dynamo_source(tmp_path: Path, moto_server, table: str, name: str = "src", **extra) -> str:
    """A DynamoDB source config for ``table`` (2 segments, small pages and checkpoints) written to
    ``<name>.json``; ``extra`` overrides any field. Returns its path."""
    config = moto_server.config(**{"tables": [table], "segments": 2, "checkpoint_items": 40, "page_items": 20,
                                   **extra})
    return write_json(tmp_path / f"{name}.json", config)


def discovered_catalog(tmp_path: Path, src: str, mode: str) -> Path:
    """``discover`` of ``src`` with every stream set to ``mode``, written to ``catalog-<mode>.json``."""
    result = run_olake("discover", "--config", src)
    assert result.returncode == 0, result.stderr.decode()
    catalog = [m for m in messages(result.stdout) if m["type"] == "CATALOG"][0]["catalog"]
    for stream in catalog["streams"]:
        stream["sync_mode"] = mode
    path = tmp_path / f"catalog-{mode}.json"
    path.write_text(json.dumps(catalog))
    return path


def first_schema(catalog: Path) -> dict:
    """The json_schema of the catalog file's first stream."""
    return json.loads(catalog.read_text())["streams"][0]["json_schema"]


class ItemWriter(threading.Thread):
    """Puts, updates and deletes items of ``table(pk S, sk N, v N, note S)`` until stopped."""

    def __init__(self, moto_server, table: str, first_new: int, seed: int = 3, pause: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.client, self.table, self.next, self.pause = moto_server.client(), table, first_new, pause
        self.rng, self.stop_event, self.ops, self.error = random.Random(seed), threading.Event(), 0, None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.change()
                time.sleep(self.pause)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def change(self) -> None:
        """One put of a new item, update or delete of an existing one."""
        action, target = self.rng.random(), self.rng.randrange(self.next)
        key = {"pk": {"S": f"p{target % 13}"}, "sk": {"N": str(target)}}
        if action < 0.35:
            key = {"pk": {"S": f"p{self.next % 13}"}, "sk": {"N": str(self.next)}}
            self.client.put_item(TableName=self.table, Item={**key, "v": {"N": "0.5"}, "note": {"S": "new"}})
            self.next += 1
        elif action < 0.8:
            values = {":v": {"N": f"{self.ops}.5"}, ":n": {"S": f"u{self.ops}"}}
            self.client.update_item(TableName=self.table, Key=key, UpdateExpression="SET v = :v, note = :n",
                                    ExpressionAttributeValues=values)
        else:
            self.client.delete_item(TableName=self.table, Key=key)
        self.ops += 1

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)
        if self.error:
            raise self.error


def seed_accounts(moto_server, table: str, count: int) -> None:
    """A table of ``count`` items (pk S, sk N, v N, note S), its stream on."""
    create_table(moto_server.client(), table)
    put_items(moto_server.client(), table, [{"pk": {"S": f"p{i % 13}"}, "sk": {"N": str(i)}, "v": {"N": f"{i}.5"},
                                             "note": {"S": f"n{i}"}} for i in range(count)])


def _by_key(rows: list[dict]) -> dict:
    return {(row["pk"], str(row["sk"])): row for row in rows}


def assert_equals_table(rows: list[dict], moto_server, table: str, schema: dict) -> None:
    """The destination rows are the table's items, one each, value by value."""
    items = all_items(moto_server.client(), table)
    want = _by_key([expected_row(item, schema) for item in items])
    got = _by_key([actual_row(row, schema) for row in rows])
    assert len(rows) == len(items), f"{len(rows)} rows for {len(items)} items"
    assert got.keys() == want.keys()
    for key, row in want.items():
        assert got[key] == row, key


def parquet_current(root: Path, table: str) -> list[dict]:
    """The current rows of a stream's Parquet folder (newest version per key, deletes dropped)."""
    return latest_versions(read_parquet(str(root / NAMESPACE / table)), ["pk", "sk"]).to_pylist()


def age_position(state: Path, lake: Path, table: str, hours: int) -> dict:
    """Move the stored position of ``table``'s stream back by ``hours``: in the state file and in the
    Parquet destination's record at ``lake`` (its manifest), which a ``sync`` resumes from (moto never
    trims stream records, so the safe zone is reached this way). Returns the stream state as it was."""
    from olake_cli.destinations.parquet.paths import StreamPaths
    from olake_cli.sources.dynamodb.positions import time_ms, time_text

    saved = json.loads(state.read_text())
    before = json.loads(json.dumps(saved["streams"][0]["stream_state"]))
    manifest_path = Path(StreamPaths.of(str(lake), NAMESPACE, table).manifest)
    manifest = json.loads(manifest_path.read_text())
    for stream_state in (saved["streams"][0]["stream_state"], manifest["state"]["stream_state"]):
        stream_state["cursor_field"] = time_text(time_ms(stream_state["cursor_field"]) - hours * 3_600_000)
    state.write_text(json.dumps(saved))
    manifest_path.write_text(json.dumps(manifest))
    return before
