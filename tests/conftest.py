"""Shared fixtures: one throwaway PostgreSQL cluster and one local[2] Spark session per test run."""

from __future__ import annotations

import itertools
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.pgcluster import PgCluster, create_database, start_cluster  # noqa: E402

_db_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster() -> PgCluster:
    """A PostgreSQL cluster with wal_level=logical, shared by the whole run (track_commit_timestamp on:
    it is one node of the two-way replication tests)."""
    cluster = start_cluster({"track_commit_timestamp": "on"})
    yield cluster
    cluster.stop()


@pytest.fixture()
def pg_db(pg_cluster: PgCluster) -> str:
    """A fresh, empty database in the shared cluster; returns its name."""
    name = f"t{next(_db_counter)}_{os.getpid()}"
    create_database(pg_cluster, name)
    return name


@pytest.fixture(scope="session")
def pg_target() -> PgCluster:
    """A second cluster, the PostgreSQL destination's target (wal_level=logical, track_commit_timestamp
    on); started only when a test asks for it."""
    cluster = start_cluster({"track_commit_timestamp": "on"})
    yield cluster
    cluster.stop()


@pytest.fixture()
def target_db(pg_target: PgCluster) -> str:
    """A fresh, empty database in the target cluster; returns its name."""
    name = f"d{next(_db_counter)}_{os.getpid()}"
    create_database(pg_target, name)
    return name


@pytest.fixture(scope="session")
def spare_cluster() -> PgCluster:
    """A cluster with PostgreSQL's defaults (track_commit_timestamp off), started only when a test asks
    for it; a test may stop it, and starts it again before it ends."""
    cluster = start_cluster()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for every in-process test."""
    from olake_cli.engine.session import spark_session, stop_spark_session

    session = spark_session("local[2]")
    yield session
    stop_spark_session()


# ----------------------------------------------------------------------------- TLS

from tests.support.tls import Certs, make_certs, start_tls_cluster  # noqa: E402


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Certs:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, in a folder whose name needs
    percent-encoding in a URI (tests.support.tls)."""
    folder = tmp_path_factory.mktemp("tls") / "certs & keys %41"
    folder.mkdir()
    return make_certs(folder)


@pytest.fixture(scope="session")
def tls_cluster(certs: Certs) -> PgCluster:
    """A cluster refusing TCP connections without TLS, with database ``tls_db`` (tests.support.tls);
    started only when a test asks for it."""
    cluster = start_tls_cluster(certs)
    yield cluster
    cluster.stop()


# ----------------------------------------------------------------------------- MongoDB

from tests.support.mongo import MongoServer, connect, start_mongo_server  # noqa: E402


@pytest.fixture(scope="session")
def mongo_server() -> MongoServer:
    """One MongoDB wire-protocol server for the run (SecantusDB, or OLAKE_TEST_MONGO_URI's server)."""
    server = start_mongo_server()
    yield server
    server.stop()


@pytest.fixture()
def mongo_db(mongo_server: MongoServer) -> str:
    """A fresh database name on the shared server (dropped afterwards); returns its name."""
    name = f"t{next(_db_counter)}_{os.getpid()}"
    yield name
    with connect(mongo_server.uri) as client:
        client.drop_database(name)


# ----------------------------------------------------------------------------- Spark beyond one machine

from tests.support.spark_cluster import (SparkCluster, make_bare_python, python_imports,  # noqa: E402
                                         start_spark_cluster)


@pytest.fixture(scope="session")
def spark_cluster() -> SparkCluster:
    """A standalone master and two workers, started once per run by the first test that needs them."""
    cluster = start_spark_cluster(workers=2)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory) -> str:
    """A Python with PySpark's Arrow worker packages and no olake (nor its dependencies)."""
    python = make_bare_python(str(tmp_path_factory.mktemp("bare") / "venv"))
    assert python_imports(python, "pandas") and python_imports(python, "pyarrow")
    assert not python_imports(python, "olake_cli") and not python_imports(python, "psycopg")
    return python


@pytest.fixture(scope="session")
def olake_archive(tmp_path_factory) -> str:
    """The archive ``olake pack`` builds (the real command, once per run)."""
    from tests.support.cli import run_olake

    path = str(tmp_path_factory.mktemp("pack") / "olake-env.tar.gz")
    result = run_olake("pack", "--output", path)
    assert result.returncode == 0, result.stderr.decode()
    return path


@pytest.fixture(scope="session")
def spark_connect(spark_cluster: SparkCluster, bare_python: str) -> SparkCluster:
    """A Spark Connect server on the standalone cluster (its URL is ``spark_connect.remote``), whose
    Python workers run ``bare_python``: runs through it must ship olake (``spark.archive``)."""
    spark_cluster.start_connect(python=bare_python)
    return spark_cluster


# ----------------------------------------------------------------------------- DynamoDB

from tests.support.dynamo import MotoServer, start_moto_server  # noqa: E402


@pytest.fixture(scope="session")
def moto_server() -> MotoServer:
    """One moto server (DynamoDB, DynamoDB Streams and S3 over HTTP) for the run, started on first use."""
    server = start_moto_server()
    yield server
    server.stop()


@pytest.fixture()
def dynamo_table(moto_server: MotoServer) -> str:
    """A fresh table name on the shared server (tables of other tests stay; names never repeat)."""
    return f"t{next(_db_counter)}_{os.getpid()}"


# ----------------------------------------------------------------------------- Kafka

from tests.support.kafka_broker import KafkaBroker, start_broker  # noqa: E402


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> KafkaBroker:
    """One Kafka-compatible broker (tansu, in-memory topics) for the run, started on first use."""
    broker = start_broker(str(tmp_path_factory.mktemp("kafka")))
    yield broker
    broker.stop()


@pytest.fixture()
def kafka_prefix(kafka_broker: KafkaBroker) -> str:
    """A topic prefix no other test uses (each test's topics are its own)."""
    return f"t{next(_db_counter)}_{os.getpid()}."
