"""A class-data-sharing (CDS) archive of the classes Spark's driver JVM loads, so it starts faster.

Measured on the project's 2-core machine (a fresh process to a finished one-task job, two runs
each): 4.6 to 6.6 s without the archive, 3.1 to 3.3 s with it, 2.4 s with it and C1 compilation
only (``-XX:TieredStopAtLevel=1``; the driver JVM only schedules, the data work runs in Python).

The archive is specific to the JDK and Spark's jars, so its name carries both. It is built by
``python -m olake_cli.engine.class_archive`` (``scripts/bootstrap.sh`` runs it; the first run
without one also starts it in the background, niced): a throwaway Spark session runs one chunk job with
``-XX:ArchiveClassesAtExit`` and the file is renamed into place only after its JVM has exited, so a
half-written archive is never used. A missing or unusable archive is ignored by the JVM.
``OLAKE_SPARK_CLASS_ARCHIVE=off`` disables it; the files live in ``$XDG_CACHE_HOME/olake`` (about
120 MB).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def archive_path() -> str | None:
    """Where the archive for this JDK and Spark lives, or None when disabled or no java is found."""
    if os.environ.get("OLAKE_SPARK_CLASS_ARCHIVE", "").lower() in ("off", "0", "false", "no"):
        return None
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") \
        else shutil.which("java")
    if not java or not os.path.exists(java):
        return None
    import pyspark

    spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
    # "frames": archives from before chunk jobs were DataFrames lack the SQL classes; built anew
    key = hashlib.sha1(f"{os.path.realpath(java)}|{spark_home}|{pyspark.__version__}|frames".encode()).hexdigest()[:12]
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "olake")
    return os.path.join(cache, f"spark-{pyspark.__version__}-{key}.jsa")


def java_options() -> list[str]:
    """Driver JVM options that use the archive (starting its build in the background if missing)."""
    path = archive_path()
    if path is None:
        return []
    if os.path.exists(path):
        return ["-XX:SharedArchiveFile=" + path, *QUIET]
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.Popen([sys.executable, "-m", "olake_cli.engine.class_archive", "--background"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    except OSError:
        pass  # no archive this time; the run itself is unaffected
    return []


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
        from olake_cli.engine.session import spark_session, stop_spark_session

        import pickle

        from olake_cli.engine.task_entry import chunk_frame

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
    """``python -m olake_cli.engine.class_archive [--background]``: build the archive, say where."""
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
