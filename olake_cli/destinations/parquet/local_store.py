"""The Parquet destination on a local (or mounted) filesystem: staged names, renames and the stream's
symlink (the commit steps themselves are in manifest.py).

Rows waiting for their STATE are spilled beside their load (``_spill-*``), renamed to their staged
deterministic names (``_staged.part-*``) when the STATE commits them, and to their final names once
the manifest is written; Spark tasks of ``olake sync`` write staged names directly. Its counterpart on
object storage is ``s3_store.py``; both offer the same methods to writer.py and chunk_sink.py.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from olake_cli.core.errors import ConfigError, DestinationError
from olake_cli.core.locks import LOCK_FILE
from olake_cli.destinations.parquet import manifest as local_commit
from olake_cli.destinations.parquet.manifest import Manifest, fsync_path
from olake_cli.destinations.parquet.paths import StreamPaths, chunk_prefix, staged_name


class LocalStore:
    """Files, manifests and leftovers of the destination under a local folder."""

    local = True

    def __init__(self, root: str) -> None:
        self.root = root

    def describe(self, path: str | None = None) -> str:
        """A path of the store as shown to the user (the root without ``path``)."""
        return path or self.root

    def check(self) -> str:
        """The folder exists (or can be created) and accepts files."""
        try:
            os.makedirs(self.root, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.root, prefix=".olake-check-"):
                pass
        except OSError as exc:
            raise ConfigError(f"parquet: cannot write into '{self.root}': {exc.strerror or exc}") from None
        return f"parquet: '{self.root}' is writable"

    def lock_path(self) -> str:
        """The lock file inside the folder (``core.locks``)."""
        return os.path.join(self.root, LOCK_FILE)

    def spill_folder(self, paths: StreamPaths, dir_id: str) -> str:
        """Spills live in their load's folder (renamed there at the commit)."""
        return paths.load_dir(dir_id)

    def place_spill(self, spill: str, paths: StreamPaths, dir_id: str, name: str) -> None:
        """Give a spill file its staged deterministic name (made final after the manifest)."""
        os.replace(spill, os.path.join(os.path.dirname(spill), staged_name(name)))

    def chunk_files(self, paths: StreamPaths, dir_id: str, load_id: str, chunk_index: int) -> list[str]:
        """Final names of the staged files a Spark task wrote for one chunk (``olake sync``)."""
        folder = paths.load_dir(dir_id)
        prefix = staged_name(chunk_prefix(load_id, chunk_index))
        if not os.path.isdir(folder):
            return []
        return sorted(n[len(staged_name("")):] for n in os.listdir(folder) if n.startswith(prefix))

    def drop_stale_parts(self, paths: StreamPaths, dir_id: str, load_id: str, chunk_index: int,
                         written: int) -> None:
        """Nothing to do: a chunk's staged parts are renamed away by the commit that lists them."""

    def new_file(self, paths: StreamPaths, dir_id: str, name: str, schema: pa.Schema,
                 compression: str | None) -> StagedFile:
        """A chunk file written by a task under its staged name."""
        return StagedFile(paths.load_dir(dir_id), staged_name(name), schema, compression)

    def read_file(self, paths: StreamPaths, dir_id: str, name: str) -> pa.Table:
        """A committed file of load directory ``dir_id``, whole."""
        return _read(os.path.join(paths.load_dir(dir_id), name), pq.read_table)

    def read_schema(self, paths: StreamPaths, dir_id: str, name: str) -> pa.Schema:
        """The schema of a committed file of load directory ``dir_id`` (its footer only)."""
        return _read(os.path.join(paths.load_dir(dir_id), name), pq.read_schema)

    def file_sizes(self, paths: StreamPaths, dir_id: str, names: list[str]) -> dict[str, int]:
        """The sizes in bytes of the committed files ``names`` of load directory ``dir_id``."""
        folder = paths.load_dir(dir_id)
        try:
            return {name: os.path.getsize(os.path.join(folder, name)) for name in names}
        except OSError as exc:
            raise DestinationError(f"parquet: cannot read '{folder}': {exc.strerror or exc}") from None

    def merge_dir(self, paths: StreamPaths, dir_id: str, new_dir: str, kept: list[str]) -> str | None:
        """A new load directory ``new_dir`` holding hard links to the ``kept`` files of ``dir_id`` (no data
        copied), so the commit's symlink swap shows the merged file and hides the small ones at once;
        None where the filesystem makes no hard links."""
        folder = paths.load_dir(new_dir)
        try:
            shutil.rmtree(folder, ignore_errors=True)  # (what an attempt that failed here left)
            os.makedirs(folder)
            for name in kept:
                os.link(os.path.join(paths.load_dir(dir_id), name), os.path.join(folder, name))
        except OSError:
            shutil.rmtree(folder, ignore_errors=True)
            return None
        return new_dir

    def load_manifest(self, paths: StreamPaths) -> Manifest | None:
        """The stream's manifest, or None if it has none yet."""
        return local_commit.load_manifest(paths)

    def save_manifest(self, paths: StreamPaths, manifest: Manifest) -> None:
        """Replace the manifest atomically (the commit point)."""
        local_commit.save_manifest(paths, manifest)

    def roll_forward(self, paths: StreamPaths, manifest: Manifest, previous: Manifest | None) -> None:
        """Final names, the symlink, what ``previous`` retired gone (manifest.py)."""
        local_commit.roll_forward(paths, manifest, previous)

    def remove_unlisted(self, paths: StreamPaths, manifest: Manifest) -> int:
        """Delete what no manifest lists; returns a count."""
        return local_commit.remove_unlisted(paths, manifest)


def check_root(root: str) -> None:
    """Refuse a destination path that is a file, or lies under one (a config error, not a crash)."""
    if os.path.exists(root) and not os.path.isdir(root):
        raise ConfigError(f"parquet: the destination path '{root}' is a file, not a folder")
    existing = os.path.dirname(os.path.abspath(root))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(f"parquet: cannot write into '{root}': Not a directory ('{existing}' is a file)")


def write_staged(folder: str, name: str, table: pa.Table, compression: str | None) -> str:
    """Write ``table`` to ``folder/name`` (a hidden, not yet live name): temp file, fsync, rename.

    Writing the same name again (a retried task) replaces the file whole.
    """
    staged = StagedFile(folder, name, table.schema, compression)
    staged.write(table)
    return staged.close()


class StagedFile:
    """A Parquet file written a table at a time under a temporary name, renamed to ``name`` (after an
    fsync) only when closed whole; ``abort`` leaves nothing behind."""

    def __init__(self, folder: str, name: str, schema: pa.Schema, compression: str | None) -> None:
        self.folder, self.path = folder, os.path.join(folder, name)
        self.tmp = os.path.join(folder, f"_tmp-{uuid.uuid4().hex}.parquet")
        with self._errors():
            os.makedirs(folder, exist_ok=True)
            self.writer = pq.ParquetWriter(self.tmp, schema, compression=compression)

    def write(self, table: pa.Table) -> None:
        """Append ``table``'s rows."""
        with self._errors():
            self.writer.write_table(table)

    def close(self) -> str:
        """Finish the file and give it its name; returns the path."""
        with self._errors():
            self.writer.close()
            fsync_path(self.tmp)
            os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the unfinished file."""
        try:
            self.writer.close()
        finally:
            if os.path.exists(self.tmp):
                os.remove(self.tmp)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise DestinationError(f"parquet: cannot write {self.folder}: {exc.strerror or exc}") from None


def _read(path: str, read: Callable[[str], Any]) -> Any:
    try:
        return read(path)
    except OSError as exc:
        raise DestinationError(f"parquet: cannot read '{path}': {exc.strerror or exc}") from None
