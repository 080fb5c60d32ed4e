"""Names (namespaces, streams, tables) as path components that stay inside their destination's root.

Every destination that derives a folder or a table location from a name goes through ``encode_name``:
'%', '/', '\\', control characters, a leading '.' or '_' are percent-encoded (UTF-8 bytes), everything
else is kept. ``public``, ``orders`` and ``Mixed Case`` are unchanged, ``..`` becomes ``%2E.`` and
``x/../orders`` becomes ``x%2F..%2Forders``: one component that can neither climb out of its parent
folder nor land in another name's folder, nor hide from readers (names starting with '.' or '_').
``decode_name`` reverses it (``urllib.parse.unquote``).
"""

from __future__ import annotations

from urllib.parse import unquote

from olake_cli.core.errors import DestinationError

_ALWAYS_ENCODED = frozenset("%/\\")


def _percent(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))


def encode_name(name: str) -> str:
    """``name`` as one path component that cannot escape its folder or hide from readers."""
    if not name:
        raise DestinationError("an empty namespace, stream or table name cannot be a folder name")
    out = []
    for index, char in enumerate(name):
        unsafe = char in _ALWAYS_ENCODED or not char.isprintable() or (index == 0 and char in "._")
        out.append(_percent(char) if unsafe else char)
    return "".join(out)


def decode_name(component: str) -> str:
    """The name ``encode_name`` turned into ``component``."""
    return unquote(component)
