"""Wires configs to connectors (through the registry) and runs the use cases the CLI exposes."""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import Any, BinaryIO
from collections.abc import Callable

from olake_cli.core.catalog import load_catalog
from olake_cli.core.config import load_config
from olake_cli.core.locks import acquire, lock_state
from olake_cli.core.messages import MessageWriter
from olake_cli.core.pipeline_identity import pipeline_identity
from olake_cli.core.registry import make_destination, make_source
from olake_cli.core.state import FileStateStore, State, load_state
from olake_cli.pipeline.follow_runtime import FollowRuntime
from olake_cli.pipeline.run_setup import (RunOptions, check_shared_path,
                                          check_state_folder, chunk_runner, followed_catalog, identify_metrics,
                                          spark_target, watching)


def check_connector(role: str, kind: str, config: dict[str, Any], log: Callable[[str], None]) -> str:
    """Check a connector; returns a success text or raises an OlakeError saying what to fix."""
    if role == "source":
        return make_source(kind, config).check()
    return make_destination(kind, config, log).check()


def run_discover(config_path: str, previous_path: str | None, log: Callable[[str], None]) -> dict[str, Any]:
    """``olake discover``: the source's catalog; with a previous catalog, the user's edits are kept."""
    from olake_cli.core.catalog_merge import merge_edits

    _, kind, config = load_config(config_path, role="source")
    previous = load_catalog(previous_path) if previous_path else None  # a bad file fails before connecting
    catalog = make_source(kind, config).discover()
    for entry in catalog["streams"]:  # lets a later rediscovery tell removed columns from new ones
        entry.setdefault("x-olake", {})["discovered_columns"] = list(entry["json_schema"].get("properties", {}))
    if previous is None:
        return catalog
    catalog, notes = merge_edits(catalog, previous)
    for note in notes:
        log(note)
    return catalog


def run_read(options: RunOptions, out: MessageWriter, log: Callable[[str], None], view=None) -> None:
    """``olake read``, bounded (a following one runs through :func:`read_runtime`): validate every input
    first, then start Spark and stream the messages.

    ``options.state_from`` (a destination config) resumes from the state the destination committed, and
    with ``options.state`` too, takes the destination's record for each stream the file disagrees on (the
    file is not written: ``write --state`` does that); ``full_refresh`` names streams to load anew;
    ``view`` shows the progress (default: lines through ``log``). With ``--state`` the run holds the state
    file's read lock (``core.locks``).
    """
    _read(options, out, log, view, None)


def read_runtime(options: RunOptions, out: MessageWriter, log: Callable[[str], None], view=None) -> FollowRuntime:
    """The runtime of ``olake read --follow`` (``pipeline.follow_runtime``): its attempts are :func:`run_read`'s
    run, following; the caller maps signals onto it and runs it."""
    return FollowRuntime(lambda runtime: _read(options, out, log, view, runtime), log, options.follow.metrics_port)


def _read(options: RunOptions, out: MessageWriter, log: Callable[[str], None], view,
          runtime: FollowRuntime | None) -> None:
    from olake_cli.pipeline.following import following_read
    from olake_cli.pipeline.read import ReadPipeline
    from olake_cli.pipeline.recover import forget_marked, starting_state, streams_named

    state_path, state_from, follow = options.state, options.state_from, options.follow
    _, kind, config = load_config(options.source, role="source")
    source = make_source(kind, config)
    catalog = followed_catalog(source, load_catalog(options.catalog), follow, log)
    refresh = streams_named(catalog, list(options.full_refresh), "--full-refresh")
    check_state_folder(state_path)
    destination = None
    if state_from:
        _, dest_kind, dest_config = load_config(state_from, role="destination")
        destination = make_destination(dest_kind, dest_config, log)
    with ExitStack() as locks:
        if state_path:
            lock_state(locks, state_path, ("read",), "olake read")
        start = starting_state(load_state(state_path) if state_path else State(),
                               destination.committed_state if destination else None, catalog, state_path, refresh)

        def source_open() -> None:  # said once the source works: a run that fails says one line
            for note in start.notes:
                log(note)
            forget_marked(start.state, refresh)

        runner = chunk_runner(spark_target(options.spark, config), options.max_parallel, config, log)
        try:
            pipeline = pipeline_identity("read", destination and destination.lock_path(), state_from, state_path)
            following = following_read(state_path, destination, catalog, follow, log, runtime) \
                if runtime else None
            if runtime:
                identify_metrics(state_path or state_from, "stdout")
            with watching(source, catalog, follow, following, log) as watch:
                ReadPipeline(source, catalog, start.state, out, runner, log, view=view, on_source_open=source_open,
                             pipeline=pipeline, follow=following).run()
        finally:
            runner.close()
    if watch is not None:
        watch.raise_if_changed()


def run_sync(options: RunOptions, out: MessageWriter, log: Callable[[str], None], view=None) -> None:
    """``olake sync``, bounded (a following one runs through :func:`sync_runtime`): read and write in one
    process; full-load chunks are written by the tasks.

    Starts from what the destination committed for each selected stream (``recover``): with
    ``options.state``, a stream whose entry in the file differs takes the destination's, and the file is
    rewritten (atomically) to match; ``full_refresh`` names streams to load anew. Holds the state file's
    read and write locks from the start, and the destination's lock from the moment the source is open
    and checked: a source that fails leaves the destination untouched. A stream whose load the
    destination lost is then loaded anew (``recover.reload_lost_streams``). Several destinations are each
    fed every message (``pipeline.fan_out``).
    """
    _sync_attempt(options, out, log, view, None)


def sync_runtime(options: RunOptions, out: MessageWriter, log: Callable[[str], None], view=None) -> FollowRuntime:
    """The runtime of ``olake sync --follow`` (``pipeline.follow_runtime``); the caller maps signals onto it
    and runs it."""
    return FollowRuntime(lambda runtime: _sync_attempt(options, out, log, view, runtime), log,
                         options.follow.metrics_port)


def _sync_attempt(options: RunOptions, out: MessageWriter, log: Callable[[str], None], view,
                  runtime: FollowRuntime | None) -> None:
    if len(options.destinations) > 1:
        from olake_cli.pipeline.sync_fanned import sync_fanned

        sync_fanned(options, out, log, view, runtime)
    else:
        _sync(options, out, log, view, runtime)


def _sync(options: RunOptions, out: MessageWriter, log: Callable[[str], None], view,
          runtime: FollowRuntime | None) -> None:
    from olake_cli.pipeline.following import following_sync
    from olake_cli.pipeline.recover import forget_marked, reload_lost_streams, starting_state, streams_named
    from olake_cli.pipeline.sync import run_in_process

    dest_path, state_path, follow = options.destinations[0], options.state, options.follow
    _, source_kind, source_config = load_config(options.source, role="source")
    _, dest_kind, dest_config = load_config(dest_path, role="destination")
    source = make_source(source_kind, source_config)
    catalog = followed_catalog(source, load_catalog(options.catalog), follow, log)
    refresh = streams_named(catalog, list(options.full_refresh), "--full-refresh")
    check_state_folder(state_path)
    destination = make_destination(dest_kind, dest_config, log)
    target = spark_target(options.spark, source_config)
    sink = destination.chunk_sink()
    check_shared_path(sink, target, dest_path, dest_config)
    with ExitStack() as locks:
        store = FileStateStore(state_path) if state_path else None
        if state_path:
            lock_state(locks, state_path, ("read", "write"), "olake sync")
        start = starting_state(store.load() if store is not None else State(), destination.committed_state,
                               catalog, state_path, refresh)

        def open_destination() -> None:  # before any task stages files: rolls back/forward an interrupted run
            locks.enter_context(acquire(destination.lock_path(), f"the destination of {dest_path}", "olake sync"))
            for note in start.notes:
                log(note)
            if start.moved is not None:
                store.save(start.moved)  # the file follows the destination's record from now on
            destination.open(catalog)
            reload_lost_streams(start.state, destination.committed_state, catalog, log)  # before planning
            forget_marked(start.state, refresh)

        runner = chunk_runner(target, options.max_parallel, source_config, log)
        following = following_sync(destination, start.state, follow, runtime) if runtime else None
        if runtime:
            identify_metrics(state_path or dest_path, f"{dest_kind} {os.path.abspath(dest_path)}")
        try:
            with watching(source, catalog, follow, following and following.follow, log) as watch:
                run_in_process(source, destination, catalog, start.state, store, sink, runner, out, log, view,
                               on_source_open=open_destination,
                               pipeline=pipeline_identity("sync", destination.lock_path(), dest_path, state_path),
                               following=following)
        finally:
            runner.close()
    if watch is not None:
        watch.raise_if_changed()


def shutdown_engine() -> None:
    """An interrupted run's Spark: its jobs cancelled, without Spark's own error output."""
    from olake_cli.engine.session import cancel_spark_jobs

    cancel_spark_jobs()


def run_recover(config_path: str, catalog_path: str, out: MessageWriter, log: Callable[[str], None]) -> None:
    """``olake state recover``: the state the destination's files prove, as one STATE message."""
    from olake_cli.core.messages import state_message
    from olake_cli.pipeline.recover import recover_state

    _, kind, config = load_config(config_path, role="destination")
    catalog = load_catalog(catalog_path)
    destination = make_destination(kind, config, log)
    out.write(state_message(recover_state(destination.committed_state, catalog, log)))


def run_write(config_path: str, catalog_path: str | None, state_path: str | None, stdin: BinaryIO,
              out: MessageWriter, log: Callable[[str], None]) -> None:
    """``olake write``: consume stdin into the destination, committing states as they arrive.

    Holds the state file's write lock from the start and the destination's lock from the input's first
    CATALOG, record or STATE (``core.locks``).
    """
    from olake_cli.pipeline.write import WritePipeline

    _, kind, config = load_config(config_path, role="destination")
    catalog = load_catalog(catalog_path) if catalog_path else None
    check_state_folder(state_path)
    destination = make_destination(kind, config, log)
    with ExitStack() as locks:
        store = None
        if state_path:
            lock_state(locks, state_path, ("write",), "olake write")
            store = FileStateStore(state_path)
            store.load()  # a bad state file fails now, before anything is written

        def lock_destination() -> None:
            locks.enter_context(acquire(destination.lock_path(), f"the destination of {config_path}", "olake write"))

        WritePipeline(destination, catalog, store, out, log, before_open=lock_destination).run(stdin)
