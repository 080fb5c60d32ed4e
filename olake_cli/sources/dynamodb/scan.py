"""The chunk reader of a DynamoDB stream: one parallel-scan segment, read in a Spark task as Arrow batches.

A chunk is a segment (``Segment``/``TotalSegments``) from a start key (None: the segment's start). Its
bounds in the state are ``min = [chunk number, "segment/total", start key as DynamoDB JSON or null]``
and ``max = null``. A task stops after ``checkpoint_items`` items, at a page end; the pipeline then
commits what it read as this chunk and adds a chunk for the rest of the segment, starting at the
``LastEvaluatedKey`` (:meth:`DynamoChunkReader.rest_of_chunk`), so a killed full load resumes inside
its segment. The chunk number comes first so that chunks sort in the order they were added.

A page whose numbers outgrow their columns (``drift``) ends the chunk with a ``SchemaDrift`` carrying
the schema widened for the whole chunk (the rest of it is read for its numbers only): the read
pipeline widens the stream in place and reads the chunk again.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterator

from olake_cli.core.errors import OlakeError, SchemaDrift, SourceError, StateError
from olake_cli.sources.dynamodb.attributes import key_from_text, key_text
from olake_cli.sources.dynamodb.batches import items_to_batch
from olake_cli.sources.dynamodb.connection import DynamoSettings, aws_error
from olake_cli.sources.dynamodb.drift import widened_schema


def segment_bound(number: int, segment: int, total: int, start_key: str | None) -> list:
    """The ``min`` bound of a chunk: its number, its segment and the key the scan starts after."""
    return [str(number), f"{segment}/{total}", start_key]


def parse_segment_bound(bound: Any) -> tuple[int, int, str | None]:
    """(segment, total segments, start key text) of a chunk's ``min``; StateError if it is not one."""
    try:
        _, where, start = bound
        segment, total = (int(part) for part in where.split("/"))
        if not 0 <= segment < total or not (start is None or isinstance(start, str)):
            raise ValueError(where)
    except (TypeError, ValueError, AttributeError):
        raise StateError(f"chunk bound {bound!r} is not a DynamoDB scan segment "
                         "([number, \"segment/total\", start key or null])") from None
    return segment, total, start


@dataclass
class DynamoChunkReader:
    """The items of one segment of a table's parallel scan, from ``start_key`` on."""

    settings: DynamoSettings
    table: str
    segment: int
    total_segments: int
    start_key: str | None
    json_schema: dict
    key_names: tuple[str, ...]
    label: str = ""
    chunk_index: int = 0
    _resume: str | None = field(default=None, init=False, repr=False)

    def read_batches(self) -> Iterator[Any]:
        """One record batch per scan page, until the segment ends or ``checkpoint_items`` are read."""
        self._resume = None
        try:
            yield from self._pages()
        except OlakeError:
            raise
        except Exception as exc:  # botocore errors arrive as many types; report them as one
            raise aws_error(self.settings, exc, f"scanning segment {self.segment}/{self.total_segments} of "
                                                f"{self.label} (chunk {self.chunk_index})") from None

    def _pages(self) -> Iterator[Any]:
        pages = self._item_pages()
        for items in pages:
            try:
                batch = items_to_batch(items, self.json_schema, self.label, self.key_names)
            except SourceError as exc:
                widened = widened_schema(self.json_schema, itertools.chain(items, *pages))
                if widened is self.json_schema:
                    raise
                raise SchemaDrift(f"chunk {self.chunk_index}: {exc.message}", widened) from None
            yield batch

    def _item_pages(self) -> Iterator[list[dict]]:
        """The items of each scan page of the chunk (see ``checkpoint_items``)."""
        client = self.settings.client()
        request: dict[str, Any] = {"TableName": self.table, "Segment": self.segment,
                                   "TotalSegments": self.total_segments}
        if self.settings.page_items:
            request["Limit"] = self.settings.page_items
        if self.start_key is not None:
            request["ExclusiveStartKey"] = key_from_text(self.start_key)
        read = 0
        while True:
            page = client.scan(**request)
            items = page.get("Items") or []
            if items:
                yield items
                read += len(items)
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            request["ExclusiveStartKey"] = last
            if read >= self.settings.checkpoint_items:
                self._resume = key_text(last)
                return

    def resume_point(self) -> str | None:
        """After the batches: the key the rest of the segment starts after (None: segment done)."""
        return self._resume

    def rest_of_chunk(self, resume_point: str, number: int) -> tuple[list, None]:
        """The bounds of chunk ``number``: the rest of this segment after ``resume_point``."""
        return segment_bound(number, self.segment, self.total_segments, resume_point), None
