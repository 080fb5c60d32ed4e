"""Where a stream's files live in the Parquet destination; names can never leave the root folder.

Layout (the documented path ``<path>/<namespace>/<stream>/*.parquet`` stays readable as one dataset):

    <path>/<ns>/<stream>                 symlink to the live load's directory
    <path>/<ns>/.<stream>%.<dir id>/     one directory per load (hidden: readers skip names starting
                                         with '.'); files part-*.parquet, staged ones _staged.part-*
    <path>/<ns>/.<stream>.manifest.json  the stream's manifest (live files and committed state)

Namespace and stream names are encoded into one safe path component each by ``core.path_names``
(the encoding the Iceberg destination uses for table locations), so no name can leave the root or
share another stream's folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from olake_cli.core.path_names import decode_name, encode_name

DEFAULT_NAMESPACE = "default"
DIR_SEPARATOR = "%."  # never part of an encoded name ('%' is always followed by two hex digits)


@dataclass(frozen=True)
class StreamPaths:
    """The paths of one stream under a destination root."""

    parent: str  # <root>/<encoded namespace>
    component: str  # encoded stream name

    @classmethod
    def of(cls, root: str, namespace: str | None, stream: str) -> StreamPaths:
        """Paths of stream ``namespace.stream`` under ``root``."""
        return cls(os.path.join(root, encode_name(namespace or DEFAULT_NAMESPACE)), encode_name(stream))

    @property
    def link(self) -> str:
        """The documented stream folder (a symlink to the live load's directory)."""
        return os.path.join(self.parent, self.component)

    @property
    def manifest(self) -> str:
        """The stream's manifest file."""
        return os.path.join(self.parent, f".{self.component}.manifest.json")

    def dir_name(self, dir_id: str) -> str:
        """The (hidden) directory name of one load directory."""
        return f".{self.component}{DIR_SEPARATOR}{encode_name(dir_id)}"

    def load_dir(self, dir_id: str) -> str:
        """The directory of one load."""
        return os.path.join(self.parent, self.dir_name(dir_id))

    def dir_ids_on_disk(self) -> list[str]:
        """The ids of the load directories that exist for this stream."""
        prefix = f".{self.component}{DIR_SEPARATOR}"
        if not os.path.isdir(self.parent):
            return []
        return [decode_name(n[len(prefix):]) for n in os.listdir(self.parent)
                if n.startswith(prefix) and os.path.isdir(os.path.join(self.parent, n))
                and not os.path.islink(os.path.join(self.parent, n))]


def staged_name(final: str) -> str:
    """The hidden name a data file has until the commit that makes it live."""
    return f"_staged.{final}"


def chunk_file_name(load_id: str, chunk_index: int, part: int) -> str:
    """Deterministic name of part ``part`` of full-load chunk ``chunk_index`` of a load."""
    return f"part-{encode_name(load_id)}-c{chunk_index:06d}-{part:04d}.parquet"


def commit_file_name(load_id: str, commit_key: str, part: int) -> str:
    """Deterministic name of part ``part`` of the rows committed by the STATE with ``commit_key``."""
    return f"part-{encode_name(load_id)}-k{commit_key}-{part:04d}.parquet"


def merged_file_name(load_id: str, commit: int, part: int) -> str:
    """Deterministic name of part ``part`` of the file that merges small files at commit ``commit``."""
    return f"part-{encode_name(load_id)}-m{commit:06d}-{part:04d}.parquet"


def after_load(name: str, load_id: str) -> bool:
    """Whether file ``name`` holds rows committed after load ``load_id``'s chunks (changes, incremental
    rows, merged files), not a full-load chunk's."""
    return name.startswith((f"part-{encode_name(load_id)}-k", f"part-{encode_name(load_id)}-m"))


def chunk_prefix(load_id: str, chunk_index: int) -> str:
    """The common prefix of every file of one chunk."""
    return f"part-{encode_name(load_id)}-c{chunk_index:06d}-"
