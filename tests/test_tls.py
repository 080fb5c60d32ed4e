"""TLS to both sources against real servers with a self-signed CA, and the modes of the files olake creates.

The PostgreSQL cluster here accepts TCP connections only over TLS (``hostssl`` lines alone in pg_hba.conf),
so a full load that succeeds proves the Spark tasks' chunk scans (ADBC) used TLS too; one role must also
present a client certificate. The MongoDB server is SecantusDB serving TLS. Certificates are made with
the ``openssl`` command line in a folder whose name needs percent-encoding in a URI.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import psycopg
import pytest

from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import messages, run_olake, write_json
from tests.support.pgcluster import PgCluster
from tests.support.tls import CERT_USER, CERT_USER_PASSWORD, Certs
from tests.support.verify import assert_table_matches, read_parquet
from tests.test_bad_input import assert_one_error

MONGO_USER, MONGO_PASSWORD = "olake_tls", "Mongo-tls-pw-9"


# ----------------------------------------------------------------------------- PostgreSQL over TLS
# ``certs`` and ``tls_cluster`` (a cluster refusing TCP connections without TLS; CERT_USER must also
# present a client certificate) are session fixtures in conftest.py, shared with the PostgreSQL
# destination's TLS test.


def _pg_config(cluster: PgCluster, certs: Certs, **extra) -> dict:
    return cluster.source_config("tls_db", **{"sslmode": "verify-full", "sslrootcert": certs.ca, "chunk_rows": 700,
                                              **extra})


def _secrets(cluster: PgCluster) -> tuple[str, ...]:
    return (cluster.password, CERT_USER_PASSWORD)


def _assert_no_secret(*outputs: bytes, secrets: tuple[str, ...]) -> None:
    for output in outputs:
        for secret in secrets:
            assert secret.encode() not in output, "a password was printed"


def _assert_check_failed(result, *needles: str, secrets: tuple[str, ...]) -> str:
    line = assert_one_error(result, "config_error", *needles, secrets=secrets)
    out = messages(result.stdout)
    assert [m["type"] for m in out] == ["CONNECTION_STATUS", "TRACE"]
    assert out[0]["connectionStatus"]["status"] == "FAILED"
    return line


def _assert_items_copied(cluster: PgCluster, catalog: dict, folder: Path) -> None:
    stream = next(s for s in catalog["streams"] if s["name"] == "items")
    with psycopg.connect(cluster.dsn("tls_db"), autocommit=True) as conn:
        assert_table_matches(conn, "public", "items", stream["json_schema"], read_parquet(str(folder)))


def test_postgres_verify_full_check_and_full_load_through_tls(tls_cluster, certs, tmp_path):
    src = write_json(tmp_path / "src.json", _pg_config(tls_cluster, certs))
    check = run_olake("check", "--config", src)
    assert check.returncode == 0, check.stderr.decode()
    status = messages(check.stdout)[0]["connectionStatus"]
    assert status["status"] == "SUCCEEDED" and "tls_db" in status["message"]

    catalog = discover_catalog(src, tmp_path / "cat.json", {})
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    state = tmp_path / "st.json"
    piped = sync_once(src, tmp_path / "cat.json", dst, state)  # 5 chunks, each an ADBC scan in a Spark task
    _assert_items_copied(tls_cluster, catalog, tmp_path / "out" / "public" / "items")
    assert len(list((tmp_path / "out" / "public" / "items").glob("*.parquet"))) >= 1
    _assert_no_secret(check.stdout, check.stderr, piped.read_stderr, piped.write_stdout, piped.write_stderr,
                      state.read_bytes(), secrets=_secrets(tls_cluster))


def test_postgres_client_certificate_reaches_every_connection(tls_cluster, certs, tmp_path):
    """CERT_USER is refused without its certificate: a sync whose tasks scan chunks proves they send it."""
    config = {**_pg_config(tls_cluster, certs, sslcert=certs.client_cert, sslkey=certs.client_key),
              "username": CERT_USER, "password": CERT_USER_PASSWORD}
    src = write_json(tmp_path / "src.json", config)
    check = run_olake("check", "--config", src)
    assert check.returncode == 0, check.stderr.decode()

    catalog = discover_catalog(src, tmp_path / "cat.json", {})
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                       "--state", str(tmp_path / "st.json"))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    _assert_items_copied(tls_cluster, catalog, tmp_path / "out" / "public" / "items")
    _assert_no_secret(check.stdout, check.stderr, result.stdout, result.stderr, secrets=_secrets(tls_cluster))

    without = write_json(tmp_path / "nocert.json",
                         {k: v for k, v in config.items() if k not in ("sslcert", "sslkey")})
    _assert_check_failed(run_olake("check", "--config", without), "refuses the client certificate", "'sslcert'",
                         f"127.0.0.1:{tls_cluster.port}", secrets=_secrets(tls_cluster))


def test_postgres_tls_failures_are_one_line(tls_cluster, pg_cluster, certs, tmp_path):
    secrets = _secrets(tls_cluster) + (pg_cluster.password,)
    where = f"127.0.0.1:{tls_cluster.port}"

    wrong_ca = write_json(tmp_path / "wrong-ca.json", _pg_config(tls_cluster, certs, sslrootcert=certs.other_ca))
    line = _assert_check_failed(run_olake("check", "--config", wrong_ca), where, "does not verify",
                                "'sslrootcert'", secrets=secrets)
    assert "certificate verify failed" in line
    assert_one_error(run_olake("discover", "--config", wrong_ca), "config_error", where, "does not verify",
                     secrets=secrets)
    # require with a root certificate verifies the CA too (libpq: like verify-ca)
    required = write_json(tmp_path / "required.json", _pg_config(tls_cluster, certs, sslmode="require",
                                                                  sslrootcert=certs.other_ca))
    _assert_check_failed(run_olake("check", "--config", required), "does not verify", secrets=secrets)

    plain = write_json(tmp_path / "plain.json", {**tls_cluster.source_config("tls_db"), "sslmode": "disable"})
    _assert_check_failed(run_olake("check", "--config", plain), where, "only over TLS", "'sslmode'", "'disable'",
                         secrets=secrets)
    assert_one_error(run_olake("discover", "--config", plain), "config_error", "only over TLS", secrets=secrets)

    no_root = write_json(tmp_path / "no-root.json", {**tls_cluster.source_config("tls_db"), "sslmode": "verify-ca"})
    env_home = os.environ.get("HOME", "")
    if not os.path.exists(os.path.join(env_home, ".postgresql", "root.crt")):
        _assert_check_failed(run_olake("check", "--config", no_root), "'sslrootcert'", secrets=secrets)

    not_tls = write_json(tmp_path / "not-tls.json", pg_cluster.source_config("postgres", sslmode="require"))
    _assert_check_failed(run_olake("check", "--config", not_tls), f"127.0.0.1:{pg_cluster.port}",
                         "does not offer TLS", "'sslmode'", secrets=secrets)


def test_postgres_tls_file_settings_are_config_errors(tls_cluster, certs, tmp_path):
    missing = str(tmp_path / "nowhere" / "ca.crt")
    for field, value, needle in (("sslrootcert", missing, "no such file"), ("sslcert", str(tmp_path), "a directory"),
                                 ("sslkey", missing, "no such file")):
        extra = {"sslcert": certs.client_cert, "sslkey": certs.client_key, field: value}
        config = write_json(tmp_path / f"{field}.json", _pg_config(tls_cluster, certs, **extra))
        _assert_check_failed(run_olake("check", "--config", config), f"'{field}'", value, needle,
                             secrets=_secrets(tls_cluster))
    alone = write_json(tmp_path / "alone.json", _pg_config(tls_cluster, certs, sslcert=certs.client_cert))
    _assert_check_failed(run_olake("check", "--config", alone), "'sslcert' and 'sslkey' together",
                         secrets=_secrets(tls_cluster))


def test_postgres_settings_pass_tls_to_psycopg_and_the_adbc_uri(certs):
    from urllib.parse import parse_qs, urlsplit

    from olake_cli.sources.postgres.connection import PostgresSettings

    settings = PostgresSettings.from_config({"host": "db", "database": "d", "username": "u", "password": "p&w",
                                             "sslmode": "verify-full", "sslrootcert": certs.ca,
                                             "sslcert": certs.client_cert, "sslkey": certs.client_key})
    info = settings.conninfo()
    assert (info["sslmode"], info["sslrootcert"], info["sslcert"], info["sslkey"]) == (
        "verify-full", certs.ca, certs.client_cert, certs.client_key)
    query = parse_qs(urlsplit(settings.uri()).query)  # percent-decoded, as libpq reads it
    assert {k: v[0] for k, v in query.items() if k.startswith("ssl")} == {
        "sslmode": "verify-full", "sslrootcert": certs.ca, "sslcert": certs.client_cert, "sslkey": certs.client_key}
    assert " " not in settings.uri() and "&keys" not in settings.uri()
    system = PostgresSettings.from_config({"host": "db", "database": "d", "username": "u", "sslrootcert": "system"})
    assert system.conninfo()["sslrootcert"] == "system"
    relative = os.path.relpath(certs.ca)
    assert PostgresSettings.from_config({"host": "db", "database": "d", "username": "u",
                                         "sslrootcert": relative}).sslrootcert == certs.ca


# ----------------------------------------------------------------------------- MongoDB over TLS


def _start_tls_mongo(tmp_path: Path, certs: Certs, require_client_cert: bool = False):
    from secantus import SecantusDBServer

    server = SecantusDBServer(storage_path=str(tmp_path), tls_cert_file=certs.server_cert,
                              tls_key_file=certs.server_key, tls_ca_file=certs.ca if require_client_cert else None,
                              tls_require_client_cert=require_client_cert)
    server.start()
    return server


def _host(uri: str) -> str:
    return uri.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]


@pytest.fixture(scope="module")
def tls_mongo(certs, tmp_path_factory):
    """SecantusDB serving TLS only, with a password user and a small collection."""
    server = _start_tls_mongo(tmp_path_factory.mktemp("secantus-tls"), certs)
    try:
        from pymongo import MongoClient

        with MongoClient(server.uri, tls=True, tlsCAFile=certs.ca, uuidRepresentation="standard",
                         datetime_conversion="DATETIME_MS") as client:
            client.admin.command("createUser", MONGO_USER, pwd=MONGO_PASSWORD, roles=["readAnyDatabase"])
            client.tlsdb.things.insert_many(
                [{"_id": i, "name": f"thing {i}", "n": i * 1.5, "sub": {"a": i, "b": [i, i + 1]}}
                 for i in range(900)])
        yield server
    finally:
        server.stop()


def _mongo_config(server, ca: str, **extra) -> dict:
    return {"type": "mongodb", "hosts": [_host(server.uri)], "username": MONGO_USER, "password": MONGO_PASSWORD,
            "database": "tlsdb", "tls_ca_file": ca, "chunk_documents": 200, "connect_timeout": 3, **extra}


def test_mongodb_check_and_full_load_over_tls(tls_mongo, certs, tmp_path):
    from tests.test_e2e_mongo import _assert_matches_source

    src = write_json(tmp_path / "src.json", _mongo_config(tls_mongo, certs.ca))
    check = run_olake("check", "--config", src)
    assert check.returncode == 0, check.stderr.decode()
    assert messages(check.stdout)[0]["connectionStatus"]["status"] == "SUCCEEDED"

    catalog = discover_catalog(src, tmp_path / "cat.json", {})
    stream = next(s for s in catalog["streams"] if s["name"] == "things")
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                       "--state", str(tmp_path / "st.json"))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    from pymongo import MongoClient

    with MongoClient(tls_mongo.uri, tls=True, tlsCAFile=certs.ca, uuidRepresentation="standard",
                     datetime_conversion="DATETIME_MS") as client:
        docs = list(client.tlsdb.things.find())
    _assert_matches_source(tmp_path / "out" / "tlsdb" / "things", docs, stream)
    _assert_no_secret(check.stdout, check.stderr, result.stdout, result.stderr,
                      (tmp_path / "st.json").read_bytes(), secrets=(MONGO_PASSWORD,))


def test_mongodb_tls_failures_are_one_line(tls_mongo, certs, tmp_path):
    where = _host(tls_mongo.uri)
    wrong_ca = write_json(tmp_path / "wrong-ca.json", _mongo_config(tls_mongo, certs.other_ca))
    line = _assert_check_failed(run_olake("check", "--config", wrong_ca), where, "does not verify",
                                "'tls_ca_file'", secrets=(MONGO_PASSWORD,))
    assert "certificate verify failed" in line
    assert_one_error(run_olake("discover", "--config", wrong_ca), "config_error", "does not verify",
                     secrets=(MONGO_PASSWORD,))

    plain = {k: v for k, v in _mongo_config(tls_mongo, certs.ca).items() if k != "tls_ca_file"}
    _assert_check_failed(run_olake("check", "--config", write_json(tmp_path / "plain.json", plain)), where,
                         "'tls'", secrets=(MONGO_PASSWORD,))

    missing = write_json(tmp_path / "missing.json", _mongo_config(tls_mongo, str(tmp_path / "none.crt")))
    _assert_check_failed(run_olake("check", "--config", missing), "'tls_ca_file'", "no such file",
                         secrets=(MONGO_PASSWORD,))


def test_mongodb_client_certificate(certs, tmp_path):
    server = _start_tls_mongo(tmp_path / "mtls", certs, require_client_cert=True)
    try:
        from pymongo import MongoClient

        with MongoClient(server.uri, tls=True, tlsCAFile=certs.ca, tlsCertificateKeyFile=certs.client_pem) as client:
            client.mtls.coll.insert_one({"_id": 1})
        config = {"type": "mongodb", "uri": f"mongodb://{_host(server.uri)}/", "database": "mtls",
                  "tls_ca_file": certs.ca, "connect_timeout": 3}
        with_cert = write_json(tmp_path / "with.json", {**config, "tls_certificate_key_file": certs.client_pem})
        check = run_olake("check", "--config", with_cert)
        assert check.returncode == 0, check.stderr.decode()
        _assert_check_failed(run_olake("check", "--config", write_json(tmp_path / "without.json", config)),
                             _host(server.uri), "'tls_certificate_key_file'", secrets=())
    finally:
        server.stop()


# ----------------------------------------------------------------------------- file modes


def _created_modes(root: Path) -> dict[str, int]:
    """Permission bits of everything under ``root`` (root itself and symbolic links excluded: a link's own
    bits mean nothing), by relative path; folders end with '/'."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            if path.is_symlink():
                continue
            found[str(path.relative_to(root)) + ("/" if name in dirs else "")] = stat.S_IMODE(path.lstat().st_mode)
    return found


@pytest.fixture(scope="module")
def modes_db(pg_cluster) -> str:
    from tests.support.cdc import make_accounts
    from tests.support.pgcluster import create_database

    create_database(pg_cluster, "modes_db")
    make_accounts(pg_cluster.dsn("modes_db"), "acct", 2000)
    return "modes_db"


@pytest.fixture()
def loose_umask():
    """This process's umask at 022 for the test, so private modes can only come from olake itself."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.parametrize("destination", ["parquet", "iceberg"])
@pytest.mark.parametrize("umask,file_mode,dir_mode", [(None, 0o600, 0o700), ("022", 0o644, 0o755)])
def test_sync_creates_files_with_the_umask(pg_cluster, modes_db, tmp_path, monkeypatch, loose_umask, destination,
                                           umask, file_mode, dir_mode):
    """Everything a sync creates (state, data written by the Spark tasks, manifests, catalog) is private
    by default; OLAKE_UMASK=022 makes it readable by all."""
    if umask is None:
        monkeypatch.delenv("OLAKE_UMASK", raising=False)
    else:
        monkeypatch.setenv("OLAKE_UMASK", umask)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(modes_db, chunk_rows=500))
    discover_catalog(src, tmp_path / "cat.json", {})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    dst = write_json(tmp_path / "dst.json", {"type": destination, "path": str(run_dir / "out")})
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                       "--state", str(run_dir / "state.json"))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    modes = _created_modes(run_dir)
    data = [p for p in modes if p.endswith(".parquet")]
    assert len(data) >= 4, modes  # written by the Spark tasks (4 chunks)
    assert "state.json" in modes
    wrong = {p: oct(m) for p, m in modes.items() if m != (dir_mode if p.endswith("/") else file_mode)}
    assert not wrong, f"expected files {oct(file_mode)}, folders {oct(dir_mode)}: {wrong}"
    # an existing state file keeps its mode: tests/test_state.py (test_merge_and_save_..._keeps_file_mode)


def test_invalid_olake_umask_is_one_config_error_line(tmp_path, monkeypatch):
    monkeypatch.setenv("OLAKE_UMASK", "rw-r--r--")
    config = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    assert_one_error(run_olake("check", "--config", config), "config_error", "OLAKE_UMASK", "'rw-r--r--'")
    assert not (tmp_path / "out").exists()


def test_parse_umask():
    from olake_cli.core.errors import ConfigError
    from olake_cli.core.file_modes import parse_umask

    assert [parse_umask(v) for v in ("022", "0o027", "77", " 0007 ")] == [0o022, 0o027, 0o077, 0o007]
    for bad in ("", "8", "0x22", "1777", "-22", "abc"):
        with pytest.raises(ConfigError, match="OLAKE_UMASK"):
            parse_umask(bad)
