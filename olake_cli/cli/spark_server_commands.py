"""``olake spark-server start|stop|status``: a warm Spark Connect server on this machine for runs to reuse."""

from __future__ import annotations

import time

import typer

from olake_cli.cli.report import command_guard, log

spark_server_app = typer.Typer(no_args_is_help=True, help="A warm engine: a Spark Connect server on this machine "
                               "that runs reuse (--spark-remote), so they start no JVM of their own.")


@spark_server_app.command("start")
def start(port: int = typer.Option(15002, "--port", min=1, max=65535, help="The port to listen on (127.0.0.1)."),
          master: str = typer.Option("local[*]", "--master", metavar="URL",
                                     help="The server's Spark master (default local[*]: this machine's cores)."),
          memory: str = typer.Option("2g", "--memory", metavar="SIZE", help="The server JVM's heap (spark.driver.memory).")
          ) -> None:
    """Start the server (or find the one running), wait until it answers, and say its URL."""
    from olake_cli.engine.session import check_master
    from olake_cli.engine.spark_server import start as start_server

    with command_guard():
        check_master(master)
        started = time.monotonic()
        record, fresh = start_server(port, master, memory)
        said = (f"Spark Connect server up at {record.remote} (pid {record.pid}, master {record.master}, "
                f"{time.monotonic() - started:.1f}s)" if fresh else
                f"a Spark Connect server already runs at {record.remote} (pid {record.pid}, master {record.master})")
        log(f"{said}; give runs --spark-remote {record.remote} (or set OLAKE_SPARK_REMOTE), and stop it with "
            f"'olake spark-server stop'")


@spark_server_app.command("stop")
def stop() -> None:
    """Stop the server 'start' left running (nothing to do when none runs)."""
    from olake_cli.engine.spark_server import stop as stop_server

    with command_guard():
        record = stop_server()
        log(f"stopped the Spark Connect server at {record.remote} (pid {record.pid})" if record
            else "no Spark Connect server started by olake runs here")


@spark_server_app.command("status")
def status() -> None:
    """Say whether the server runs (exit 0) or not (exit 3)."""
    from olake_cli.engine.spark_server import running

    record = running()
    if record is None:
        log("no Spark Connect server started by olake runs here")
        raise typer.Exit(3)
    log(f"Spark Connect server at {record.remote} (pid {record.pid}, master {record.master}), up "
        f"{time.time() - record.started_at:.0f}s")
