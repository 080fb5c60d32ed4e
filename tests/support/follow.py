"""Helpers for tests of runs that follow their change log (``--follow``): start one in the background,
wait for what its log or the destination shows, stop it with a signal."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.cli import olake_cmd, olake_env


def start_olake(args: list[str], log: Path, **popen) -> subprocess.Popen:
    """``olake ARGS`` in its own process group, stderr appended to ``log`` (status lines every 2 s)."""
    with open(log, "ab") as err:
        return subprocess.Popen(olake_cmd(*args), stderr=err, env={**olake_env(), "OLAKE_STATUS_EVERY_S": "2"},
                                start_new_session=True, **popen)


def wait_until(check: Callable[[], bool], what: str, timeout: float = 90,
               run: subprocess.Popen | None = None) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds, or as soon as
    ``run`` (if given) has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if run is not None and run.poll() is not None:
            raise AssertionError(f"the run ended (status {run.returncode}) before {what}")
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting until {what}")


def stop(proc: subprocess.Popen, signum: int = signal.SIGTERM) -> float:
    """Send ``signum``; the seconds until the process ended."""
    sent = time.monotonic()
    proc.send_signal(signum)
    proc.wait(timeout=60)
    return time.monotonic() - sent
