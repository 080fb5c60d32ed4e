"""Merging a Parquet stream's small files, so that a stream committed every few seconds keeps few files.

Every commit adds the files of the rows it covers: following a change log with a commit every 30 s,
that is about 2,900 small files a day. After a commit that leaves the live load with more than
``max_small_files`` (the config's, default MAX_SMALL_FILES) small files, one extra commit, which leaves
the state as it is (Iceberg's compaction, ``destinations/iceberg/maintenance.py``, is the model),
replaces all of them but the commit's own with one merged file (parts of at most ``rows_per_file``
rows) holding exactly their rows, ``_olake_*`` columns included. A live load so holds its chunk files,
the files that are not small, and at most ``max_small_files`` small ones (one more between a commit and
its merge).

Small: under SMALL_FILE_BYTES and written after the load's chunks (changes, incremental rows, earlier
merges); never a full load's chunk file. The files of the commit just made are not merged, so a run
that repeats that commit (one killed before the ``--state`` file was saved) rewrites them instead of
adding copies. A merged file is small too until it reaches SMALL_FILE_BYTES; then it stays as it is. So
a merge reads and writes at most max_small_files x SMALL_FILE_BYTES, however long the stream has run.
Only a complete load is merged (no Spark task writes into it any more).

The merge commits as every commit does: the merged file is written staged, then the manifest (the
commit point), then the roll forward. Locally a new load directory holds hard links to the files that
stay (no data copied) and the merged file: the symlink swap shows the merged file and hides the small
ones at once, and the old directory is deleted at the stream's next commit, as a replaced load's is. On
object storage the merged object goes beside the small ones, the manifest (which readers follow) stops
listing them, and they are deleted at the next commit. A kill before the manifest leaves the small
files live (the merged file is a leftover the next run deletes); after it, the merged file (the next run
rolls forward). Kill tests: ``OLAKE_TEST_CRASH_AT=merge-staged`` and ``merge-committed``.

Files whose columns differ (a column widened while following) are merged under the schema readers read
them with together: types promoted by name as ``union_by_name`` does, null where a file lacks a column.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from olake_cli.core.faults import crash_point
from olake_cli.core.load_progress import pending_chunks
from olake_cli.destinations.parquet.commit_plan import merged_manifest
from olake_cli.destinations.parquet.file_schema import FileParts
from olake_cli.destinations.parquet.manifest import Manifest
from olake_cli.destinations.parquet.paths import StreamPaths, after_load, merged_file_name
from olake_cli.destinations.parquet.storage import Store

MAX_SMALL_FILES = 32  # small files a stream's live load may hold before they are merged
SMALL_FILE_BYTES = 1024 * 1024  # a file from this size on is never merged again


class SmallFileMerger:
    """Merges the small files of a stream's live load after a commit (see the module)."""

    def __init__(self, store: Store, limit: int, rows_per_file: int, compression: str | None,
                 log: Callable[[str], None]) -> None:
        self.store, self.limit, self.rows_per_file, self.compression = store, limit, rows_per_file, compression
        self.log = log
        self.linkless = False  # a local filesystem without hard links: no merges

    def merge(self, label: str, paths: StreamPaths, manifest: Manifest, newest: set[str]) -> Manifest | None:
        """Merge the live load's small files when there are more than the limit, as one commit (the
        ``newest`` files, the last commit's, stay as they are); the manifest it committed, or None when
        nothing was merged."""
        small = [] if self.linkless else self.small_files(paths, manifest, newest)
        if not small:
            return None
        dir_id, commit = manifest.live, manifest.commit + 1
        load_id = manifest.loads[dir_id]["load_id"]
        kept = [name for name in manifest.files(dir_id) if name not in small]
        into = self.store.merge_dir(paths, dir_id, f"{load_id}.m{commit}", kept)
        if into is None:
            self.linkless = True
            self.log(f"{label}: small files are not merged: the filesystem of '{self.store.describe(paths.parent)}' "
                     f"makes no hard links")
            return None
        merged = self._write(paths, dir_id, into, small, lambda part: merged_file_name(load_id, commit, part))
        crash_point("merge-staged")
        new = merged_manifest(manifest, dir_id, into, small, merged)
        self.store.save_manifest(paths, new)
        crash_point("merge-committed")
        self.store.roll_forward(paths, new, previous=None)
        self.log(f"{label}: merged {len(small)} small file(s) into {len(merged)}")
        return new

    def small_files(self, paths: StreamPaths, manifest: Manifest, newest: set[str]) -> list[str]:
        """The live load's small files to merge, in commit order: all but the ``newest`` when, with them,
        there are more than the limit (else none)."""
        dir_id = manifest.live
        if dir_id is None or dir_id not in manifest.loads:
            return []
        load_id = manifest.loads[dir_id]["load_id"]
        if pending_chunks(manifest.state, load_id) != set():  # a load under way, or a re-sync marker
            return []
        found = [name for name in manifest.files(dir_id) if after_load(name, load_id)]
        if len(found) <= self.limit:
            return []
        sizes = self.store.file_sizes(paths, dir_id, found)
        small = [name for name in found if sizes[name] < SMALL_FILE_BYTES]
        merged = [name for name in small if name not in newest]
        return merged if len(small) > self.limit and len(merged) > 1 else []

    def _write(self, paths: StreamPaths, dir_id: str, into: str, small: list[str],
               name: Callable[[int], str]) -> list[str]:
        """The rows of the ``small`` files of ``dir_id``, in order, written (staged) into ``into``; the
        names written."""
        schema = readers_schema([self.store.read_schema(paths, dir_id, n) for n in small])
        parts = FileParts(lambda part: self.store.new_file(paths, into, name(part), schema, self.compression),
                          self.rows_per_file)
        try:
            for small_file in small:
                parts.add(conformed(self.store.read_file(paths, dir_id, small_file), schema))
            return [name(part) for part in range(parts.close())]
        finally:
            parts.abort()


def readers_schema(schemas: list[pa.Schema]) -> pa.Schema:
    """The schema readers read files of these schemas with together (DuckDB's ``union_by_name``,
    pyarrow's permissive promotion): columns by name, widened types; nullable where a file lacks one."""
    unified = pa.unify_schemas(schemas, promote_options="permissive")
    everywhere = set.intersection(*(set(schema.names) for schema in schemas))
    return pa.schema([f if f.name in everywhere else f.with_nullable(True) for f in unified], unified.metadata)


def conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s rows in ``schema`` (columns by name, cast to the wider type; null where it has none)."""
    columns = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)
