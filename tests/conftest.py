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
