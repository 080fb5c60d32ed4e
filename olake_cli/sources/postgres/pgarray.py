"""PostgreSQL array text (``array_out``, what pgoutput sends and ``::text`` prints) -> Python values.

Elements stay text (or None for NULL); ``pgtext`` converts them. A column of one shape (every value
of its depth, every lower bound 1) becomes nested lists of that depth: a one-dimensional literal has a
fast path, deeper ones are parsed level by level. A column whose values vary (``ndarray<T>``) keeps
each value's exact shape: PostgreSQL prints ``[lo:hi]...=`` before a literal when a lower bound is
not 1, and ``parse_any_literal`` returns the lower bounds, the lengths and the elements in row-major
order. A value of another shape than its column's fails with ``SHAPE_CHANGED``: what to do.
"""

from __future__ import annotations

import re
from functools import lru_cache

_ESCAPED_CHAR_RE = re.compile(r"\\(.)", re.DOTALL)
_DIMENSION_RE = re.compile(r"\[(-?\d+):(-?\d+)\]")
SHAPE_CHANGED = ("the column's arrays changed shape since discover ran; nothing after the last committed "
                 "state is acknowledged: run discover again (with --catalog to keep your edits; it reads "
                 "each array column's shapes from the data, and a column of varying shapes becomes "
                 "ndarray<T>) and let the stream load anew")


class BadText(ValueError):
    """A PostgreSQL text value that cannot (or must not) be converted."""


def element_delimiter(pg_type: str) -> str:
    """The delimiter of an array type's text (``format_type`` name): box is the only built-in type whose
    arrays are delimited by ';' instead of ','."""
    return ";" if pg_type.startswith("box") else ","


def _strip_bounds(text: str, depth: int) -> str:
    """The literal of a column of ``depth`` dimensions, refused when it carries ``[lo:hi]...=``
    (PostgreSQL prints it only when a lower bound is not 1, and nested lists cannot carry it)."""
    if text.startswith("["):
        raise BadText(f"an array with dimensions {text[:text.find('=')]} (a lower bound other than 1) in a "
                      f"column of {_dimensions(depth)} starting at 1; {SHAPE_CHANGED}")
    return text


def _dimensions(depth: int) -> str:
    return "1 dimension" if depth == 1 else f"{depth} dimensions"


def _depth_error(text: str, depth: int) -> BadText:
    return BadText(f"a {_depth_of(text)}-dimensional value in a column of {_dimensions(depth)}; {SHAPE_CHANGED}")


def parse_array_literal(text: str, delimiter: str = ",") -> list[str | None]:
    """The elements of a one-dimensional PostgreSQL array literal (text or None); ValueError if bad."""
    text = _strip_bounds(text, 1)
    if len(text) < 2 or text[0] != "{" or text[-1] != "}":
        raise BadText("not an array literal")
    body = text[1:-1]
    if not body:
        return []
    if body[0] == "{":
        raise _depth_error(text, 1)
    if '"' not in body:  # unquoted elements never hold quotes, backslashes, spaces or delimiters
        items = body.split(delimiter)
        if "" in items:
            raise BadText("malformed array literal")
        return [None if item == "NULL" else item for item in items]
    return _parse_quoted_elements(body, delimiter)


def _parse_quoted_elements(body: str, delimiter: str) -> list[str | None]:
    """Elements of an array body holding quoted elements (validated: malformed text raises)."""
    if "\\" in body:
        return _parse_escaped_elements(body, delimiter)
    parts = body.split('"')  # no escapes: outside, quoted, outside, quoted, ..., outside
    last = len(parts) - 1
    if last % 2:
        raise BadText("unterminated quoted array element")
    items: list[str | None] = []
    for index, part in enumerate(parts):
        if index % 2:
            items.append(part)
        else:
            items.extend(_unquoted_elements(part, delimiter, index > 0, index < last))
    return items


def _unquoted_elements(stretch: str, delimiter: str, after_quote: bool,
                       before_quote: bool) -> list[str | None]:
    """The unquoted elements in a stretch of array body that quoted elements bound."""
    pieces = stretch.split(delimiter)
    start = 1 if after_quote else 0  # a closing quote must be followed by a delimiter
    stop = len(pieces) - 1 if before_quote else len(pieces)  # an opening one preceded by one
    if (stop < start or (after_quote and pieces[0]) or (before_quote and pieces[-1])
            or "" in pieces[start:stop] or "{" in stretch or "}" in stretch):
        raise BadText("malformed array literal")
    return [None if piece == "NULL" else piece for piece in pieces[start:stop]]


def _parse_escaped_elements(body: str, delimiter: str) -> list[str | None]:
    body_re, element_re = _element_patterns(delimiter)
    if body_re.fullmatch(body) is None:
        raise BadText("malformed array literal")
    items: list[str | None] = []
    for quoted, plain in element_re.findall(body):
        if quoted:
            item = quoted[1:-1]
            items.append(_ESCAPED_CHAR_RE.sub(r"\1", item) if "\\" in item else item)
        else:
            items.append(None if plain == "NULL" else plain)
    return items


@lru_cache(maxsize=8)
def _element_patterns(delimiter: str) -> tuple[re.Pattern, re.Pattern]:
    """(whole body, one element) patterns of a one-dimensional array body with this delimiter."""
    d = re.escape(delimiter)
    element = rf'("(?:[^"\\]|\\.)*")|([^"{{}}\\{d}]*)'
    body = re.compile(rf"(?:{element})(?:{d}(?:{element}))*", re.DOTALL)
    return body, re.compile(rf"(?:^|{d})(?:{element})", re.DOTALL)


def _depth_of(text: str) -> int:
    return len(text) - len(text.lstrip("{"))


def parse_nested_literal(text: str, delimiter: str, depth: int) -> list:
    """The nested lists of a ``depth``-dimensional PostgreSQL array literal (elements text or None)."""
    text = _strip_bounds(text, depth)
    if text != "{}" and _depth_of(text) != depth:
        raise _depth_error(text, depth)
    value, end = _parse_level(text, 0, delimiter)
    if end != len(text):
        raise BadText("malformed array literal")
    return value


def parse_any_literal(text: str, delimiter: str = ",") -> dict:
    """Any array literal as ``{"lower_bounds", "lengths", "elements"}`` (elements text or None, in
    row-major order; ``{}`` has no dimensions)."""
    lower: list[int] | None = None
    if text.startswith("["):
        prefix, _, text = text.partition("=")
        bounds = [(int(lo), int(hi)) for lo, hi in _DIMENSION_RE.findall(prefix)]
        if "".join(f"[{lo}:{hi}]" for lo, hi in bounds) != prefix:
            raise BadText("malformed array dimensions")
        lower = [lo for lo, _ in bounds]
    depth = _depth_of(text)
    if depth <= 1:
        elements = parse_array_literal(text, delimiter)
        lengths = [len(elements)] if elements else []
    else:
        value, end = _parse_level(text, 0, delimiter)
        if end != len(text):
            raise BadText("malformed array literal")
        lengths, elements = _flatten(value, depth)
    if lower is not None and (len(bounds) != len(lengths)
                              or any(hi - lo + 1 != n for (lo, hi), n in zip(bounds, lengths))):
        raise BadText("array dimensions do not match its elements")
    return {"lower_bounds": lower or [1] * len(lengths), "lengths": lengths, "elements": elements}


def _flatten(value: list, depth: int) -> tuple[list[int], list]:
    """(lengths, elements in row-major order) of nested lists ``depth`` deep; sub-arrays must agree."""
    lengths, level = [], value
    for _ in range(depth):
        if not isinstance(level, list) or not level:
            raise BadText("malformed array literal")
        lengths.append(len(level))
        level = level[0]
    rows = [value]
    for length in lengths[:-1]:
        if any(not isinstance(row, list) or len(row) != length for row in rows):
            raise BadText("sub-arrays of different lengths")
        rows = [item for row in rows for item in row]
    if any(not isinstance(row, list) or len(row) != lengths[-1] for row in rows):
        raise BadText("sub-arrays of different lengths")
    elements = [item for row in rows for item in row]
    if any(isinstance(item, list) for item in elements):
        raise BadText("sub-arrays of different depths")
    return lengths, elements


def _parse_level(text: str, pos: int, delimiter: str) -> tuple[list, int]:
    """One ``{...}`` level of an array literal starting at ``pos``; returns it and the end position."""
    if text[pos] != "{":
        raise BadText("malformed array literal")
    pos += 1
    items: list = []
    if text[pos] == "}":
        return items, pos + 1
    while True:
        if text[pos] == "{":
            item, pos = _parse_level(text, pos, delimiter)
        elif text[pos] == '"':
            end, chars = pos + 1, []
            while text[end] != '"':
                end += text[end] == "\\"  # a backslash escapes the next character
                chars.append(text[end])
                end += 1
            item, pos = "".join(chars), end + 1
        else:
            end = pos
            while text[end] != delimiter and text[end] != "}":
                end += 1
            if end == pos:
                raise BadText("malformed array literal")
            item, pos = (None if text[pos:end] == "NULL" else text[pos:end]), end
        items.append(item)
        if text[pos] == "}":
            return items, pos + 1
        if text[pos] != delimiter:
            raise BadText("malformed array literal")
        pos += 1
