"""What every run of ``read`` and ``sync`` sets up: its Spark target and chunk runner, its state folder,
and for a following run its catalog, its discovery watch and its metrics' labels."""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any
from collections.abc import Callable

from olake_cli.core.contracts import ChunkSink
from olake_cli.core.errors import ConfigError

DEFAULT_MAX_CONNECTIONS = 8  # chunks of one run reading the source at once, whatever the cluster's size


@dataclass(frozen=True)
class FollowOptions:
    """The command line's ``--follow``: seconds between commits (None: the destination's default), the
    port to serve Prometheus metrics on (None: none), seconds between discoveries (0: none)."""

    commit_interval_s: float | None = None
    metrics_port: int | None = None
    discovery_interval_s: float = 0.0


@dataclass(frozen=True)
class SparkOptions:
    """The command line's Spark choice: a classic master URL or a Spark Connect URL (None: the environment's)."""

    master: str | None = None
    remote: str | None = None


@dataclass(frozen=True)
class RunOptions:
    """What the command line says about one ``read`` or ``sync`` run (built by ``cli/``)."""

    source: str  # the source config file
    catalog: str
    destinations: tuple[str, ...] = ()  # sync: one or several destination config files
    state: str | None = None  # --state
    state_from: str | None = None  # read: --state-from, a destination config
    spark: SparkOptions = field(default_factory=SparkOptions)
    max_parallel: int | None = None
    full_refresh: tuple[str, ...] = ()
    follow: FollowOptions | None = None  # None: a bounded run


def identify_metrics(pipeline: str | None, destination: str) -> None:
    """The ``pipeline`` and ``destination`` labels of a following run's metrics."""
    from olake_cli.pipeline.follow_status import metrics

    metrics().identify(os.path.abspath(pipeline) if pipeline else "read", destination)


def followed_catalog(source, catalog, follow: FollowOptions | None, log: Callable[[str], None]):
    """The catalog of the run; a following one with discovery takes what the source holds now."""
    if follow is None or not follow.discovery_interval_s:
        return catalog
    from olake_cli.pipeline.live_discovery import starting_catalog

    return starting_catalog(source, catalog, log)


def watching(source, catalog, follow: FollowOptions | None, following, log: Callable[[str], None]):
    """The discovery watch of a following run (``pipeline.live_discovery``); for a bounded one, None."""
    if follow is None:
        return nullcontext()
    from olake_cli.pipeline.live_discovery import DiscoveryWatch

    return DiscoveryWatch(source, catalog, follow.discovery_interval_s, following, log)


def check_state_folder(state_path: str | None) -> None:
    """A ``--state`` path must be in a folder that exists (a typo is not a new folder to create)."""
    if not state_path:
        return
    folder = os.path.dirname(os.path.abspath(state_path))
    if not os.path.isdir(folder):
        raise ConfigError(f"--state {state_path}: the folder '{folder}' does not exist (create it, or fix the path)")


def check_shared_path(sink: ChunkSink | None, target, dest_path: str, dest_config: dict[str, Any]) -> None:
    """Tasks on a cluster write the destination's files: refuse unless every executor sees the path."""
    if sink is not None and sink.writes_local_files and not target.local \
            and not dest_config.get("shared_path"):
        raise ConfigError(f"{dest_path}: with the Spark master '{target.label}' the tasks write the destination's "
                          f"files on the executors' own disks; set \"shared_path\": true if every executor "
                          f"sees the same path (NFS, a mounted bucket), or use a local master")


def spark_target(spark: SparkOptions, source_config: dict[str, Any]):
    """Where the run's Spark jobs go (checked: a wrong URL fails now with one line, not after a minute); a
    remote that is the server ``olake spark-server start`` runs here has its tasks on this machine."""
    from olake_cli.engine.session import local_cores, resolve_target
    from olake_cli.engine.spark_server import serving

    target = resolve_target(spark.master, spark.remote, source_config.get("spark"))
    server = serving(target.remote) if target.remote else None
    return replace(target, on_this_machine=True, session_id=server.session_id, slots=local_cores(server.master)) \
        if server else target


def chunk_runner(target, max_parallel: int | None, source_config: dict[str, Any], log: Callable[[str], None]):
    """The chunk runner of a run: ``--max-parallel`` or the source's ``max_parallel`` (else the cluster's
    cores), capped by the source's ``max_connections``; ``read``'s tasks on a cluster spool into the
    source's ``spark.spool`` when it names one; small loads on a local master skip Spark (``load_runner``)."""
    from olake_cli.engine.chunk_runner import SparkChunkRunner
    from olake_cli.engine.session import start_session
    from olake_cli.pipeline.load_runner import DEFAULT_IN_PROCESS_ROWS, LoadRunner
    from olake_cli.shared.spool import Spool

    parallel = max_parallel or source_config.get("max_parallel")
    connections = source_config.get("max_connections", DEFAULT_MAX_CONNECTIONS)
    engine = SparkChunkRunner(lambda: start_session(target), parallel, local=target.local, log=log,
                              archive_name=target.archive_name, max_connections=connections,
                              spool=Spool.of(source_config.get("spark")), label=target.label, cores=target.slots)
    return LoadRunner(engine, target.local, source_config.get("in_process_rows", DEFAULT_IN_PROCESS_ROWS),
                      parallel, connections, log)
