"""PostgreSQL LSNs: an ``int`` in memory, PostgreSQL's text form (``"16/B374D848"``) in JSON.

The text form keeps state files exact and readable: tools that read JSON numbers as doubles cannot
round it.
"""

from __future__ import annotations

import re

from olake_cli.core.errors import StateError
from olake_cli.core.opid import U64_MAX

_LSN_RE = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def parse_lsn(text: str) -> int:
    """Parse a PostgreSQL LSN such as ``"16/B374D848"`` into an integer."""
    match = _LSN_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise StateError(f"invalid LSN {text!r}; expected hexadecimal 'XXXXXXXX/XXXXXXXX'")
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)


def format_lsn(lsn: int) -> str:
    """Format an integer LSN the way PostgreSQL prints it (``"16/B374D848"``)."""
    if not 0 <= lsn <= U64_MAX:
        raise ValueError(f"LSN out of range: {lsn}")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
