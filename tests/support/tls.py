"""Certificates for TLS tests (a self-signed CA, made with the ``openssl`` command line) and a PostgreSQL
cluster that accepts TCP connections only over TLS; both are session fixtures in ``tests/conftest.py``
(``certs``, ``tls_cluster``), shared by the TLS tests of the sources and of the PostgreSQL destination.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.support.pgcluster import PgCluster, ServerTls, start_cluster

CERT_USER = "olake_cert"  # a role that must present a client certificate (CN = its name)
CERT_USER_PASSWORD = "Cert-user-pw-7"


@dataclass(frozen=True)
class Certs:
    ca: str            # the CA that signed the server and client certificates
    other_ca: str      # a CA that signed nothing here: verifying against it must fail
    server_cert: str   # CN localhost, SAN DNS:localhost and IP:127.0.0.1
    server_key: str
    client_cert: str   # CN olake_cert
    client_key: str
    client_pem: str    # client certificate and key in one file (MongoDB's tlsCertificateKeyFile)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _new_key_and_request(folder: Path, name: str, cn: str) -> tuple[str, str]:
    key, csr = folder / f"{name}.key", folder / f"{name}.csr"
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
             "-out", str(csr), "-subj", f"/CN={cn}")
    os.chmod(key, 0o600)
    return str(key), str(csr)


def _sign(folder: Path, name: str, csr: str, ca: str, ca_key: str, extensions: str) -> str:
    ext, cert = folder / f"{name}.ext", folder / f"{name}.crt"
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", str(cert),
             "-days", "2", "-extfile", str(ext))
    return str(cert)


def _new_ca(folder: Path, name: str) -> tuple[str, str]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}")
    return str(cert), str(key)


def make_certs(folder: Path) -> Certs:
    """A CA, another CA, a server certificate for localhost/127.0.0.1 and a client certificate for
    CERT_USER, all signed by the first CA, written into ``folder`` (which must exist)."""
    ca, ca_key = _new_ca(folder, "olake-test-ca")
    other_ca, _ = _new_ca(folder, "other-ca")
    server_key, server_csr = _new_key_and_request(folder, "server", "localhost")
    server_cert = _sign(folder, "server", server_csr, ca, ca_key,
                        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    client_key, client_csr = _new_key_and_request(folder, "client", CERT_USER)
    client_cert = _sign(folder, "client", client_csr, ca, ca_key,
                        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n")
    client_pem = folder / "client.pem"
    client_pem.write_text(Path(client_cert).read_text() + Path(client_key).read_text())
    os.chmod(client_pem, 0o600)
    return Certs(ca, other_ca, server_cert, server_key, client_cert, client_key, str(client_pem))


def start_tls_cluster(certs: Certs) -> PgCluster:
    """A cluster refusing TCP connections without TLS (CERT_USER must also present a client certificate),
    holding database ``tls_db`` with a 3000-row table ``items`` that CERT_USER may read."""
    cluster = start_cluster(tls=ServerTls(certs.server_cert, certs.server_key, ca_file=certs.ca,
                                          cert_users=(CERT_USER,)))
    try:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE tls_db")
            conn.execute(f"CREATE ROLE {CERT_USER} LOGIN PASSWORD '{CERT_USER_PASSWORD}'")
        with psycopg.connect(cluster.dsn("tls_db"), autocommit=True) as conn:
            conn.execute("""CREATE TABLE items (id bigint PRIMARY KEY, name text, price numeric(12,3),
                                                made timestamptz, raw bytea, tags text[])""")
            conn.execute("""INSERT INTO items SELECT g, 'item ' || g || ' é', g * 1.125,
                                                     '2024-01-01 00:00:00.123456+00'::timestamptz
                                                     + g * interval '1 minute', decode(md5(g::text), 'hex'),
                                                     ARRAY['t' || g, NULL]
                            FROM generate_series(1, 3000) g""")
            conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {CERT_USER}")
            ssl = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0]
            assert ssl, "the test's own connection should be TLS (libpq's sslmode=prefer)"
    except BaseException:
        cluster.stop()
        raise
    return cluster


__all__ = ["CERT_USER", "CERT_USER_PASSWORD", "Certs", "make_certs", "start_tls_cluster"]
