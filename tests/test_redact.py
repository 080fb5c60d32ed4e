"""Secrets are removed where they stand as values, and nothing else in the text changes."""

from __future__ import annotations

import pytest

from olake_cli.core.redact import is_secret_name, remove_secrets


@pytest.mark.parametrize("secret, text", [
    ("x", "postgres: unknown host 'nonexistent.invalid'; check 'host'"),
    ("o", "postgres: nothing accepts connections at 127.0.0.1:5432 (connection refused)"),
    ("in", "mongodb: no server answered within 10s; check 'uri' and firewalls"),
    ("127", "nothing accepts connections at 127.0.0.1:5432"),
    ("invalid", "unknown host 'no-such-host.invalid'"),
    ("no", "unknown host 'no-such-host.invalid'"),
    ("5432", "refused at 127.0.0.1:54321"),
])
def test_a_secret_inside_other_words_leaves_the_text_alone(secret, text):
    assert remove_secrets(text, [secret]) == text


def test_a_password_equal_to_the_user_name_keeps_the_user_name():
    text = "postgres: wrong username or password for user 'alice' (password authentication failed for user \"alice\")"
    assert remove_secrets(text, ["alice"], keep=["alice"]) == text
    uri = "cannot connect: postgresql://alice:alice@db:5432/shop"
    assert remove_secrets(uri, ["alice"], keep=["alice"]) == "cannot connect: postgresql://alice:***@db:5432/shop"


@pytest.mark.parametrize("text, expected", [
    ("connect postgresql://u:S3cret@db:5432/x?sslmode=require failed",
     "connect postgresql://u:***@db:5432/x?sslmode=require failed"),
    ("mongodb+srv://reader:p%40ss@cluster0.example.net/?tls=true",
     "mongodb+srv://reader:***@cluster0.example.net/?tls=true"),
    ("host=db port=5432 user=u password=S3cret dbname=x", "host=db port=5432 user=u password=*** dbname=x"),
    ("host=db password='two words' dbname=x", "host=db password='***' dbname=x"),
    ("?user=u&password=S3cret&sslmode=require", "?user=u&password=***&sslmode=require"),
    ('{"type": "rest", "token": "abc.def", "uri": "http://h"}', '{"type": "rest", "token": "***", "uri": "http://h"}'),
    ("{'s3.secret-access-key': 'K3y/x+y', 'warehouse': 's3://b'}", "{'s3.secret-access-key': '***', 'warehouse': 's3://b'}"),
    ("adls.account-key=abc credential=id:secret", "adls.account-key=*** credential=***"),
])
def test_values_of_uris_and_secret_options_are_removed_even_when_unknown(text, expected):
    assert remove_secrets(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("authentication failed for S3cret-pw.", "authentication failed for ***."),
    ("value 'S3cret-pw' rejected", "value '***' rejected"),
    ('value "S3cret-pw" rejected', 'value "***" rejected'),
    ("S3cret-pw", "***"),
    ("encoded p%40ss%2Fword here", "encoded *** here"),
    ("a:p@ss/word@b", "a:***@b"),
])
def test_a_known_secret_standing_as_a_token_is_removed(text, expected):
    assert remove_secrets(text, ["S3cret-pw", "p@ss/word"]) == expected


def test_prose_about_tokens_and_keys_is_kept():
    text = "mongodb: resume token: {'_data': '8263'} not found; primary key: id; tokens are kept"
    assert remove_secrets(text) == text


def test_secret_names():
    assert all(map(is_secret_name, ["password", "token", "s3.secret-access-key", "credential", "adls.account-key",
                                    "gcs.oauth2.token", "private_key"]))
    assert not any(map(is_secret_name, ["uri", "warehouse", "s3.endpoint", "type", "username", "keyspace"]))


def test_iceberg_catalog_secrets_are_removed_and_the_error_reads_as_it_is(tmp_path):
    """A REST catalog nobody serves: the token and credential are not printed, the words around them are."""
    from tests.support.cli import run_olake, write_json
    from tests.support.pgcluster import free_port
    from tests.test_bad_input import assert_one_error

    port = free_port()
    config = write_json(tmp_path / "dst.json", {"type": "iceberg", "catalog": {
        "type": "rest", "uri": f"http://127.0.0.1:{port}", "token": "tion", "credential": "client:Cred-S3cret"}})
    result = run_olake("check", "--config", config)
    assert_one_error(result, "config_error", f"cannot open the rest catalog 'olake' at http://127.0.0.1:{port}",
                     "Connection refused", secrets=("Cred-S3cret", "***"))
