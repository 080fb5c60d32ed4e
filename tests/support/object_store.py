"""Buckets on the tests' S3-compatible endpoint (moto's server mode: the ``moto_server`` fixture that
DynamoDB's tests share, tests/support/dynamo.py).

moto keeps objects in the server's memory and answers the S3 API over HTTP on loopback, so a
destination writes to ``s3://bucket/...`` through the same client code (pyarrow's S3 filesystem,
pyiceberg's FileIO) as against AWS or MinIO, with the endpoint and credentials from its config.
"""

from __future__ import annotations

from tests.support.dynamo import REGION, MotoServer  # noqa: F401 (REGION: one for every service)

ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "s3cret-4711-not-in-any-output"


def create_bucket(server: MotoServer, name: str) -> str:
    """Create bucket ``name`` on ``server``; returns it."""
    server.client("s3").create_bucket(Bucket=name)
    return name


def keys(server: MotoServer, bucket: str, prefix: str = "") -> list[str]:
    """Every object key in ``bucket`` under ``prefix``."""
    pages = server.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def parquet_config(server: MotoServer, bucket: str, prefix: str = "lake", **extra: object) -> dict:
    """A Parquet destination config writing into ``s3://bucket/prefix`` on ``server``."""
    return {"type": "parquet", "path": f"s3://{bucket}/{prefix}", "s3.endpoint": server.endpoint,
            "s3.region": REGION, "s3.access-key-id": ACCESS_KEY_ID, "s3.secret-access-key": SECRET_ACCESS_KEY,
            **extra}


def s3_filesystem(server: MotoServer):
    """pyarrow's S3 filesystem on ``server`` (what the README's reading snippet uses)."""
    from pyarrow import fs

    return fs.S3FileSystem(endpoint_override=server.endpoint, region=REGION, access_key=ACCESS_KEY_ID,
                           secret_key=SECRET_ACCESS_KEY)


def manifest_of(server: MotoServer, root: str, namespace: str, stream: str) -> dict | None:
    """The manifest of a stream of the Parquet destination at ``root`` (``bucket/prefix``), or None."""
    import json

    try:
        with s3_filesystem(server).open_input_stream(f"{root}/{namespace}/.{stream}.manifest.json") as handle:
            return json.loads(handle.read())
    except FileNotFoundError:
        return None


def parquet_rows(server: MotoServer, root: str, namespace: str, stream: str):
    """What a reader of a stream on S3 sees, as the README says to read it: the files its manifest
    lists (``live_files``), as one table (files with a widened column read under the widest schema)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    manifest = manifest_of(server, root, namespace, stream)
    files = [f"{root}/{namespace}/{name}" for name in (manifest or {}).get("live_files", [])]
    if not files:
        return None
    filesystem = s3_filesystem(server)
    dataset = ds.dataset(files, filesystem=filesystem, format="parquet")
    schema = pa.unify_schemas([f.physical_schema for f in dataset.get_fragments()], promote_options="permissive")
    return ds.dataset(files, filesystem=filesystem, format="parquet", schema=schema).to_table()


def unlisted_objects(server: MotoServer, bucket: str, prefix: str) -> list[str]:
    """Data objects under ``prefix`` that no stream's manifest lists as a live, loading or retired load, or
    as a retired file (pyarrow's empty ``folder/`` markers left by deletes hold nothing and are not counted)."""
    import posixpath

    found = [k for k in keys(server, bucket, prefix + "/") if not k.endswith("/")]
    manifests = {k: manifest_of(server, bucket, posixpath.dirname(k), posixpath.basename(k)[1:-len(".manifest.json")])
                 for k in found if k.endswith(".manifest.json")}
    known = set(manifests)
    for key, manifest in manifests.items():
        folder, stream = posixpath.dirname(key), posixpath.basename(key)[1:-len(".manifest.json")]
        for dir_id, load in manifest["loads"].items():
            known |= {f"{folder}/.{stream}%.{dir_id}/{name}" for name in load["files"]}
        known |= {k for k in found for dir_id in manifest["retired"] if k.startswith(f"{folder}/.{stream}%.{dir_id}/")}
        known |= {f"{folder}/.{stream}%.{dir_id}/{name}" for dir_id, names in manifest.get("retired_files", {}).items()
                  for name in names}
    return sorted(set(found) - known)


def iceberg_bucket_rows(catalog_properties: dict, namespace: str, name: str):
    """Every live row of an Iceberg table whose warehouse is in a bucket (pyiceberg, the catalog's
    properties as the destination config gives them)."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("olake", **catalog_properties).load_table((namespace, name)).scan().to_arrow()
