"""The Parquet destination on S3-compatible object storage (``"path": "s3://bucket/prefix"``), through
pyarrow's S3 filesystem: no rename and no symlink, so the commit is the manifest object itself.

Layout (the same names as on a local disk, ``paths.py``, without the stream's symlink):

    <prefix>/<ns>/.<stream>%.<load>/part-*.parquet   data objects, written once under their final,
                                                      deterministic names (a retried task or a replayed
                                                      chunk overwrites the same objects)
    <prefix>/<ns>/.<stream>.manifest.json             live files and committed state: one PUT, the
                                                      commit point (S3 replaces an object atomically)

A commit uploads its data objects, then PUTs the manifest; objects of loads the previous commit
retired are deleted after it (one commit later, so a reader holding the older manifest can finish);
opening the destination deletes every object no manifest lists (a killed run's leftovers). A prefix
listing may show objects of a commit not made yet: readers take the file list of the manifest
(``live_files``). The secret key is never part of a message: errors pass through :meth:`S3Options.redact`.
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from typing import Any
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from olake_cli.core.errors import ConfigError, DestinationError
from olake_cli.core.faults import crash_point
from olake_cli.core.locks import host_lock_path
from olake_cli.destinations.parquet.manifest import Manifest, parse_manifest
from olake_cli.destinations.parquet.paths import DIR_SEPARATOR, StreamPaths, chunk_prefix
from olake_cli.shared.object_store import SCHEME, S3Options, bucket_path

class S3Store:
    """Files, manifests and leftovers of the destination in a bucket (see the module's docstring)."""

    local = False

    def __init__(self, uri: str, options: S3Options) -> None:
        self.uri, self.options, self.root = uri, options, bucket_path(uri)
        if not self.root:
            raise ConfigError(f"parquet: '{uri}' names no bucket")
        self._fs: Any = None
        self._spill_dir: str | None = None

    @property
    def fs(self) -> Any:
        """The pyarrow filesystem (made on first use, so the store pickles without it)."""
        if self._fs is None:
            self._fs = self.options.filesystem()
        return self._fs

    def describe(self, path: str | None = None) -> str:
        """A path of the store as a URI (the root's without ``path``)."""
        return SCHEME + (path or self.root)

    def check(self) -> str:
        """Write and delete a probe object under the root; a ConfigError naming the root otherwise."""
        probe = f"{self.root}/.olake-check-{uuid.uuid4().hex}"
        try:
            with self.fs.open_output_stream(probe) as out:
                out.write(b"olake check\n")
            self.fs.delete_file(probe)
        except OSError as exc:
            raise ConfigError(f"parquet: cannot write into '{self.uri}': {self._reason(exc)}") from None
        return f"parquet: '{self.uri}' is writable"

    def lock_path(self) -> str:
        """A lock file on this host (a bucket holds no lock that runs could take)."""
        return host_lock_path("parquet", f"{self.options.endpoint or ''}|{self.root}")

    def spill_folder(self, paths: StreamPaths, dir_id: str) -> str:
        """Rows waiting for their STATE are spilled on this machine (their names are not known yet)."""
        if self._spill_dir is None:
            import atexit
            import shutil
            import tempfile

            self._spill_dir = tempfile.mkdtemp(prefix="olake-parquet-spill-")
            atexit.register(shutil.rmtree, self._spill_dir, True)
        return self._spill_dir

    def place_spill(self, spill: str, paths: StreamPaths, dir_id: str, name: str) -> None:
        """Upload a spilled file under its final name in its load's prefix (overwriting a replay's)."""
        with self.errors(paths.load_dir(dir_id)):
            from pyarrow import fs

            fs.copy_files(spill, f"{paths.load_dir(dir_id)}/{name}", source_filesystem=fs.LocalFileSystem(),
                          destination_filesystem=self.fs)
        os.remove(spill)

    def chunk_files(self, paths: StreamPaths, dir_id: str, load_id: str, chunk_index: int) -> list[str]:
        """Names of the objects tasks wrote for one chunk of a load (``olake sync``)."""
        prefix = chunk_prefix(load_id, chunk_index)
        return sorted(n for n in self._names(paths.load_dir(dir_id)) if n.startswith(prefix))

    def drop_stale_parts(self, paths: StreamPaths, dir_id: str, load_id: str, chunk_index: int,
                         written: int) -> None:
        """Delete parts of a chunk beyond the ``written`` ones (an earlier attempt wrote more)."""
        folder, prefix = paths.load_dir(dir_id), chunk_prefix(load_id, chunk_index)
        for name in self._names(folder):
            if name.startswith(prefix) and int(name[len(prefix):].split(".")[0]) >= written:
                self.delete(f"{folder}/{name}")

    def new_file(self, paths: StreamPaths, dir_id: str, name: str, schema: pa.Schema,
                 compression: str | None) -> ObjectFile:
        """A data object written by a task under its final name."""
        return ObjectFile(self, f"{paths.load_dir(dir_id)}/{name}", schema, compression)

    def read_file(self, paths: StreamPaths, dir_id: str, name: str) -> pa.Table:
        """A committed object of load directory ``dir_id``, whole."""
        path = f"{paths.load_dir(dir_id)}/{name}"
        with self.errors(path):
            return pq.read_table(path, filesystem=self.fs)

    def read_schema(self, paths: StreamPaths, dir_id: str, name: str) -> pa.Schema:
        """The schema of a committed object of load directory ``dir_id`` (its footer only)."""
        path = f"{paths.load_dir(dir_id)}/{name}"
        with self.errors(path):
            return pq.read_schema(path, filesystem=self.fs)

    def file_sizes(self, paths: StreamPaths, dir_id: str, names: list[str]) -> dict[str, int]:
        """The sizes in bytes of the objects ``names`` of load directory ``dir_id`` (one listing)."""
        from pyarrow import fs

        folder = paths.load_dir(dir_id)
        with self.errors(folder):
            infos = self.fs.get_file_info(fs.FileSelector(folder, allow_not_found=True))
        sizes = {os.path.basename(i.path): i.size for i in infos if i.type == fs.FileType.File}
        return {name: sizes.get(name, 0) for name in names}  # (a missing one fails when it is read)

    def merge_dir(self, paths: StreamPaths, dir_id: str, new_dir: str, kept: list[str]) -> str | None:
        """``dir_id`` itself: readers take the manifest's file list, so the merged object goes beside the
        small ones, which the commit retires."""
        return dir_id

    def load_manifest(self, paths: StreamPaths) -> Manifest | None:
        """The stream's manifest object, or None if it has none yet."""
        try:
            with self.fs.open_input_stream(paths.manifest) as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DestinationError(f"parquet: cannot read manifest '{self.describe(paths.manifest)}': "
                                   f"{self._reason(exc)}") from None
        return parse_manifest(data, self.describe(paths.manifest))

    def save_manifest(self, paths: StreamPaths, manifest: Manifest) -> None:
        """PUT the manifest (the commit point: S3 replaces an object whole)."""
        with self.errors(paths.manifest):
            with self.fs.open_output_stream(paths.manifest) as out:
                out.write(manifest.to_bytes(paths))
        crash_point("manifest-written")

    def roll_forward(self, paths: StreamPaths, manifest: Manifest, previous: Manifest | None) -> None:
        """Nothing to rename: delete what ``previous`` retired that ``manifest`` no longer holds."""
        self._delete(paths, *manifest.retired_since(previous))

    def remove_unlisted(self, paths: StreamPaths, manifest: Manifest) -> int:
        """Delete the objects no manifest lists (leftovers of killed runs, abandoned loads); a count."""
        folders, files = manifest.unlisted(self._dir_ids(paths), lambda d: self._names(paths.load_dir(d)))
        self._delete(paths, folders, files)
        return len(folders) + len(files)

    def _delete(self, paths: StreamPaths, folders: list[str], files: list[tuple[str, str]]) -> None:
        for dir_id in folders:
            self.delete(paths.load_dir(dir_id), folder=True)
        for dir_id, name in files:
            self.delete(f"{paths.load_dir(dir_id)}/{name}")

    def _dir_ids(self, paths: StreamPaths) -> list[str]:
        """The load prefixes of this stream that hold objects."""
        from olake_cli.core.path_names import decode_name

        prefix = f".{paths.component}{DIR_SEPARATOR}"
        return [decode_name(n[len(prefix):]) for n, kind in self._entries(paths.parent)
                if kind == "dir" and n.startswith(prefix)]

    def _names(self, folder: str) -> list[str]:
        """File names directly under ``folder`` (none when it does not exist)."""
        return [n for n, kind in self._entries(folder) if kind == "file"]

    def _entries(self, folder: str) -> list[tuple[str, str]]:
        from pyarrow import fs

        with self.errors(folder):
            infos = self.fs.get_file_info(fs.FileSelector(folder, allow_not_found=True))
        return [(os.path.basename(i.path), "dir" if i.type == fs.FileType.Directory else "file")
                for i in infos if i.type in (fs.FileType.Directory, fs.FileType.File)]

    def delete(self, path: str, folder: bool = False) -> None:
        """Delete one object, or every object under a prefix with ``folder`` (gone already is fine)."""
        try:
            (self.fs.delete_dir if folder else self.fs.delete_file)(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise DestinationError(f"parquet: cannot delete '{self.describe(path)}{'/' if folder else ''}': "
                                   f"{self._reason(exc)}") from None

    def _reason(self, exc: BaseException) -> str:
        return self.options.redact((str(exc).strip().splitlines() or [type(exc).__name__])[0])

    @contextmanager
    def errors(self, path: str) -> Iterator[None]:
        """DestinationError (naming ``path``, without secrets) for an OSError inside."""
        try:
            yield
        except OSError as exc:
            raise DestinationError(f"parquet: cannot write '{self.describe(path)}': {self._reason(exc)}") from None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fs": None, "_spill_dir": None}


class ObjectFile:
    """A Parquet object written a table at a time; it exists (whole) once closed; ``abort`` removes
    what an unfinished upload left."""

    def __init__(self, store: S3Store, path: str, schema: pa.Schema, compression: str | None) -> None:
        self.store, self.path = store, path
        with store.errors(path):
            self.stream = store.fs.open_output_stream(path)
            self.writer = pq.ParquetWriter(self.stream, schema, compression=compression)

    def write(self, table: pa.Table) -> None:
        """Append ``table``'s rows."""
        with self.store.errors(self.path):
            self.writer.write_table(table)

    def close(self) -> str:
        """Finish the object; returns its path."""
        with self.store.errors(self.path):
            self.writer.close()
            self.stream.close()
        return self.path

    def abort(self) -> None:
        """Drop the unfinished object."""
        try:
            self.writer.close()
            self.stream.close()
        finally:
            self.store.delete(self.path)
