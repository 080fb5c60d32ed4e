"""Who may read what olake writes: the process umask (077 unless ``OLAKE_UMASK`` says otherwise).

Every file and directory olake creates (state files, Parquet files and manifests, Iceberg tables and
their catalog) takes its mode from the umask, in the driver and in the Spark workers, which inherit it
from the process that starts their JVM. So setting it once at start makes them all private.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from olake_cli.core.errors import ConfigError

UMASK_ENV = "OLAKE_UMASK"
DEFAULT_UMASK = 0o077


def apply_umask(environ: Mapping[str, str] = os.environ) -> int:
    """Set the process umask to ``$OLAKE_UMASK`` (octal, e.g. ``022``) or 077; returns it.

    An invalid value is a ConfigError naming the variable. Child processes (the Spark JVM, hence its
    Python workers) inherit the umask.
    """
    raw = environ.get(UMASK_ENV)
    mask = DEFAULT_UMASK if raw is None or not raw.strip() else parse_umask(raw)
    os.umask(mask)
    return mask


def parse_umask(raw: str) -> int:
    """An octal umask from text: ``022``, ``0o027``, ``77``; anything else is a ConfigError."""
    text = raw.strip().lower().removeprefix("0o")
    if not text or len(text) > 4 or any(c not in "01234567" for c in text) or int(text, 8) > 0o777:
        raise ConfigError(f"environment variable {UMASK_ENV}={raw!r} is not an octal umask such as 077 or 022")
    return int(text, 8)


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(DEFAULT_UMASK)  # elsewhere: set and restore (briefly stricter, never looser)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode ``open(..., 'w')`` gives a new file under the current umask."""
    return 0o666 & ~current_umask()
