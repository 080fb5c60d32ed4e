"""One Iceberg snapshot that adds data files, adds position-delete files and removes files.

pyiceberg 0.12 writes data files and removes whole files, but has no API to commit delete files.
:class:`RowDelta` is a snapshot producer (pyiceberg's ``_SnapshotProducer``) that writes a DATA
manifest for new data files, a DELETES manifest for new position-delete files, and rewrites only the
manifests holding files it removes (``remove_all`` marks every live file deleted: a table
replacement). Every other manifest of the parent snapshot is kept as it is, so the cost of a commit
grows with what it adds and removes, not with the table.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import (DataFile, DataFileContent, ManifestContent, ManifestEntry, ManifestEntryStatus,
                               ManifestFile, ManifestWriterV2)
from pyiceberg.table import TableProperties, Transaction
from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT


class DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files (pyiceberg only writes data manifests)."""

    def content(self) -> ManifestContent:
        """DELETES."""
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**ManifestWriterV2._meta.fget(self), "content": "deletes"}  # type: ignore[attr-defined]


class RowDelta(_SnapshotProducer["RowDelta"]):
    """Adds data and position-delete files and removes files, in one snapshot."""

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str] = EMPTY_DICT,
                 rewrite_manifests: bool = False) -> None:
        super().__init__(Operation.APPEND, transaction, transaction._table.io,
                         snapshot_properties=snapshot_properties)
        self._rewrite_manifests = rewrite_manifests  # merge every kept entry into one manifest per kind
        self._added_deletes: list[DataFile] = []
        self._removed_paths: set[str] = set()
        self._remove_all = False
        self._removed_files: list[DataFile] = []

    def add_data(self, files: list[DataFile]) -> RowDelta:
        """Add data files."""
        self._added_data_files.extend(files)
        return self

    def add_deletes(self, files: list[DataFile]) -> RowDelta:
        """Add position-delete files."""
        self._added_deletes.extend(files)
        return self

    def remove_paths(self, paths: set[str]) -> RowDelta:
        """Remove the live data or delete files at these paths."""
        self._removed_paths |= paths
        return self

    def remove_all(self) -> RowDelta:
        """Remove every live file (the table's contents are replaced)."""
        self._remove_all = True
        return self

    @property
    def has_changes(self) -> bool:
        """Whether the snapshot would change anything."""
        return bool(self._added_data_files or self._added_deletes or self._removed_paths or self._remove_all)

    def _existing_manifests(self) -> list[ManifestFile]:
        return []

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []

    def _validate_concurrency(self) -> None:
        """A retried commit after another writer's commit may not apply deletes to changed files."""
        if self._commit_window is None or self._commit_window.is_empty():
            return
        if self._added_deletes or self._removed_paths or self._remove_all:
            raise ValidationException("another writer committed to the table during this commit")

    def _manifests(self) -> list[ManifestFile]:
        self._removed_files = []
        manifests = self._kept_manifests()
        if self._added_data_files:
            with self.new_manifest_writer(spec=self._transaction.table_metadata.spec()) as writer:
                for data_file in self._added_data_files:
                    writer.add(_added(self._snapshot_id, data_file))
            manifests.insert(0, writer.to_manifest_file())
        for spec_id, files in _by_spec(self._added_deletes).items():
            with self._delete_writer(spec_id) as writer:
                for delete_file in files:
                    writer.add(_added(self._snapshot_id, delete_file))
            manifests.insert(0, writer.to_manifest_file())
        return manifests

    def _kept_manifests(self) -> list[ManifestFile]:
        """The parent's manifests, rewritten where they hold removed files (manifests left with no
        live file are dropped: they only recorded the previous snapshot's removals)."""
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) \
            if self._parent_snapshot_id is not None else None
        if parent is None:
            return []
        manifests = [m for m in parent.manifests(io=self._io) if m.has_added_files() or m.has_existing_files()]
        if self._rewrite_manifests:
            return self._merged_manifests(manifests)
        kept = []
        for manifest in manifests:
            if not (self._remove_all or self._removed_paths):
                kept.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(io=self._io, discard_deleted=True)
            removed = [e for e in entries if self._remove_all or e.data_file.file_path in self._removed_paths]
            removed_ids = {id(e) for e in removed}
            if not removed:
                kept.append(manifest)
                continue
            spec = self.spec(manifest.partition_spec_id)
            writer = self._delete_writer(manifest.partition_spec_id) if manifest.content == ManifestContent.DELETES \
                else self.new_manifest_writer(spec=spec)
            with writer:
                for entry in entries:
                    (writer.delete if id(entry) in removed_ids else writer.existing)(entry)
            kept.append(writer.to_manifest_file())
            self._removed_files += [e.data_file for e in removed]
        return kept

    def _merged_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        """Every live entry of ``manifests`` in one manifest per (content, spec); removed ones dropped."""
        groups: dict[tuple, list[ManifestEntry]] = {}
        for manifest in manifests:
            for entry in manifest.fetch_manifest_entry(io=self._io, discard_deleted=True):
                if self._remove_all or entry.data_file.file_path in self._removed_paths:
                    self._removed_files.append(entry.data_file)
                else:
                    groups.setdefault((manifest.content, manifest.partition_spec_id), []).append(entry)
        merged = []
        for (content, spec_id), entries in groups.items():
            writer = self._delete_writer(spec_id) if content == ManifestContent.DELETES \
                else self.new_manifest_writer(spec=self.spec(spec_id))
            with writer:
                for entry in entries:
                    writer.existing(entry)
            merged.append(writer.to_manifest_file())
        return merged

    def _delete_writer(self, spec_id: int) -> DeleteManifestWriter:
        return DeleteManifestWriter(self.spec(spec_id), self.schema(), self.new_manifest_output(),
                                    self._snapshot_id, self._compression)

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        metadata = self._transaction.table_metadata
        schema, specs = metadata.schema(), metadata.specs()
        limit = int(metadata.properties.get(TableProperties.WRITE_PARTITION_SUMMARY_LIMIT,
                                            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT))
        collector = SnapshotSummaryCollector(partition_summary_limit=limit)
        for added in self._added_data_files + self._added_deletes:
            collector.add_file(data_file=added, partition_spec=specs[added.spec_id], schema=schema)
        for removed in self._removed_files:
            collector.remove_file(data_file=removed, partition_spec=specs[removed.spec_id], schema=schema)
        self._operation = self._operation_kind()
        previous = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        return update_snapshot_summaries(
            summary=Summary(operation=self._operation, **collector.build(), **snapshot_properties),
            previous_summary=previous.summary if previous is not None else None)

    def _operation_kind(self) -> Operation:
        removes = bool(self._added_deletes or self._removed_files)
        if not removes:
            return Operation.APPEND
        return Operation.OVERWRITE if self._added_data_files else Operation.DELETE


def _added(snapshot_id: int, data_file: DataFile) -> ManifestEntry:
    return ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, sequence_number=None,
                                   file_sequence_number=None, data_file=data_file)


def _by_spec(files: list[DataFile]) -> dict[int, list[DataFile]]:
    groups: dict[int, list[DataFile]] = {}
    for data_file in files:
        groups.setdefault(data_file.spec_id, []).append(data_file)
    return groups


def live_files(table: Any) -> tuple[list[DataFile], list[DataFile]]:
    """(data files, position-delete files) of the table's current snapshot."""
    snapshot = table.current_snapshot()
    data, deletes = [], []
    if snapshot is None:
        return data, deletes
    for manifest in snapshot.manifests(io=table.io):
        for entry in manifest.fetch_manifest_entry(io=table.io, discard_deleted=True):
            target = deletes if entry.data_file.content == DataFileContent.POSITION_DELETES else data
            target.append(entry.data_file)
    return data, deletes
