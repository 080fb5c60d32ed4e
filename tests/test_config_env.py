"""Secrets from the environment: ``{"password": {"env": "NAME"}}`` keeps them out of config files."""

from __future__ import annotations

import os
import subprocess

from tests.support.cli import messages, olake_cmd, olake_env, write_json


def _check(config: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(olake_cmd("check", "--config", config), capture_output=True, env=env, timeout=120)


def test_password_from_the_environment(pg_cluster, pg_db, tmp_path):
    config = write_json(tmp_path / "src.json", {**pg_cluster.source_config(pg_db), "password": {"env": "OLAKE_TEST_PW"}})
    ok = _check(config, {**olake_env(), "OLAKE_TEST_PW": pg_cluster.password})
    assert ok.returncode == 0, ok.stderr.decode()
    assert messages(ok.stdout)[0]["connectionStatus"]["status"] == "SUCCEEDED"
    assert pg_cluster.password not in (ok.stdout + ok.stderr).decode()
    env = {k: v for k, v in olake_env().items() if k != "OLAKE_TEST_PW"}
    missing = _check(config, env)
    assert missing.returncode != 0
    assert missing.stderr.decode().strip().splitlines() == [
        f"olake: error: {config}: field 'password' takes its value from the environment variable "
        f"'OLAKE_TEST_PW', which is not set"]
    wrong = _check(config, {**olake_env(), "OLAKE_TEST_PW": "not-the-password-4711"})
    assert wrong.returncode != 0 and b"not-the-password-4711" not in wrong.stdout + wrong.stderr
    assert os.environ.get("OLAKE_TEST_PW") is None


def test_a_nested_field_from_the_environment(pg_cluster, pg_db, tmp_path):
    """``{"env": ...}`` works at any depth: the ``spark`` section's spool secret; an unset one is named
    by its full path."""
    config = write_json(tmp_path / "src.json", {**pg_cluster.source_config(pg_db), "spark": {
        "spool": "s3://bucket/spool", "s3.access-key-id": "olake",
        "s3.secret-access-key": {"env": "OLAKE_TEST_SPOOL_SECRET"}}})
    ok = _check(config, {**olake_env(), "OLAKE_TEST_SPOOL_SECRET": "spool-s3cret-4711"})
    assert ok.returncode == 0, ok.stderr.decode()
    assert b"spool-s3cret-4711" not in ok.stdout + ok.stderr
    env = {k: v for k, v in olake_env().items() if k != "OLAKE_TEST_SPOOL_SECRET"}
    missing = _check(config, env)
    assert missing.returncode != 0
    assert missing.stderr.decode().strip().splitlines() == [
        f"olake: error: {config}: field 'spark.s3.secret-access-key' takes its value from the environment "
        f"variable 'OLAKE_TEST_SPOOL_SECRET', which is not set"]
