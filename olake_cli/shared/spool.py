"""Where a chunk task leaves its RECORD lines for the driver of ``read``: a spool file.

On a local master the task writes into a folder beside the driver; on a cluster, by default, into its
own temporary folder, and the runner sends the file back through Spark in pieces (engine/task_entry.py;
Spark then holds a chunk's lines in its JVMs until the driver takes them). With the source's
``spark.spool`` the tasks write into a place the driver reads too, a folder every node mounts or an
object-storage prefix (``s3://bucket/prefix``, written as a multipart upload), so nothing but the
result's few bytes goes through Spark and memory stays bounded whatever the chunk size. The driver
streams the file out and deletes it.

A run's spool files are named after its driver (``olake-<pid>@<host>.chunk-<index>-...``): a killed
run leaves the files its driver had not streamed yet (and a task still writing when it died leaves
one more), so each run, before its first chunk and once done, deletes the files of drivers on its own
machine that are gone, and of its own that no chunk handed out (a chunk dropped by a failed run).
Files of drivers on other machines are left alone: their processes cannot be seen from here.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, BinaryIO
from collections.abc import Iterator

from olake_cli.core.errors import ConfigError, TransientError
from olake_cli.shared.object_store import S3Options, bucket_path

BLOCK_BYTES = 4 << 20
_RUN_FILE = re.compile(r"olake-(\d+)@(.+?)\.chunk-")  # the driver that named a spool file: pid, host


@dataclass(frozen=True)
class Spool:
    """Picklable: the folder (or ``s3://`` prefix) chunk tasks spool into; folder None: the task's own
    temporary folder."""

    folder: str | None = None
    s3: S3Options | None = None
    run: str = ""  # the driver's name (``olake-<pid>@<host>.``), the first part of its files' names

    @classmethod
    def of(cls, spark_section: dict[str, Any] | None) -> Spool | None:
        """The spool a source config's ``spark`` section names (``spool`` and its ``s3.*`` fields), or None."""
        section = spark_section or {}
        if not section.get("spool"):
            return None
        return cls(section["spool"], S3Options.of(section, "spool", "spark.spool"))

    @property
    def shared(self) -> bool:
        """Whether the driver reads what the tasks write here (else the runner ships the file back)."""
        return self.folder is not None

    def describe(self) -> str:
        """Where the spool is, as the user wrote it."""
        return self.folder or "the tasks' temporary folders"

    def for_this_run(self) -> Spool:
        """This spool, its files named after this process (the run's driver)."""
        return replace(self, run=f"olake-{os.getpid()}@{socket.gethostname()}.")

    def create(self, chunk_index: int) -> tuple[BinaryIO, str]:
        """A new spool file of chunk ``chunk_index``, open for writing, and its path."""
        prefix = f"{self.run}chunk-{chunk_index}-"
        if self.s3 is not None:
            path = f"{bucket_path(self.folder)}/{prefix}{uuid.uuid4().hex}.jsonl"
            with self._errors(path):
                return self.s3.filesystem().open_output_stream(path), path
        fd, path = tempfile.mkstemp(prefix=prefix, suffix=".jsonl", dir=self.folder)
        return os.fdopen(fd, "wb", buffering=1 << 22), path

    def remove_orphans(self) -> int:
        """Delete the shared spool's files that no chunk will hand out: those of gone drivers of this
        machine, and this run's own (call it before the run's first chunk and after its last); a count."""
        host, removed = socket.gethostname(), 0
        for name in self._names():
            match = _RUN_FILE.match(name)
            if match and match[2] == host and (int(match[1]) == os.getpid() or not process_alive(int(match[1]))):
                self.remove(f"{bucket_path(self.folder) if self.s3 else self.folder}/{name}")
                removed += 1
        return removed

    def _names(self) -> list[str]:
        """The names of the files directly in the shared spool."""
        with self._errors(self.describe()):
            if self.s3 is None:
                return os.listdir(self.folder)
            from pyarrow import fs

            infos = self.s3.filesystem().get_file_info(fs.FileSelector(bucket_path(self.folder), allow_not_found=True))
            return [os.path.basename(i.path) for i in infos if i.type == fs.FileType.File]

    def blocks(self, path: str) -> Iterator[bytes]:
        """The spool file's bytes, a block at a time."""
        with self._errors(path):
            opened = self.s3.filesystem().open_input_stream(path) if self.s3 else open(path, "rb")
            with opened as spool:
                while block := spool.read(BLOCK_BYTES):
                    yield block

    def remove(self, path: str) -> None:
        """Delete a spool file (gone already is fine)."""
        try:
            if self.s3 is not None:
                self.s3.filesystem().delete_file(path)
            else:
                os.remove(path)
        except OSError:
            pass

    @contextmanager
    def _errors(self, path: str) -> Iterator[None]:
        """Storage errors as one olake error: a missing bucket or folder is the config's, the rest transient."""
        try:
            yield
        except OSError as exc:
            text = f"spark.spool '{self.describe()}': {path}: {exc}"
            text = self.s3.redact(text) if self.s3 else text
            if "NoSuchBucket" in str(exc) or isinstance(exc, (FileNotFoundError, NotADirectoryError, PermissionError)):
                raise ConfigError(text) from None
            raise TransientError(text) from None


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
