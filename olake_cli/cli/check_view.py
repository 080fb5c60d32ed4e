"""How ``olake check`` shows its outcome: lines a person reads on a terminal, or a protocol message.

A check text (a connector's success text, or the message of the error it raised) is a first line
saying what was checked, then one line per finding; a line indented by two spaces is an item of the
line above it (a problem with its fix, one table). On a terminal the lines are printed once, as
they are. Otherwise stdout gets the CONNECTION_STATUS message and stderr one line, both the text
joined into one line: ``first; finding; heading: item; item``.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from olake_cli.cli.report import exit_status, fail, log, log_format, protocol_writer
from olake_cli.core import messages
from olake_cli.core.config import load_config
from olake_cli.core.errors import ConfigError, OlakeError
from olake_cli.core.registry import DESTINATIONS, SOURCES

ITEM_INDENT = "  "


def show_check_passed(text: str) -> None:
    """Show a successful check."""
    if _on_terminal():
        _print_lines("olake: ", text)
        return
    protocol_writer().write(messages.connection_status(True, one_line(text)))
    log(one_line(text))


def show_check_failed(error: OlakeError) -> NoReturn:
    """Show a failed check and exit non-zero (on a terminal its lines, else the message and a TRACE)."""
    if _on_terminal():
        _print_lines("olake: error: ", error.message)
        sys.exit(exit_status(error))
    flat = one_line(error.message)
    out = protocol_writer()
    out.write(messages.connection_status(False, flat))
    out.flush()
    error.message = flat  # the TRACE and the stderr line say the same, on one line
    fail(error)


def guessed_side_note(path: str, role: str, kind: str) -> str:
    """For a config ``check --config`` took for ``role`` although its type is a source and a destination:
    a finding line saying so and, when the file is a valid config of the other side too, the command that
    checks it as that ("" for a type of one side only, or a file that fits one side only)."""
    if kind not in SOURCES or kind not in DESTINATIONS:
        return ""
    other = "destination" if role == "source" else "source"
    try:
        load_config(path, other)
    except ConfigError:
        return ""
    return f"\nchecked as a {role}; it fits a {other} too: olake check --{other} {path}"


def one_line(text: str) -> str:
    """A check text on one line: lines joined by ``; ``, an item after its heading's colon (or after an
    item that ends with its own ``;``, a SQL statement) by a space."""
    joined = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        if not joined:
            joined = line.strip()
        elif line.startswith(ITEM_INDENT) and joined.endswith((":", ";")):  # items that are statements
            joined += " " + line.strip()
        else:
            joined += "; " + line.strip()
    return joined


def _on_terminal() -> bool:
    """Whether a person reads stdout (and stderr is plain text): then the lines are shown once."""
    return sys.stdout.isatty() and log_format() == "text"


def _print_lines(prefix: str, text: str) -> None:
    """The first line after ``prefix``; each finding indented under it, items as ``- item``."""
    first, *rest = [line for line in text.splitlines() if line.strip()]
    shown = [prefix + first]
    for line in rest:
        if line.startswith(ITEM_INDENT):
            shown.append(f"{ITEM_INDENT * 2}- {line.strip()}")
        else:
            shown.append(ITEM_INDENT + line)
    sys.stderr.write("\n".join(shown) + "\n")
    sys.stderr.flush()
