"""A throwaway PostgreSQL cluster started from the installed server binaries (wal_level=logical).

``start_cluster(tls=ServerTls(...))`` starts one that serves TLS with the given certificate and accepts
TCP connections only over TLS (``hostssl`` lines in pg_hba.conf), so a plain connection is refused.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass


def find_pg_bin() -> str:
    """Directory holding initdb/pg_ctl: $OLAKE_PG_BIN, else the newest /usr/lib/postgresql/*/bin."""
    env = os.environ.get("OLAKE_PG_BIN")
    if env:
        return env
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    for path in reversed(candidates):
        if os.path.exists(os.path.join(path, "initdb")):
            return path
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(found)
    raise RuntimeError("PostgreSQL server binaries not found; install postgresql or set OLAKE_PG_BIN")


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class ServerTls:
    """TLS for a test cluster: the server's certificate and key (PEM files, copied into the cluster).

    With ``ca_file``, client certificates signed by that CA are verified, and the roles in
    ``cert_users`` must present one whose CN is their name (``clientcert=verify-full``) besides
    their password.
    """

    cert_file: str
    key_file: str
    ca_file: str | None = None
    cert_users: tuple[str, ...] = ()


@dataclass
class PgCluster:
    """A running throwaway cluster; ``stop()`` removes it."""

    datadir: str
    port: int
    bin_dir: str
    run_as: str | None
    password: str = "olake-secret"
    superuser: str = "olake"
    hostssl_only: bool = False  # TCP connections must use TLS (started with ``tls``)

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def dsn(self, database: str = "postgres", user: str | None = None, password: str | None = None) -> str:
        """A libpq connection string for this cluster."""
        return (f"host={self.host} port={self.port} dbname={database} "
                f"user={user or self.superuser} password={password or self.password}")

    def uri(self, database: str = "postgres") -> str:
        """A postgresql:// URI (for ADBC) for this cluster."""
        return f"postgresql://{self.superuser}:{self.password}@{self.host}:{self.port}/{database}"

    def source_config(self, database: str, **extra: object) -> dict:
        """An olake postgres source config pointing at ``database``."""
        cfg = {"type": "postgres", "host": self.host, "port": self.port, "database": database,
               "username": self.superuser, "password": self.password}
        cfg.update(extra)
        return cfg

    def destination_config(self, database: str, **extra: object) -> dict:
        """An olake postgres destination config writing into ``database``."""
        cfg = {"type": "postgres", "host": self.host, "port": self.port, "database": database,
               "username": self.superuser, "password": self.password}
        cfg.update(extra)
        return cfg

    def _run(self, args: list[str], **kw) -> subprocess.CompletedProcess:
        if self.run_as:
            args = ["runuser", "-u", self.run_as, "--"] + args
        return subprocess.run(args, check=True, capture_output=True, text=True, **kw)

    def stop(self) -> None:
        """Stop the server and delete its data directory."""
        try:
            self._run([os.path.join(self.bin_dir, "pg_ctl"), "-D", self.datadir, "-m", "immediate", "stop"])
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(os.path.dirname(self.datadir), ignore_errors=True)


def start_cluster(extra_conf: dict[str, str] | None = None, tls: ServerTls | None = None) -> PgCluster:
    """initdb + pg_ctl start a cluster on a free port; as root, the server runs as user ``postgres``.

    With ``tls`` the server has ``ssl = on`` and accepts TCP connections only over TLS.
    """
    bin_dir = find_pg_bin()
    run_as = "postgres" if os.geteuid() == 0 else None
    base = tempfile.mkdtemp(prefix="olake-pg-")
    datadir = os.path.join(base, "data")
    pwfile = os.path.join(base, "pw")
    cluster = PgCluster(datadir=datadir, port=free_port(), bin_dir=bin_dir, run_as=run_as)
    with open(pwfile, "w") as fh:
        fh.write(cluster.password)
    if run_as:
        ent = pwd.getpwnam(run_as)
        os.chown(base, ent.pw_uid, ent.pw_gid)
        os.chown(pwfile, ent.pw_uid, ent.pw_gid)
    cluster._run([os.path.join(bin_dir, "initdb"), "-D", datadir, "-U", cluster.superuser,
                  "--pwfile", pwfile, "-A", "scram-sha-256", "-E", "UTF8", "--locale", "C.UTF-8"])
    conf = {"port": str(cluster.port), "listen_addresses": "'127.0.0.1'", "wal_level": "logical",
            "max_replication_slots": "20", "max_wal_senders": "20", "fsync": "off",
            "synchronous_commit": "off", "full_page_writes": "off", "unix_socket_directories": f"'{base}'",
            "max_connections": "100", "shared_buffers": "256MB", "max_slot_wal_keep_size": "-1"}
    if tls is not None:
        conf.update(_configure_tls(cluster, base, tls))
    conf.update(extra_conf or {})
    with open(os.path.join(datadir, "postgresql.auto.conf"), "a") as fh:
        for key, value in conf.items():
            fh.write(f"{key} = {value}\n")
    cluster._run([os.path.join(bin_dir, "pg_ctl"), "-D", datadir, "-l", os.path.join(base, "log"),
                  "-w", "-t", "60", "start"])
    _wait_ready(cluster)
    return cluster


def _configure_tls(cluster: PgCluster, base: str, tls: ServerTls) -> dict[str, str]:
    """Copy the certificate files into the cluster (owned by the server's user, key 0600), allow TCP
    only through ``hostssl`` lines, and return the settings that turn TLS on."""
    files = {"server.crt": tls.cert_file, "server.key": tls.key_file}
    if tls.ca_file:
        files["client-ca.crt"] = tls.ca_file
    for name, source in files.items():
        target = os.path.join(base, name)
        shutil.copyfile(source, target)
        os.chmod(target, 0o600)
        if cluster.run_as:
            ent = pwd.getpwnam(cluster.run_as)
            os.chown(target, ent.pw_uid, ent.pw_gid)
    lines = ["local all all scram-sha-256"]
    for user in tls.cert_users:
        lines += [f"hostssl {db} {user} 127.0.0.1/32 scram-sha-256 clientcert=verify-full"
                  for db in ("all", "replication")]
    lines += [f"hostssl {db} all 127.0.0.1/32 scram-sha-256" for db in ("all", "replication")]
    with open(os.path.join(cluster.datadir, "pg_hba.conf"), "w") as fh:  # keeps the file's owner
        fh.write("\n".join(lines) + "\n")
    cluster.hostssl_only = True
    conf = {"ssl": "on", "ssl_cert_file": f"'{os.path.join(base, 'server.crt')}'",
            "ssl_key_file": f"'{os.path.join(base, 'server.key')}'"}
    if tls.ca_file:
        conf["ssl_ca_file"] = f"'{os.path.join(base, 'client-ca.crt')}'"
    return conf


def _wait_ready(cluster: PgCluster, timeout: float = 30.0) -> None:
    import psycopg

    deadline = time.time() + timeout
    while True:
        try:
            psycopg.connect(cluster.dsn(), connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def create_database(cluster: PgCluster, name: str) -> None:
    """CREATE DATABASE ``name`` (dropping it first if present)."""
    import psycopg

    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
