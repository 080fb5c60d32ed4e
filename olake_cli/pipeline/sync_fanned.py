"""``olake sync`` into several destinations, wired from their configs (``pipeline.fan_out`` has the rules)."""

from __future__ import annotations

import os
from contextlib import ExitStack
from functools import partial
from collections.abc import Callable

from olake_cli.core.catalog import load_catalog
from olake_cli.core.config import load_config
from olake_cli.core.errors import ConfigError
from olake_cli.core.locks import acquire
from olake_cli.core.messages import MessageWriter
from olake_cli.core.pipeline_identity import pipeline_identity
from olake_cli.core.registry import make_destination, make_source
from olake_cli.core.state import State
from olake_cli.pipeline.follow_runtime import FollowRuntime
from olake_cli.pipeline.run_setup import RunOptions, chunk_runner, followed_catalog, identify_metrics, spark_target, watching


def sync_fanned(options: RunOptions, out: MessageWriter, log: Callable[[str], None], view,
                runtime: FollowRuntime | None) -> None:
    """``olake sync`` into several destinations (``pipeline.fan_out``): rows go through the writers (the chunk
    tasks write none), each destination's record is its state (no ``--state``), and the pipeline is named
    after the first destination (adding a destination keeps the change log's claim)."""
    from olake_cli.pipeline.fan_out import LeastCommitted, StateTally, check_distinct, least_advanced, stream_rank
    from olake_cli.pipeline.following import following_fanned
    from olake_cli.pipeline.recover import forget_marked, reload_lost_streams, starting_state, streams_named
    from olake_cli.pipeline.sync import WriterLane, run_lanes

    dest_paths, follow = list(options.destinations), options.follow
    if options.state:
        raise ConfigError("--state applies to one --destination: with several, each destination's own record "
                          "of what it committed is its state (leave --state out)")
    _, source_kind, source_config = load_config(options.source, role="source")
    configs = [load_config(path, role="destination") for path in dest_paths]
    source = make_source(source_kind, source_config)
    catalog = followed_catalog(source, load_catalog(options.catalog), follow, log)
    refresh = streams_named(catalog, list(options.full_refresh), "--full-refresh")
    destinations = [make_destination(kind, config, log) for _, kind, config in configs]
    check_distinct(dest_paths, destinations)
    cdc = [s for s in catalog.selected_streams() if s.sync_mode == "cdc"]
    capture = source.change_capture(cdc, log) if cdc else None  # compares positions only
    rank = stream_rank(capture)
    with ExitStack() as locks:
        starts = [starting_state(State(), d.committed_state, catalog, None, refresh).state for d in destinations]
        state = least_advanced(starts, dest_paths, catalog, rank, log)
        tally = StateTally(out, len(destinations))
        lanes = [WriterLane(d, None, tally.writer(i), name=path)
                 for i, (d, path) in enumerate(zip(destinations, dest_paths))]

        def open_destinations() -> None:
            for lane in lanes:
                locks.enter_context(acquire(lane.destination.lock_path(), f"the destination of {lane.name}",
                                            "olake sync"))
                lane.destination.open(catalog)
                reload_lost_streams(state, lane.destination.committed_state, catalog, log)
            forget_marked(state, refresh)
            for lane, (_, kind, config) in zip(lanes, configs):
                lane.floors_now = partial(replay_floors_now, catalog=catalog, state=state, capture=capture)
                lane.floors.update(lane.floors_now(lane.destination))
                lane.renew = partial(make_destination, kind, config, log)

        runner = chunk_runner(spark_target(options.spark, source_config), options.max_parallel, source_config, log)
        following = None
        if runtime:
            following = following_fanned(destinations, state, follow, runtime,
                                         lambda committed: LeastCommitted(committed, state, rank))
            for lane, hook in zip(lanes, following.lanes):
                lane.on_committed = hook
            identify_metrics(dest_paths[0], ", ".join(f"{kind} {os.path.abspath(p)}"
                                                       for p, (_, kind, _) in zip(dest_paths, configs)))
        try:
            with watching(source, catalog, follow, following and following.follow, log) as watch:
                run_lanes(source, lanes, catalog, state, None, runner, log, view, on_source_open=open_destinations,
                          pipeline=pipeline_identity("sync", destinations[0].lock_path(), dest_paths[0], None),
                          follow=following and following.follow)
        finally:
            runner.close()
    if watch is not None:
        watch.raise_if_changed()


def replay_floors_now(destination, catalog, state: State, capture) -> dict[tuple, str]:
    """A destination's replay floors (``fan_out.replay_floors``) from what it holds now, for the streams the
    run resumes (a stream loaded anew has none: its new load decides what is a replay)."""
    from olake_cli.pipeline.fan_out import replay_floors
    from olake_cli.pipeline.recover import starting_state

    mine = starting_state(State(), destination.committed_state, catalog, None, []).state
    return {key: op for key, op in replay_floors(mine, capture).items() if state.find(*key) is not None}
