"""What runs inside a Spark task: the chunk function, on a one-row DataFrame, through ``mapInArrow``.

This module is pickled *by value* with each job (see :func:`chunk_frame`), so a worker whose Python
has no olake installed can run it: it first puts the shipped environment (``olake pack``) on
``sys.path``, then unpickles the chunk's function and task, which do import olake. It may import
nothing from olake at module level.

The task sends back rows of ``(kind, data)``: the result pickled (``RESULT``, always last), and
before it, when the runner asked for it, the chunk's spool file in pieces of at most ``PIECE_BYTES``
(``PIECE``), so a task whose disk the driver cannot see still returns its lines as a stream.
"""

from __future__ import annotations

import os
import pickle
import sys

PIECE, RESULT = 0, 1
PIECE_BYTES = 4 << 20
SCHEMA = "kind int, data binary"


def chunk_frame(spark, payload: bytes, ship_back: bool, archive_name: str | None):
    """The one-partition DataFrame whose only task runs the pickled ``(func, task)`` in ``payload``."""
    _pickle_by_value()

    def run(batches):
        import pyarrow as pa

        for _ in batches:  # the one input row only starts the task
            pass
        schema = pa.schema([("kind", pa.int32()), ("data", pa.binary())])
        for kind, data in task_rows(payload, ship_back, archive_name):
            yield pa.RecordBatch.from_pydict({"kind": [kind], "data": [data]}, schema=schema)

    return spark.range(0, 1, 1, 1).mapInArrow(run, SCHEMA)


def _pickle_by_value() -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def task_rows(payload: bytes, ship_back: bool, archive_name: str | None):
    """Run the task; ``(kind, data)`` rows: its spool file's pieces (when shipped back), then the result."""
    if archive_name:
        use_shipped_environment(archive_name)
    func, task = pickle.loads(payload)
    result = func(task)
    path = getattr(result, "spool_path", None)
    if ship_back and path:
        with open(path, "rb") as spool:
            while piece := spool.read(PIECE_BYTES):
                yield PIECE, piece
        os.remove(path)
        result.spool_path = None
    yield RESULT, pickle.dumps(result)


def use_shipped_environment(archive_name: str) -> None:
    """Put the unpacked archive (in the task's working folder or Spark's files folder) first on sys.path."""
    folders = [os.getcwd()]
    try:
        from pyspark import SparkFiles

        folders.append(SparkFiles.getRootDirectory())
    except Exception:  # no SparkFiles root in this worker: the working folder is the place
        pass
    for folder in folders:
        unpacked = os.path.join(folder, archive_name)
        if os.path.isdir(unpacked):
            if unpacked not in sys.path:
                sys.path.insert(0, unpacked)
            return
