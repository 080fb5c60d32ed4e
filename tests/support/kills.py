"""Starting and SIGKILLing real olake runs for the kill tests (tests/test_fault_harness.py and the
cluster's spool kill in tests/test_spark_cluster.py; tests/test_e2e_dynamodb_kills.py waits for a
state write with it).

A run is ``olake sync`` or ``olake read | olake write``, each process in its own process group, so one
``killpg`` takes a process with its Spark JVM. PySpark's Python worker daemon makes a process group of
its own: a crash point reached inside a Spark task therefore stops its worker (``SIGSTOP``, see
``core/faults.py``'s ``OLAKE_TEST_CRASH_SIGNAL``) instead of killing it, and the test, seeing a stopped
process among the run's, SIGKILLs the whole run (every process group and every descendant) at that
moment, as a SIGKILL of the machine's olake would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.cli import olake_cmd


def start_run(path: str, files: tuple[str, str, str, str], env: dict, log: Path,
              extra: tuple[str, ...] = ()) -> list[subprocess.Popen]:
    """Start ``sync`` (``path`` "sync") or ``read | write`` (``files``: source, destination, catalog,
    state), each process in its own process group, stderr appended to ``log``; ``extra`` goes to the
    command that reads (its Spark options)."""
    src, dst, cat, state = files
    with open(log, "ab") as err:
        quiet = dict(env=env, stderr=err, start_new_session=True)
        if path == "sync":
            return [subprocess.Popen(olake_cmd("sync", "--source", src, "--destination", dst, "--catalog", cat,
                                               "--state", state, *extra), stdout=subprocess.DEVNULL, **quiet)]
        reader = subprocess.Popen(olake_cmd("read", "--config", src, "--catalog", cat, "--state", state, *extra),
                                  stdout=subprocess.PIPE, **quiet)
        writer = subprocess.Popen(olake_cmd("write", "--config", dst, "--state", state), stdin=reader.stdout,
                                  stdout=subprocess.DEVNULL, **quiet)
    reader.stdout.close()
    return [reader, writer]


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                children.setdefault(stat[1], []).append(int(entry))
    return children


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def descendants(pids: list[int]) -> list[int]:
    """``pids`` and every process they started, at any depth."""
    children, found, queue = _children(), [], list(pids)
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue += children.get(pid, [])
    return found


def stopped(procs: list[subprocess.Popen]) -> bool:
    """Whether a process of the run (at any depth) is stopped at a crash point."""
    return any((_stat(pid) or ("", 0))[0] == "T" for pid in descendants([p.pid for p in procs]))


def kill_run(procs: list[subprocess.Popen], everything: bool = False) -> None:
    """SIGKILL each process's group; with ``everything``, also every descendant in another group (PySpark's
    worker daemon and its workers, which otherwise end on their own once their JVM is gone)."""
    victims = descendants([p.pid for p in procs]) if everything else []
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_run(procs: list[subprocess.Popen], stop_at_crash_point: bool, timeout_s: float = 600) -> list[int]:
    """Wait for a run to end (SIGKILLed as a whole the moment a process stops at a crash point, with
    ``stop_at_crash_point``); the exit codes, after the groups of every process are killed."""
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if stop_at_crash_point and stopped(procs):
            kill_run(procs, everything=True)
            break
        time.sleep(0.02)
    codes = [p.wait(timeout=120) for p in procs]
    kill_run(procs)  # a killed driver's JVM must not outlive it
    return codes


def wait_for_state_write(state: str, procs: list[subprocess.Popen]) -> None:
    """Wait until the state file is next written (it is replaced whole each time), or the run ends."""
    first = _state_stamp(state)
    while any(p.poll() is None for p in procs) and _state_stamp(state) == first:
        time.sleep(0.02)


def _state_stamp(state: str) -> tuple[int, int] | None:
    """Which version of the state file is in place (None: none yet)."""
    try:
        stat = os.stat(state)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns
