"""Entry point of ``olake`` and ``python -m olake_cli``: SIGINT and SIGTERM are caught before the CLI's
imports (a second or more), so an interrupt at any moment ends with olake's own line."""

from __future__ import annotations


def main() -> None:
    """Catch signals, then import and run the CLI."""
    from olake_cli.core.interrupts import catch_signals

    catch_signals()
    try:
        from olake_cli.core.arrow_start import skip_pandas_probe

        skip_pandas_probe()
        from olake_cli.cli.app import main as run_cli
    except KeyboardInterrupt as exc:
        from olake_cli.cli.report import ended_by_signal, follows_by_argv

        ended_by_signal(exc.signum, follows_by_argv())
    run_cli()


if __name__ == "__main__":
    main()
