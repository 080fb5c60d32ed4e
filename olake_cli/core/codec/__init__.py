"""The codec: olake's types and their values, between a source's Arrow batches, RECORD wire values and
the destination's Arrow types.

Its modules build on each other in this order; none imports one below it in the list:

    types       each ``x-olake-type``: its destination Arrow type, its wire value, array shapes
    bad_value   a value that cannot be carried, and the error naming its stream, column and row
    airbyte_types  Airbyte's JSON Schema types as olake types, Airbyte's values as wire values (both ways)
    encode      Arrow columns (as a source scanned them) -> wire values
    decode      wire values -> Arrow columns of the destination types
    scanned     a scanned batch straight to the destination types (encode, then decode, per column)

``core.record_lines`` (Arrow -> RECORD lines) builds on ``encode``; connector-specific encodings stay
with their connector (a source whose driver yields dates or timestamps its own way passes an
``InstantReader`` to ``encode.wire_values``).
"""
