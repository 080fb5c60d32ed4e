"""Where the Parquet destination keeps its files: a local folder or an S3 bucket, one interface.

``make_store`` picks the store of a destination config: ``local_store.LocalStore`` (staged names,
renames, the stream's symlink) or ``s3_store.S3Store`` (final names, the manifest object as the commit
point). writer.py (the driver's commits) and chunk_sink.py (Spark tasks) use only the methods of
:class:`Store`.
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa

from olake_cli.destinations.parquet.manifest import Manifest
from olake_cli.destinations.parquet.paths import StreamPaths


class DataFile(Protocol):
    """A Parquet file being written; visible under its name only once closed."""

    def write(self, table: pa.Table) -> None:
        """Append ``table``'s rows."""
        ...

    def close(self) -> str:
        """Finish the file; returns its path."""
        ...

    def abort(self) -> None:
        """Drop the unfinished file."""
        ...


class Store(Protocol):
    """The file operations of one destination root (local folder or bucket prefix)."""

    root: str
    local: bool  # files on this machine's filesystem (a cluster's executors need it shared)

    def describe(self, path: str | None = None) -> str:
        """A path of the store as the user reads it (the root without ``path``)."""
        ...

    def check(self) -> str:
        """Write and remove a probe; a success text, or a ConfigError naming the root."""
        ...

    def lock_path(self) -> str:
        """The lock file runs writing into this root take (``core.locks``)."""
        ...

    def spill_folder(self, paths: StreamPaths, dir_id: str) -> str:
        """The local folder where rows of load directory ``dir_id`` wait for their STATE."""
        ...

    def place_spill(self, spill: str, paths: StreamPaths, dir_id: str, name: str) -> None:
        """Give a spill file its deterministic name ``name`` in its load (staged locally, final on S3)."""
        ...

    def chunk_files(self, paths: StreamPaths, dir_id: str, load_id: str, chunk_index: int) -> list[str]:
        """Final names of the files Spark tasks wrote for one chunk of load ``load_id`` in directory ``dir_id``."""
        ...

    def drop_stale_parts(self, paths: StreamPaths, dir_id: str, load_id: str, chunk_index: int,
                         written: int) -> None:
        """Remove a chunk's parts beyond the ``written`` ones a task just wrote."""
        ...

    def new_file(self, paths: StreamPaths, dir_id: str, name: str, schema: pa.Schema,
                 compression: str | None) -> DataFile:
        """A chunk file a task writes under ``name`` in load directory ``dir_id``."""
        ...

    def read_file(self, paths: StreamPaths, dir_id: str, name: str) -> pa.Table:
        """A committed file of load directory ``dir_id``, whole."""
        ...

    def read_schema(self, paths: StreamPaths, dir_id: str, name: str) -> pa.Schema:
        """The schema of a committed file of load directory ``dir_id`` (its footer only)."""
        ...

    def file_sizes(self, paths: StreamPaths, dir_id: str, names: list[str]) -> dict[str, int]:
        """The sizes in bytes of the committed files ``names`` of load directory ``dir_id``."""
        ...

    def merge_dir(self, paths: StreamPaths, dir_id: str, new_dir: str, kept: list[str]) -> str | None:
        """The load directory a merge of small files of ``dir_id`` writes into, which holds the ``kept``
        files too (see small_files.py); None: no merge is possible here."""
        ...

    def load_manifest(self, paths: StreamPaths) -> Manifest | None:
        """The stream's manifest, or None."""
        ...

    def save_manifest(self, paths: StreamPaths, manifest: Manifest) -> None:
        """Write the manifest atomically: the commit point."""
        ...

    def roll_forward(self, paths: StreamPaths, manifest: Manifest, previous: Manifest | None) -> None:
        """Bring the files in line with a saved manifest; delete what ``previous`` retired (the manifest
        before it; None: nothing)."""
        ...

    def remove_unlisted(self, paths: StreamPaths, manifest: Manifest) -> int:
        """Delete what no manifest lists; returns a count."""
        ...

def make_store(config: dict[str, Any]) -> Store:
    """The store of a validated Parquet destination config (``path`` local or ``s3://bucket/prefix``)."""
    from olake_cli.destinations.parquet.local_store import LocalStore, check_root
    from olake_cli.destinations.parquet.s3_store import S3Store
    from olake_cli.shared.object_store import S3Options

    options = S3Options.of(config)
    if options is not None:
        return S3Store(config["path"], options)
    check_root(config["path"])
    return LocalStore(config["path"])
