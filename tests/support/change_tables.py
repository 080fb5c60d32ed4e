"""The check that a typed change run (``sync``) gives the table ``write`` decodes from its RECORD lines."""

from __future__ import annotations

import orjson

from olake_cli.core.change_runs import ChangeRun
from olake_cli.core.record_block import BlockDecoder
from olake_cli.core.record_lines import encode_change_lines

HEAD = b'{"type":"RECORD","record":{"stream":"t","emitted_at":1,"data":'


def assert_typed_run_decodes_alike(typed: ChangeRun, json_run: ChangeRun, json_schema: dict) -> None:
    """``typed``'s table equals, value for value and type for type, what decoding the RECORD lines of
    ``json_run`` (the same changes as JSON texts) gives; warnings included."""
    assert typed.typed and not json_run.typed
    lines = encode_change_lines(json_run, HEAD)
    if not typed.data or not len(typed):  # a truncate (or nothing kept) goes as lines
        return
    decoder, warnings = BlockDecoder(json_schema, "public"), []
    decoded = decoder.decode(lines, warnings)
    if decoded is None:  # nested or interval columns: the line path
        decoded = decoder.decode_rows([orjson.loads(line)["record"]["data"] for line in lines.splitlines()], warnings)
    table = typed.table(json_schema)
    assert table.schema == decoded.schema
    for name in table.column_names:  # Arrow's own text: NaN equals NaN, and BC dates print
        typed_text, decoded_text = (t.column(name).combine_chunks().to_string(window=1 << 20, container_window=1 << 20)
                                    for t in (table, decoded))
        assert typed_text == decoded_text, name
    assert typed.warnings == warnings
