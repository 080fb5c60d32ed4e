"""The per-stream manifest of the Parquet destination: which files are live, and the committed state;
and the commit on a local disk (on object storage, ``s3_store.py`` replaces steps 1 and 3).

The manifest also names the live load's files (``live_files``, relative to the manifest's folder):
the way to read a stream on object storage, where no symlink picks the live load.

A local commit of one stream is, in order:

1. data files are written under staged names (``_staged.part-*.parquet``, ignored by readers);
2. the manifest is replaced atomically (``atomic_write_bytes``): this is the commit point;
3. ``roll_forward``: staged files the manifest lists are renamed to their final names, the stream's
   symlink is pointed at the live load directory (a new symlink renamed over the old one, atomic for
   readers), and what the previous commit retired (load directories, and files a merge of small files
   dropped, ``small_files.py``) is deleted (one commit later, so a reader that resolved the old link,
   or read the older manifest, just before can finish).

A process killed anywhere in between leaves either the old manifest (the staged files are leftovers,
deleted when the destination opens) or the new one (opening rolls it forward). Readers of the
documented folder therefore only ever see one complete commit.

Kill tests: ``OLAKE_TEST_CRASH_AT=<step>`` SIGKILLs the process at a step of a commit (core/faults.py:
``staged``, ``manifest-written``, ``renamed``, ``swapped``; ``state-saved`` in the write pipeline). On
object storage a commit has no ``renamed`` or ``swapped`` step.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import orjson

from olake_cli.core.errors import DestinationError
from olake_cli.core.faults import crash_point
from olake_cli.core.state import atomic_write_bytes
from olake_cli.destinations.parquet.paths import StreamPaths, staged_name

MANIFEST_VERSION = 1


@dataclass
class Manifest:
    """What one stream's destination holds: load directories, their live files, the committed state."""

    live: str | None = None  # the load directory the stream's symlink points to
    loads: dict[str, dict[str, Any]] = field(default_factory=dict)  # dir id -> {"load_id", "files"}
    retired: list[str] = field(default_factory=list)  # directories to delete at the next commit
    retired_files: dict[str, list[str]] = field(default_factory=dict)  # dir id -> file names, likewise
    state: dict[str, Any] | None = None  # the stream state committed with these files
    commit: int = 0

    def files(self, dir_id: str) -> list[str]:
        """The live file names of one load directory."""
        return self.loads[dir_id]["files"]

    def dir_of(self, load_id: str) -> str | None:
        """The newest directory holding load ``load_id``."""
        found = [d for d, entry in self.loads.items() if entry["load_id"] == load_id]
        return found[-1] if found else None

    def live_files(self, paths: StreamPaths) -> list[str]:
        """The live load's files, relative to the manifest's folder (what a reader reads)."""
        if self.live is None or self.live not in self.loads:
            return []
        return [f"{paths.dir_name(self.live)}/{name}" for name in self.files(self.live)]

    def listed_files(self) -> frozenset[str]:
        """The names of every file this manifest lists, in any load directory."""
        return frozenset(name for entry in self.loads.values() for name in entry["files"])

    def unlisted(self, dir_ids: list[str], names_in: Callable[[str], list[str]]) -> tuple[list[str], list[tuple[str, str]]]:
        """What this manifest does not list, given the load directories present and the names in each:
        the whole directories to delete, and the (directory, name) files to delete in listed ones."""
        folders, files = [], []
        for dir_id in dir_ids:
            if dir_id not in self.loads:
                folders.append(dir_id)
                continue
            listed = set(self.files(dir_id))
            files += [(dir_id, name) for name in names_in(dir_id) if name not in listed]
        return folders, files

    def retired_since(self, previous: Manifest | None) -> tuple[list[str], list[tuple[str, str]]]:
        """What ``previous`` retired that this manifest no longer holds (nothing without one): the load
        directories, and the (directory, name) files to delete."""
        if previous is None:
            return [], []
        folders = [d for d in previous.retired if d != self.live and d not in self.loads]
        files = [(d, name) for d, names in previous.retired_files.items() for name in names
                 if name not in self.loads.get(d, {}).get("files", [])]
        return folders, files

    def to_bytes(self, paths: StreamPaths) -> bytes:
        """The manifest as JSON (with the live files for readers)."""
        return orjson.dumps({"version": MANIFEST_VERSION, "commit": self.commit, "live": self.live,
                             "live_files": self.live_files(paths), "loads": self.loads,
                             "retired": self.retired, "retired_files": self.retired_files, "state": self.state},
                            option=orjson.OPT_INDENT_2)


def parse_manifest(data: bytes, where: str) -> Manifest:
    """A manifest from its JSON (``where`` names it in errors)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DestinationError(f"parquet: cannot read manifest '{where}': {exc}") from None
    if not isinstance(obj, dict) or obj.get("version") != MANIFEST_VERSION:
        raise DestinationError(f"parquet: manifest '{where}' has an unknown format")
    return Manifest(obj["live"], obj["loads"], obj["retired"], obj.get("retired_files") or {}, obj["state"],
                    obj["commit"])


def load_manifest(paths: StreamPaths) -> Manifest | None:
    """The stream's manifest, or None if it has none yet."""
    try:
        with open(paths.manifest, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DestinationError(f"parquet: cannot read manifest '{paths.manifest}': {exc}") from None
    return parse_manifest(data, paths.manifest)


def save_manifest(paths: StreamPaths, manifest: Manifest) -> None:
    """Replace the manifest atomically (the commit point)."""
    try:
        os.makedirs(paths.parent, exist_ok=True)
        atomic_write_bytes(paths.manifest, manifest.to_bytes(paths))
    except OSError as exc:
        raise DestinationError(f"parquet: cannot write '{paths.manifest}': {exc.strerror or exc}") from None
    crash_point("manifest-written")


def roll_forward(paths: StreamPaths, manifest: Manifest, previous: Manifest | None) -> None:
    """Make the disk match a saved manifest: final names, the symlink, what ``previous`` retired gone."""
    try:
        for dir_id in manifest.loads:
            folder = paths.load_dir(dir_id)
            os.makedirs(folder, exist_ok=True)
            renamed = False
            for name in manifest.files(dir_id):
                staged = os.path.join(folder, staged_name(name))
                if os.path.exists(staged):
                    os.replace(staged, os.path.join(folder, name))
                    renamed = True
            if renamed:
                fsync_path(folder)
        crash_point("renamed")
        _point_link(paths, manifest.live)
        delete(paths, *manifest.retired_since(previous))
    except OSError as exc:
        raise DestinationError(f"parquet: cannot commit files in '{paths.parent}': {exc.strerror or exc}") from None


def remove_unlisted(paths: StreamPaths, manifest: Manifest) -> int:
    """Delete what no manifest lists (staged leftovers of killed runs, abandoned loads); returns a count."""
    folders, files = manifest.unlisted(paths.dir_ids_on_disk(), lambda d: os.listdir(paths.load_dir(d)))
    delete(paths, folders, files)
    return len(folders) + len(files)


def delete(paths: StreamPaths, folders: list[str], files: list[tuple[str, str]]) -> None:
    """Delete load directories ``folders`` and (directory, name) ``files`` (gone already is fine)."""
    for dir_id in folders:
        shutil.rmtree(paths.load_dir(dir_id), ignore_errors=True)
    for dir_id, name in files:
        try:
            os.remove(os.path.join(paths.load_dir(dir_id), name))
        except FileNotFoundError:
            pass


def _point_link(paths: StreamPaths, dir_id: str | None) -> None:
    """Point the stream's symlink at ``dir_id``'s directory, atomically (rename of a new link over it)."""
    if dir_id is None:
        return
    target = paths.dir_name(dir_id)
    if os.path.islink(paths.link) and os.readlink(paths.link) == target:
        return
    if os.path.exists(paths.link) and not os.path.islink(paths.link):
        raise DestinationError(f"parquet: '{paths.link}' is not a folder this destination manages "
                               f"(written by an older version?); move it away and run again")
    temp = os.path.join(paths.parent, f".{paths.component}%.link-tmp")
    if os.path.lexists(temp):
        os.remove(temp)
    os.symlink(target, temp)
    os.replace(temp, paths.link)
    fsync_path(paths.parent)
    crash_point("swapped")


def fsync_path(path: str) -> None:
    """fsync a file or a directory (so a rename inside it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
