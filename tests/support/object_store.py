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
