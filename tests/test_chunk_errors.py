"""A chunk that fails with another library's exception reports it as one SourceError that keeps where it
was raised: the stack travels back from the task (pickled, as Spark sends it) into the TRACE."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pyarrow as pa

from olake_cli.core.errors import SourceError
from olake_cli.pipeline.chunk_job import ChunkJob, run_chunk_job


class _ReaderThatBreaks:
    """A chunk reader whose library fails on the first rows."""

    def read_batches(self) -> Iterator[pa.RecordBatch]:
        yield _decode_rows()


def _decode_rows() -> pa.RecordBatch:
    return {}["missing"]


def test_a_library_error_in_a_chunk_keeps_its_stack_across_the_task_boundary(tmp_path):
    job = ChunkJob("t", "public", 3, _ReaderThatBreaks(), {"type": "object", "properties": {"id": {"type": "integer"}}})
    result = pickle.loads(pickle.dumps(run_chunk_job(job)))
    assert isinstance(result.error, SourceError)
    assert str(result.error) == "chunk 3 of public.t: KeyError: 'missing'"
    stack = result.error.stack_trace
    assert stack is not None and "_decode_rows" in stack and "read_batches" in stack, stack
    assert stack.rstrip().endswith("KeyError: 'missing'"), stack


def test_an_olake_error_keeps_what_was_set_after_it_was_made_when_pickled():
    error = SourceError("the message")
    error.internal_message, error.stack_trace = "detail", "where"
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.message, again.internal_message, again.stack_trace) == (
        SourceError, "the message", "detail", "where")
