"""A destination driven in process the way ``olake write`` drives it: record data decoded as the write
pipeline decodes a batch of lines, gathered by the pipeline's stream buffers, committed with a STATE
(for tests and benchmarks that look at a destination's files between commits)."""

from __future__ import annotations

from olake_cli.core.catalog import Catalog
from olake_cli.core.contracts import Destination
from olake_cli.core.record_block import BlockDecoder
from olake_cli.core.state import State
from olake_cli.pipeline.stream_buffer import StreamBuffers


class BufferedWriter:
    """``destination`` opened for ``catalog``, taking record data and STATEs."""

    def __init__(self, destination: Destination, catalog: Catalog) -> None:
        self.destination = destination
        self.buffers = StreamBuffers(destination, lambda line: None)
        self.buffers.open(catalog)
        self.decoders = {s.key: BlockDecoder(s.json_schema, s.namespace) for s in catalog.streams}

    def add(self, key: tuple, rows: list[dict]) -> None:
        """Record data objects of one stream (full-load rows, or changes with their ``_olake_*`` fields)."""
        self.buffers.add(key, self.decoders[key].decode_rows(rows, []), [])

    def commit(self, state: State) -> None:
        """Commit what came before ``state`` with it."""
        _, batches = self.buffers.take(state)
        self.destination.commit(batches)
