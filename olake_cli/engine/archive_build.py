"""Building the driver JVM's class-data-sharing archive (``python -m olake_cli.engine.archive_build``).

A throwaway Spark session runs one chunk job with ``-XX:ArchiveClassesAtExit``, and the file is renamed
into place only after its JVM has exited, so a half-written archive is never used; one builder at a
time. Where the archive lives and how runs use it: ``class_archive``.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import sys

from olake_cli.engine.class_archive import QUIET, archive_path
from olake_cli.engine.session import spark_session, stop_spark_session
from olake_cli.engine.task_entry import chunk_frame


def build(path: str) -> bool:
    """Build the archive at ``path`` (one builder at a time); True if it exists afterwards."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return os.path.exists(path)  # another process is building it
        if os.path.exists(path):
            return True
        _remove_partials(path)
        partial = f"{path}.{os.getpid()}.partial"
        session = spark_session("local[1]", java_options=[f"-XX:ArchiveClassesAtExit={partial}", *QUIET])
        chunk_frame(session, pickle.dumps((abs, -1)), False, None).collect()  # the classes a chunk job loads
        proc = getattr(session.sparkContext._gateway, "proc", None)
        stop_spark_session()
        if proc is None:
            return False
        proc.stdin.close()  # the JVM exits when its stdin closes, writing the archive
        if proc.wait(timeout=300) == 0 and os.path.exists(partial):
            os.replace(partial, path)
        elif os.path.exists(partial):
            os.remove(partial)
    return os.path.exists(path)


def _remove_partials(path: str) -> None:
    """Delete what builders killed while their JVM wrote the archive left behind."""
    folder, name = os.path.split(path)
    for entry in os.listdir(folder):
        if entry.startswith(name + ".") and entry.endswith(".partial"):
            os.remove(os.path.join(folder, entry))


def main() -> None:
    """``python -m olake_cli.engine.archive_build [--background]``: build the archive, say where."""
    path = archive_path()
    if path is None:
        print("olake: class archive disabled or no java found", file=sys.stderr)
        return
    if "--background" in sys.argv:
        os.nice(19)
    ok = build(path)
    if "--background" not in sys.argv:
        print(f"olake: Spark class archive {'at ' + path if ok else 'not built'}", file=sys.stderr)


if __name__ == "__main__":
    main()
