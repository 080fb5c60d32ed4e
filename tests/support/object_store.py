"""An S3-compatible endpoint for tests (moto's server mode, ``moto_server``) and buckets on it.

moto keeps objects in the server's memory and answers the S3 API over HTTP on loopback, so a
destination writes to ``s3://bucket/...`` through the same client code (pyarrow's S3 filesystem,
pyiceberg's FileIO) as against AWS or MinIO, with the endpoint and credentials from its config.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REGION = "us-east-1"
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "s3cret-4711-not-in-any-output"


@dataclass
class MotoServer:
    """A running ``moto_server``: its endpoint, and the process to stop."""

    endpoint: str
    process: subprocess.Popen

    def client(self, service: str = "s3"):
        """A boto3 client of the endpoint."""
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY)

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name``; returns it."""
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key in ``bucket`` under ``prefix``."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def stop(self) -> None:
        """Stop the server (this process started it)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


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
