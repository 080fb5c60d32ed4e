"""Run locks: one olake run at a time per state file and per destination.

A lock is ``flock(LOCK_EX | LOCK_NB)`` on a lock file, held for the life of the process: the kernel
releases it when the process ends, however it ends (a SIGKILL, a crash), so a lock file left behind
never blocks the next run. The holder writes its pid, host, start time and command into the file,
and a run that finds the lock taken fails at once with one line naming them. The file descriptor is
not inherited by child processes (the Spark JVM), so only olake itself holds the lock.

Limits: a lock protects only what sees the same file. On NFS, ``flock`` is carried by the server's
lock manager (NFSv4, or v3 with lockd) and a lock of a client that vanished lasts until the server
reclaims it; on a file system without locks (some FUSE mounts) no run is kept out.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import time
from contextlib import ExitStack
from dataclasses import dataclass

from olake_cli.core.errors import ConfigError, RunLockedError

_HOLDER_BYTES = 4096
LOCK_FILE = ".olake.lock"  # a destination's lock, in its folder


@dataclass
class RunLock:
    """A lock this process holds (released by ``release`` or when the process ends)."""

    path: str
    fd: int

    def release(self) -> None:
        """Give the lock up."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def acquire(path: str, what: str, command: str) -> RunLock:
    """Lock ``path`` for this run of ``command`` (``olake sync``, ...), or raise RunLockedError naming
    ``what`` is locked and the run holding it."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)  # less the umask
    except OSError as exc:
        raise ConfigError(f"cannot open the lock file '{path}' of {what}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise RunLockedError(f"{what} is in use by another olake run ({holder}); wait for it to end, or stop "
                             f"it (lock file '{path}')") from None
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started, "command": command})
    os.ftruncate(fd, 0)
    os.pwrite(fd, info.encode() + b"\n", 0)
    return RunLock(path, fd)


def _holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it (read again briefly if it has not written yet)."""
    for _ in range(20):
        try:
            info = json.loads(os.pread(fd, _HOLDER_BYTES, 0))
            return f"pid {info['pid']} on host {info['host']}, started {info['started']}, {info['command']}"
        except (ValueError, KeyError, TypeError):
            time.sleep(0.05)
    return "holder unknown"


def host_lock_path(kind: str, identity: str) -> str:
    """A lock file on this host for something that has no folder of its own to hold one (a remote
    catalog): ``$XDG_CACHE_HOME/olake/locks/<kind>-<hash of identity>.lock``."""
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return os.path.join(_host_lock_dir(), f"{kind}-{digest}.lock")


def lock_identity(path: str) -> str:
    """What a lock file stands for, the same for every user and host: a host lock's name (its kind and
    hash, without this user's cache folder), else the lock file's absolute path."""
    full = os.path.abspath(path)
    return os.path.basename(full) if os.path.dirname(full) == _host_lock_dir() else full


def _host_lock_dir() -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.abspath(os.path.join(cache, "olake", "locks"))


def lock_state(stack: ExitStack, state_path: str, roles: tuple[str, ...], command: str) -> None:
    """Hold the locks of a state file for ``roles`` until ``stack`` closes: ``S.read.lock`` (taken by
    read and sync) and ``S.write.lock`` (write and sync), so ``read --state S | write --state S`` runs
    while any second run on ``S`` is kept out."""
    for role in roles:
        stack.enter_context(acquire(f"{state_path}.{role}.lock", f"state file '{state_path}'", command))
