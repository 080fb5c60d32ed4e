"""PostgreSQL array text (``array_out``, what pgoutput sends and ``::text`` prints) -> nested lists.

Elements stay text (or None for NULL); ``core/pgtext`` converts them. A one-dimensional literal has
a fast path; deeper ones are parsed level by level. PostgreSQL prints ``[lo:hi]...=`` before a
literal only when a lower bound is not 1: nested lists cannot carry bounds, so such text fails.
"""

from __future__ import annotations

import re
from functools import lru_cache

_ESCAPED_CHAR_RE = re.compile(r"\\(.)", re.DOTALL)


class BadText(ValueError):
    """A PostgreSQL text value that cannot (or must not) be converted."""


def _strip_bounds(text: str) -> str:
    """The literal without its ``[lo:hi]...=`` prefix, which PostgreSQL prints only when a lower bound
    is not 1: nested lists cannot carry it, so it fails rather than being dropped."""
    if text.startswith("["):
        raise BadText(f"array lower bounds {text[:text.find('=')]} are not 1; lists cannot carry "
                       "them")
    return text


def parse_array_literal(text: str, delimiter: str = ",") -> list[str | None]:
    """The elements of a one-dimensional PostgreSQL array literal (text or None); ValueError if bad."""
    text = _strip_bounds(text)
    if len(text) < 2 or text[0] != "{" or text[-1] != "}":
        raise BadText("not an array literal")
    body = text[1:-1]
    if not body:
        return []
    if body[0] == "{":
        raise BadText(f"a {_depth_of(text)}-dimensional value in a column declared with 1 dimension")
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
    text = _strip_bounds(text)
    if text != "{}" and _depth_of(text) != depth:
        raise BadText(f"a {_depth_of(text)}-dimensional value in a column declared with {depth} "
                       "dimensions")
    value, end = _parse_level(text, 0, delimiter)
    if end != len(text):
        raise BadText("malformed array literal")
    return value


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
