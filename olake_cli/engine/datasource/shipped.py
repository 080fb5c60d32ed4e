"""The ``olake`` data source for Python workers that have no olake: it takes it from the shipped archive.

Over Spark Connect a data source is planned in the server's Python workers and read in its executors'
(``olake pack``'s archive, added to the session as an artifact, unpacks into their working folders but is
on no ``sys.path``). The classes here are pickled *by value* (as ``engine/task_entry`` is), so a worker
unpickles them without olake; each call first puts the unpacked archive on ``sys.path`` (task_entry's
``use_shipped_environment``), then unpickles the real data source, reader or partition, which do import
olake, and hands the call on. This module may import nothing from olake at module level but task_entry.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from olake_cli.engine import task_entry
from olake_cli.engine.task_entry import use_shipped_environment


class _Shipped:
    """Holds a pickled object and the archive's folder name; unpickles it (once) after the archive is on
    ``sys.path``. Pickles without the unpickled object."""

    def __init__(self, archive_name: str, inner: Any) -> None:
        self.archive_name, self.pickled, self._inner = archive_name, cloudpickle.dumps(inner), inner

    def __getstate__(self) -> dict:
        return {"archive_name": self.archive_name, "pickled": self.pickled}

    def __setstate__(self, state: dict) -> None:
        self.archive_name, self.pickled, self._inner = state["archive_name"], state["pickled"], None

    def inner(self) -> Any:
        """The real object (its unpickling imports olake)."""
        if self._inner is None:
            use_shipped_environment(self.archive_name)
            if not any(os.path.basename(p) == self.archive_name for p in sys.path):
                _use_sessions_archive(self.archive_name)
            self._inner = pickle.loads(self.pickled)
        return self._inner


def _use_sessions_archive(archive_name: str) -> None:
    """A Connect server's streaming worker works in a folder of its own beside the sessions' folders
    (``SparkFiles`` root ``.../streaming_job``): the archive, named after its content, is in one of them."""
    from pyspark import SparkFiles

    try:
        root = SparkFiles.getRootDirectory()
    except Exception:  # no SparkFiles root in this worker: olake must be importable as it is
        return
    for found in glob.glob(os.path.join(os.path.dirname(root), "*", archive_name)):
        if os.path.isdir(found):
            sys.path.insert(0, found)
            return


class _ShippedPartition(InputPartition):
    """A real partition, pickled (``value``)."""


def _wrap(partitions: list[InputPartition]) -> list[InputPartition]:
    return [_ShippedPartition(cloudpickle.dumps(p)) for p in partitions]


class ShippedReader(_Shipped, DataSourceReader):
    """A batch reader whose real one is unpickled where it runs."""

    def partitions(self) -> list[InputPartition]:
        """The real reader's partitions, pickled."""
        return _wrap(self.inner().partitions())

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The real reader's rows of the real partition."""
        reader = self.inner()
        yield from reader.read(pickle.loads(partition.value))


class ShippedStreamReader(_Shipped, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream reader whose real one is unpickled where it runs (and kept for the query's lifetime)."""

    def initialOffset(self) -> dict:  # noqa: N802 (pyspark's names)
        """The real reader's."""
        return self.inner().initialOffset()

    def latestOffset(self, start: dict, limit: Any) -> dict:  # noqa: N802
        """The real reader's."""
        return self.inner().latestOffset(start, limit)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """The real reader's."""
        self.inner().prepareForTriggerAvailableNow()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """The real reader's partitions, pickled."""
        return _wrap(self.inner().partitions(start, end))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The real reader's rows of the real partition."""
        reader = self.inner()
        yield from reader.read(pickle.loads(partition.value))

    def commit(self, end: dict) -> None:
        """The real reader's."""
        self.inner().commit(end)

    def stop(self) -> None:
        """The real reader's."""
        self.inner().stop()


class ShippedDataSource(DataSource):
    """``format("olake")`` for workers without olake: the real data source class is ``source`` (pickled)."""

    source: _Shipped  # set on the subclass ``shipped_class`` makes

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "olake"

    def _real(self) -> DataSource:
        return self.source.inner()(self.options)

    def schema(self) -> Any:
        """The real data source's."""
        return self._real().schema()

    def reader(self, schema: Any) -> DataSourceReader:
        """The real data source's reader, shipped."""
        return ShippedReader(self.source.archive_name, self._real().reader(schema))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802
        """The real data source's stream reader, shipped."""
        return ShippedStreamReader(self.source.archive_name, self._real().streamReader(schema))


def ship(spark: Any, source: type[DataSource], archive: str) -> type[DataSource]:
    """Add ``archive`` to the session, under a name made of its content (one session's archive is told
    from another's by name alone), and return the ``DataSource`` class to register: Python workers take
    olake from the archive; it and this module's classes pickle by value."""
    digest = hashlib.sha256()
    with open(archive, "rb") as data:
        while piece := data.read(1 << 20):
            digest.update(piece)
    name = f"olake-{digest.hexdigest()[:20]}.tar.gz"
    folder = os.path.join(tempfile.gettempdir(), "olake-archives")  # a classic session serves it from here
    os.makedirs(folder, exist_ok=True)
    link = os.path.join(folder, name)
    if os.path.realpath(link) != os.path.realpath(archive):
        os.symlink(os.path.abspath(archive), f"{link}.{os.getpid()}")
        os.replace(f"{link}.{os.getpid()}", link)
    spark.addArtifacts(link, archive=True)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(task_entry)
    return type("OlakeDataSource", (ShippedDataSource,), {"source": _Shipped(name, source)})
