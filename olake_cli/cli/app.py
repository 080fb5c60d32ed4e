"""The ``olake`` command line: parse arguments, call a use case, map errors to exit codes."""

from __future__ import annotations

import os
import signal
import sys
from enum import Enum

import typer
from typer.exceptions import TyperException

from olake_cli.core.config import load_config
from olake_cli.cli.progress_view import progress_view
from olake_cli.cli.report import (LOG_FORMATS, command_guard, ended_by_signal, fail, follows_by_argv, log,
                                  protocol_writer, set_log_format, stdout_closed)
from olake_cli.core import messages
from olake_cli.core.errors import ConfigError, OlakeError
from olake_cli.cli.following import exit_if_stopped, follow_options, run_command
from olake_cli.cli.spark_server_commands import spark_server_app
from olake_cli.core.interrupts import signal_caught
from olake_cli.core.registry import DESTINATIONS, SOURCES

SOURCE_TYPES, DESTINATION_TYPES = ", ".join(SOURCES), ", ".join(DESTINATIONS)
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help=f"Copy databases into files and tables you can query: chunked parallel full loads on Spark, "
                       f"change capture, resumable state.\n\nSources: {SOURCE_TYPES}. Destinations: "
                       f"{DESTINATION_TYPES}. Options before the command apply to every command.")
state_app = typer.Typer(no_args_is_help=True, help="Work with state files, and the replication slot a pipeline keeps.")
app.add_typer(state_app, name="state")
app.add_typer(spark_server_app, name="spark-server")

CONFIG_OPT = typer.Option(..., "--config", metavar="FILE",
                          help="Connector config JSON file (its 'type' names the connector).")
CATALOG_OPT = typer.Option(..., "--catalog", metavar="FILE", help="Catalog JSON (the output of discover, possibly edited).")
STATE_OPT = typer.Option(None, "--state", metavar="FILE", help="State JSON file (its folder must exist); read to "
                         "resume, merged into by write. sync checks it against what the destination committed and "
                         "follows the destination where they differ.")
FULL_REFRESH_OPT = typer.Option(None, "--full-refresh", metavar="STREAM", help="Load STREAM (namespace.name, or name) "
                                "anew, whatever the state says; repeatable. The new load replaces the destination's "
                                "contents when its last chunk commits.")
MASTER_OPT = typer.Option(None, "--spark-master", metavar="URL",
                          help="Spark master URL (default local[*] or $OLAKE_SPARK_MASTER).")
REMOTE_OPT = typer.Option(None, "--spark-remote", metavar="URL",
                          help="Spark Connect server, sc://host:port (or $OLAKE_SPARK_REMOTE), instead of a master.")
PARALLEL_OPT = typer.Option(None, "--max-parallel", min=1, metavar="N",
                            help="Chunks scanned at once (default: Spark's parallelism).")
FOLLOW_OPT = typer.Option(False, "--follow", help="Keep running as a service after the loads: capture changes as "
                          "they are made and commit them every --commit-interval seconds, until SIGTERM (exit 0) or "
                          "SIGINT (exit 130), which commit what was read first. Needs a cdc stream.")
INTERVAL_OPT = typer.Option(None, "--commit-interval", metavar="SECONDS", help="With --follow: seconds between "
                            "commits, above 0 and at most 86400 (default: the destination's, 1 for postgres, 30 for "
                            "parquet, 60 for iceberg; read: 5).")
METRICS_OPT = typer.Option(None, "--metrics-port", min=1, max=65535, metavar="PORT", help="With --follow: serve "
                           "Prometheus metrics on http://127.0.0.1:PORT/metrics (changes, commits, lag, source "
                           "backlog, retries); --metrics-host for another address.")
METRICS_HOST_OPT = typer.Option(None, "--metrics-host", metavar="ADDRESS", help="With --metrics-port: the address "
                                "to serve the metrics on (default 127.0.0.1, this machine only; 0.0.0.0 for every "
                                "interface, as in a container).")
DISCOVERY_OPT = typer.Option(None, "--discovery-interval", min=0, metavar="SECONDS", help="With --follow: look "
                             "for new and dropped tables or collections this often, at most 86400 (default 60; 0: "
                             "never); the catalog's new_streams says what a new one gets.")
LogFormat = Enum("LogFormat", {name: name for name in LOG_FORMATS}, type=str)


def _print_version(value: bool) -> None:
    """``--version``: print olake's version on stdout and exit."""
    if value:
        from olake_cli import __version__

        sys.stdout.write(f"olake {__version__}\n")
        raise typer.Exit()


@app.callback()
def options(log_format_name: LogFormat = typer.Option(
        "text", "--log-format", envvar="OLAKE_LOG_FORMAT", case_sensitive=False, metavar="text|json",
        help="stderr as 'text' lines (a live progress display on a terminal) or 'json': one object a line."),
        version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                     help="Print olake's version and exit.")) -> None:
    """Options that apply to every command."""
    set_log_format(log_format_name.value)


@app.command()
def spec(source: str | None = typer.Option(None, "--source", metavar="TYPE", help=f"Source type: {SOURCE_TYPES}."),
         destination: str | None = typer.Option(None, "--destination", metavar="TYPE",
                                                   help=f"Destination type: {DESTINATION_TYPES}.")) -> None:
    """Print the SPEC message (the config's JSON Schema) of a connector; with neither option, olake's as an
    Airbyte source (any source config, by its "type")."""
    from olake_cli.core.airbyte_form import any_of_spec
    from olake_cli.core.config import schema_for
    from olake_cli.core.validation import load_schema

    if source and destination:
        raise ConfigError("spec: give one of --source TYPE or --destination TYPE, or neither (every source)")
    if not source and not destination:
        spec_ = any_of_spec([load_schema(schema_for("source", kind)) for kind in SOURCES])
    else:
        spec_ = load_schema(schema_for("source", source) if source else schema_for("destination", destination))
    protocol_writer().write(messages.spec_message(spec_))


@app.command()
def check(config: str | None = typer.Option(None, "--config", metavar="FILE", help="A source or destination config "
                                            "JSON file; its 'type' names the connector (postgres, both a source and "
                                            "a destination: the side whose own fields the file sets more of, a "
                                            "source on a tie)."),
          source: str | None = typer.Option(None, "--source", metavar="FILE", help="Check FILE as a source config: "
                                            "what reading needs."),
          destination: str | None = typer.Option(None, "--destination", metavar="FILE", help="Check FILE as a "
                                                 "destination config: what writing needs.")) -> None:
    """Check that a source or destination config works: each problem with its fix (CONNECTION_STATUS
    on stdout when it is not a terminal). Give exactly one of --config, --source or --destination."""
    from olake_cli.cli.check_view import guessed_side_note, show_check_failed, show_check_passed
    from olake_cli.pipeline.connectors import check_connector

    given = [(path, side) for path, side in ((config, None), (source, "source"), (destination, "destination")) if path]
    if len(given) != 1:
        raise ConfigError("check: give exactly one of --config FILE, --source FILE or --destination FILE")
    path, side = given[0]
    role, kind, cfg = load_config(path, side)
    note = "" if side else guessed_side_note(path, role, kind)
    try:
        text = check_connector(role, kind, cfg, log)
    except OlakeError as exc:
        exc.message += note
        show_check_failed(exc)
    show_check_passed(text + note)


@app.command()
def discover(config: str = CONFIG_OPT,
             catalog: str | None = typer.Option(None, "--catalog", metavar="FILE", help="A previous catalog whose "
                                                   "edits (selections, sync modes, cursors, removed columns) are kept."),
             output: str | None = typer.Option(None, "--output", "-o", metavar="FILE", help="Write the catalog "
                                                  "to FILE, indented for editing, instead of a CATALOG message on "
                                                  "stdout (FILE may be the --catalog it updates).")) -> None:
    """Print the CATALOG of every stream the source config can see (or write it to --output FILE)."""
    from olake_cli.cli.catalog_file import write_catalog_file
    from olake_cli.pipeline.connectors import run_discover

    found = run_discover(config, catalog, log)
    if output is None:
        protocol_writer().write(messages.catalog_message(found))
        log(f"discovered {len(found['streams'])} stream(s)")
        return
    write_catalog_file(output, found)
    log(f"discovered {len(found['streams'])} stream(s) into {output}; edit 'selected', 'sync_mode' and "
        f"'cursor_field' there, then pass it as --catalog {output}")


@app.command()
def read(config: str = CONFIG_OPT, catalog: str = CATALOG_OPT, state: str | None = STATE_OPT,
         state_from: str | None = typer.Option(None, "--state-from", metavar="FILE", help="Destination config JSON: resume "
                                                  "from the state the destination committed (with --state: where "
                                                  "the file differs, the destination's record wins)."),
         spark_master: str | None = MASTER_OPT, spark_remote: str | None = REMOTE_OPT,
         max_parallel: int | None = PARALLEL_OPT, full_refresh: list[str] | None = FULL_REFRESH_OPT,
         follow: bool = FOLLOW_OPT, commit_interval: float | None = INTERVAL_OPT,
         metrics_port: int | None = METRICS_OPT, metrics_host: str | None = METRICS_HOST_OPT,
         discovery_interval: float | None = DISCOVERY_OPT) -> None:
    """Read the selected streams and print RECORD and STATE messages on stdout.

    Without --state or --state-from every stream starts from the beginning; to resume a pipe, give the
    writer's destination: olake read ... --state-from DEST.json | olake write --config DEST.json.
    """
    from olake_cli.pipeline.connectors import read_runtime, run_read, shutdown_engine
    from olake_cli.pipeline.run_setup import RunOptions, SparkOptions

    # command_guard: click would turn these into a silent exit 1 or "Aborted!"
    with command_guard(shutdown_engine, following=follow, feeds_writer=True), progress_view() as view:
        options = RunOptions(config, catalog, state=state, state_from=state_from,
                             spark=SparkOptions(spark_master, spark_remote), max_parallel=max_parallel,
                             full_refresh=tuple(full_refresh or ()),
                             follow=follow_options(follow, commit_interval, metrics_port, discovery_interval,
                                                    metrics_host))
        run_command(options, run_read, read_runtime, view)
    exit_if_stopped(follow)


@app.command()
def write(config: str = CONFIG_OPT,
          catalog: str | None = typer.Option(None, "--catalog", metavar="FILE", help="Catalog to check the reader's against."),
          state: str | None = STATE_OPT) -> None:
    """Consume protocol messages on stdin and write them to the destination."""
    from olake_cli.pipeline.connectors import run_write

    if sys.stdin.isatty():
        log("reading protocol messages from stdin (pipe 'olake read ...' into 'olake write'; Ctrl-D ends)")
    with command_guard():
        run_write(config, catalog, state, sys.stdin.buffer, protocol_writer(), log)


@app.command()
def sync(source: str = typer.Option(..., "--source", metavar="FILE", help="Source config JSON file."),
         destination: list[str] = typer.Option(..., "--destination", metavar="FILE",
                                               help="Destination config JSON file; repeat it to write every "
                                                    "change into several destinations (without --state)."),
         catalog: str = CATALOG_OPT, state: str | None = STATE_OPT,
         spark_master: str | None = MASTER_OPT, spark_remote: str | None = REMOTE_OPT,
         max_parallel: int | None = PARALLEL_OPT, full_refresh: list[str] | None = FULL_REFRESH_OPT,
         follow: bool = FOLLOW_OPT, commit_interval: float | None = INTERVAL_OPT,
         metrics_port: int | None = METRICS_OPT, metrics_host: str | None = METRICS_HOST_OPT,
         discovery_interval: float | None = DISCOVERY_OPT) -> None:
    """Read and write in one process (full-load chunks are written by the chunk tasks); prints STATEs.

    Resumes from the state the destination committed with its rows, with or without --state; a stream
    the destination holds nothing of is loaded in full, and so is each --full-refresh STREAM. With several
    --destination, each one gets every row and change and commits its own state; a change log is let go
    only up to what every one of them committed.
    """
    from olake_cli.pipeline.connectors import run_sync, shutdown_engine, sync_runtime
    from olake_cli.pipeline.run_setup import RunOptions, SparkOptions

    with command_guard(shutdown_engine, following=follow), progress_view() as view:
        options = RunOptions(source, catalog, destinations=tuple(destination), state=state,
                             spark=SparkOptions(spark_master, spark_remote), max_parallel=max_parallel,
                             full_refresh=tuple(full_refresh or ()),
                             follow=follow_options(follow, commit_interval, metrics_port, discovery_interval,
                                                    metrics_host))
        run_command(options, run_sync, sync_runtime, view)
    exit_if_stopped(follow)


@app.command()
def pack(output: str = typer.Option(..., "--output", metavar="FILE.tar.gz",
                                   help="Where to write the archive (name it in the source config's spark.archive).")) -> None:
    """Build an archive of olake and its dependencies for Spark executors that have no olake installed."""
    from olake_cli.engine.pack import build_pack

    with command_guard():
        build_pack(output, log)


@state_app.command("show")
def state_show(path: str = typer.Argument(..., metavar="STATE_FILE", hidden=True),
               as_json: bool = typer.Option(False, "--json", help="Print the state as a STATE message instead."),
               catalog: str | None = typer.Option(None, "--catalog", metavar="FILE", help="Also list the catalog's selected "
                                                     "streams STATE_FILE does not hold (phase DISCOVERY); "
                                                     "STATE_FILE need not exist yet.")) -> None:
    """Show STATE_FILE on stdout: per stream its sync type, position, chunks done and phase (a table)."""
    from olake_cli.cli.state_view import state_table
    from olake_cli.core.catalog import load_catalog
    from olake_cli.core.state import State, load_state

    discovered = [s.key for s in load_catalog(catalog).selected_streams()] if catalog else []
    state = State() if catalog and not os.path.exists(path) else load_state(_existing_state_file(path))
    if as_json:
        protocol_writer().write(messages.state_message(state))
        return
    sys.stdout.write(state_table(state, discovered) + "\n")


@state_app.command("reset")
def state_reset(path: str = typer.Argument(..., metavar="STATE_FILE", hidden=True),
                stream: list[str] = typer.Option(..., "--stream", metavar="NAMESPACE.NAME", help="NAMESPACE.NAME of a stream to load "
                                                 "anew (repeatable): the file keeps a mark that its next run honours.")) -> None:
    """Mark streams in STATE_FILE (atomically) to load anew: the next run copies them again from scratch,
    replacing what the destination holds when the new load completes (sync --full-refresh does the same)."""
    from contextlib import ExitStack

    from olake_cli.core.locks import lock_state
    from olake_cli.core.resync import marker_replacing
    from olake_cli.core.state import FileStateStore

    with ExitStack() as locks:
        store = FileStateStore(_existing_state_file(path))
        lock_state(locks, path, ("read", "write"), "olake state reset")  # not under a running sync
        state = store.load()
        for name in stream:
            namespace, _, table = name.rpartition(".")
            if state.find(namespace or None, table) is None:
                known = ", ".join(f"{s.stream_namespace}.{s.stream_name}" for s in state.streams) or "none"
                raise ConfigError(f"state file '{path}' has no stream '{name}' (streams: {known})")
            state.upsert(marker_replacing(state.find(namespace or None, table)))
        store.save(state)
    log(f"reset {len(stream)} stream(s) in {path}; the next run loads them anew")


def _existing_state_file(path: str) -> str:
    """``path`` if it is a file; a StateError otherwise (a run with ``--state`` creates it)."""
    from olake_cli.core.errors import StateError

    if not os.path.isfile(path):
        what = "is a directory" if os.path.isdir(path) else "does not exist"
        raise StateError(f"state file '{path}' {what} (a run with --state {path} creates it)")
    return path


@state_app.command("recover")
def state_recover(config: str = CONFIG_OPT, catalog: str = CATALOG_OPT) -> None:
    """Rebuild the state from the destination's contents and print it as a STATE message."""
    from olake_cli.pipeline.connectors import run_recover

    run_recover(config, catalog, protocol_writer(), log)


@state_app.command("drop-slot")
def state_drop_slot(config: str = typer.Option(..., "--config", metavar="SOURCE.json", help="PostgreSQL source config "
                                                "naming the replication_slot (and publication) to drop."),
                    claim_only: bool = typer.Option(False, "--claim-only", help="Only forget which pipeline claimed "
                                                    "the slot (the pipeline moved to another destination or state "
                                                    "file); the slot and publication stay.")) -> None:
    """Drop a pipeline's replication slot and publication (only ones olake would have created; refused while
    the slot is in use), so the source stops keeping WAL for it; says on stderr what it dropped."""
    from olake_cli.pipeline.slot_admin import run_drop_slot

    run_drop_slot(config, claim_only, log)


def main() -> None:
    """Run the command line (signals are caught already: see ``olake_cli.__main__``); map how the
    command ended to one line on stderr and an exit code."""
    from olake_cli.core.file_modes import apply_umask

    if os.environ.get("OLAKE_LOG_FORMAT", "").lower() in LOG_FORMATS:  # also for errors before the options
        set_log_format(os.environ["OLAKE_LOG_FORMAT"].lower())
    try:
        apply_umask()  # what this process and its Spark workers create is private unless $OLAKE_UMASK
        result = app(standalone_mode=False)
        if result == 130 and signal_caught() is not None:  # typer's own ending of an interrupt it caught
            ended_by_signal(signal_caught(), follows_by_argv())
        if isinstance(result, int) and result:
            sys.exit(result)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        fail(OlakeError("aborted"), 130)
    except TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.stderr.write(exc.format_message() + "\n")
            sys.exit(2)
        fail(ConfigError(f"{exc.format_message()} (see olake --help)"), 2)
    except OlakeError as exc:
        fail(exc)
    except BrokenPipeError:
        stdout_closed()
    except KeyboardInterrupt as exc:
        ended_by_signal(getattr(exc, "signum", signal.SIGINT), follows_by_argv())
    except Exception as exc:  # anything unexpected is a system error with its stack in the TRACE
        err = OlakeError(f"internal error: {type(exc).__name__}: {exc}")
        err.__traceback__ = exc.__traceback__
        fail(err)
