"""``olake pack``: the archive executors without olake run from (used for real by tests/test_spark_cluster.py)."""

from __future__ import annotations

import tarfile

from tests.support.cli import run_olake


def test_the_archive_holds_olake_and_its_packages_but_not_what_workers_have(olake_archive):
    with tarfile.open(olake_archive) as tar:
        names = set(tar.getnames())
    tops = {name.split("/")[0] for name in names}
    assert {"olake_cli", "psycopg", "adbc_driver_postgresql", "pymongo", "pyiceberg", "orjson", "jsonschema"} <= tops
    assert not tops & {"pyspark", "py4j", "pyarrow", "pandas", "numpy", "grpc"}
    assert "olake_cli/schemas/source-postgres.schema.json" in names  # package data comes along


def test_an_output_spark_cannot_unpack_fails_with_one_line(tmp_path):
    result = run_olake("pack", "--output", str(tmp_path / "olake.zip"))
    assert result.returncode != 0
    lines = result.stderr.decode().strip().splitlines()
    assert lines == [f"olake: error: pack: '{tmp_path / 'olake.zip'}' must end in .tar.gz or .tgz "
                     f"(Spark unpacks archives by their name)"]
    assert not (tmp_path / "olake.zip").exists()
