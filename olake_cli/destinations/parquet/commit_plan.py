"""Pure decisions of a Parquet commit: file names for the rows a STATE covers, and which load is live.

Full-load rows are named by the chunk the STATE marks done (``part-<load>-c<chunk>-<part>``), so a
replayed chunk or a retried Spark task overwrites the same files instead of adding copies. Other rows
(changes, incremental passes) are named by a key derived from the STATE that commits them
(``part-<load>-k<key>-<part>``): replaying the same range up to the same position rewrites the same
names.

Loads: a stream's first load is live from its first commit (its chunks appear as they commit). A later
load (full_refresh run, re-sync, new load after a catalog change) is written beside the live one and
replaces it only when its last chunk commits, by one symlink swap; the old directory is deleted at the
stream's next commit. A re-sync marker (``core.resync``) names no load and changes no directory.
"""

from __future__ import annotations

import copy
import hashlib

import orjson

from olake_cli.core.load_progress import load_complete
from olake_cli.core.resync import is_resync_marker
from olake_cli.core.state import StreamState
from olake_cli.destinations.parquet.manifest import Manifest
from olake_cli.destinations.parquet.paths import chunk_prefix


def commit_key(ss: StreamState) -> str:
    """A deterministic key of the STATE that commits a batch of rows."""
    return hashlib.sha1(orjson.dumps(ss.to_dict(), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def next_manifest(current: Manifest, ss: StreamState, merged: dict, load_id: str,
                  files: dict[tuple[str, str], list[str]], truncated_into: str | None) -> Manifest:
    """The manifest after committing ``ss`` with new ``files`` ((dir id, its load id) -> final names);
    ``merged``: the stream state it records (``ss`` merged over the one committed before).

    ``truncated_into``: a TRUNCATE was seen; rows after it went to this new directory, which replaces
    the load's directory (the files before the truncate stop being live).
    """
    new = copy.deepcopy(current)
    new.commit, new.retired, new.retired_files, new.state = current.commit + 1, [], {}, merged
    if truncated_into is not None:
        old_dir = new.dir_of(load_id)
        new.loads[truncated_into] = {"load_id": load_id, "files": []}
        if old_dir is not None:
            if new.live == old_dir:
                new.live = truncated_into
            _retire(new, old_dir)
    for (dir_id, dir_load), names in files.items():
        entry = new.loads.setdefault(dir_id, {"load_id": dir_load, "files": []})
        groups = {_group(name) for name in names}  # a re-committed chunk replaces all its parts
        entry["files"] = [f for f in entry["files"] if _group(f) not in groups] + names
    if is_resync_marker(new.state):  # names no load: the live one stays until the next run's replaces it
        return new
    load_dir = new.dir_of(load_id)
    if load_dir is None:
        load_dir = load_id
        new.loads[load_dir] = {"load_id": load_id, "files": []}
    if new.live is None or load_complete(ss):
        new.live = load_dir
    for dir_id in list(new.loads):
        if dir_id not in (new.live, load_dir):
            _retire(new, dir_id)
    return new


def merged_manifest(current: Manifest, dir_id: str, into: str, small: list[str], merged: list[str]) -> Manifest:
    """The manifest after the ``small`` files of load directory ``dir_id`` were merged into the ``merged``
    files of directory ``into`` (the state unchanged, see small_files.py): ``into`` is ``dir_id`` itself
    (the small files retired) or a new directory holding the rest of its files too, which replaces it
    (the old directory retired). What the previous commit retired stays retired, for the next commit."""
    new = copy.deepcopy(current)
    new.commit = current.commit + 1
    entry = new.loads[dir_id]
    files = [name for name in entry["files"] if name not in small] + merged
    if into == dir_id:
        entry["files"] = files
        new.retired_files.setdefault(dir_id, []).extend(small)
        return new
    new.loads[into] = {"load_id": entry["load_id"], "files": files}
    if new.live == dir_id:
        new.live = into
    _retire(new, dir_id)
    return new


def chunk_listed(listed: frozenset[str], load_id: str, chunk_index: int) -> bool:
    """Whether a manifest's ``listed`` files hold full-load chunk ``chunk_index`` of load ``load_id``: a
    manifest names a chunk's files only from the commit that marks the chunk done."""
    prefix = chunk_prefix(load_id, chunk_index)
    return any(name.startswith(prefix) for name in listed)


def _group(name: str) -> str:
    """A file name without its part number (``part-<load>-c<chunk>``)."""
    return name.rsplit("-", 1)[0]


def _retire(manifest: Manifest, dir_id: str) -> None:
    manifest.loads.pop(dir_id, None)
    if dir_id not in manifest.retired:
        manifest.retired.append(dir_id)
