"""The command line's ``--follow``: its options checked and built, a following run started with signals
mapped onto its runtime, and the exit of a run a signal stopped."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

from olake_cli.cli.report import log, protocol_writer, stopped
from olake_cli.core.errors import ConfigError
from olake_cli.core.interrupts import signal_caught, stop_on_signal

if TYPE_CHECKING:
    from collections.abc import Callable

    from olake_cli.pipeline.follow_runtime import FollowRuntime
    from olake_cli.pipeline.run_setup import FollowOptions, RunOptions


def run_command(options: RunOptions, bounded: Callable[..., None], runtime_of: Callable[..., FollowRuntime],
                view) -> None:
    """A bounded run, or a following one through its runtime, onto whose stop the first SIGTERM or SIGINT
    is mapped (during its loads a signal interrupts them instead, ending the run the same way)."""
    if options.follow is None:
        bounded(options, protocol_writer(), log, view)
        return
    runtime = runtime_of(options, protocol_writer(), log, view)
    stop_on_signal(runtime.take_signal)
    try:
        runtime.run()
    finally:
        stop_on_signal(None)


def follow_options(follow: bool, commit_interval: float | None, metrics_port: int | None,
                   discovery_interval: float | None, metrics_host: str | None = None) -> FollowOptions | None:
    """``--follow`` and the options that go with it as the use cases take them (None: a bounded run)."""
    from olake_cli.core.validation import check_interval
    from olake_cli.pipeline.live_discovery import DEFAULT_DISCOVERY_INTERVAL_S
    from olake_cli.pipeline.run_setup import FollowOptions

    for given, name in ((commit_interval, "--commit-interval"), (metrics_port, "--metrics-port"),
                        (metrics_host, "--metrics-host"), (discovery_interval, "--discovery-interval")):
        if given is not None and not follow:
            raise ConfigError(f"{name} applies to --follow runs only")
    check_interval("--commit-interval", commit_interval)
    check_interval("--discovery-interval", discovery_interval, never=0)
    if follow:
        import olake_cli.pipeline.follow_status  # noqa: F401  (reads OLAKE_STATUS_EVERY_S: a bad one fails now)
    if follow and (metrics_port is not None or metrics_host is not None):
        metrics_address(metrics_host, metrics_port)
    interval = DEFAULT_DISCOVERY_INTERVAL_S if discovery_interval is None else discovery_interval
    return FollowOptions(commit_interval, metrics_port, interval) if follow else None


def metrics_address(host: str | None, port: int | None) -> None:
    """Serve the metrics on ``--metrics-host`` (default 127.0.0.1), checked before the run starts: one line if
    the port cannot be bound there (an unknown address, one of another machine, a port in use)."""
    import socket

    from olake_cli.pipeline.follow_status import metrics

    if port is None:
        raise ConfigError("--metrics-host applies with --metrics-port only")
    served = metrics()
    served.host = host or served.host
    try:
        family, kind, _, _, address = socket.getaddrinfo(served.host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise ConfigError(f"--metrics-host {served.host} --metrics-port {port}: cannot serve metrics there "
                          f"({exc.strerror})") from None


def exit_if_stopped(follow: bool) -> None:
    """A following run that a signal ended: one line; exit 0 for SIGTERM (a service stopped), 130 for SIGINT."""
    signum = signal_caught()
    if not follow or signum is None:
        return
    stopped(signum)
    if signum == signal.SIGINT:
        sys.exit(130)  # not typer.Exit: main() would take that status for an interrupt and say so again
