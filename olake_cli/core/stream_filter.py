"""Which discovered streams a source config's ``include`` and ``exclude`` patterns keep.

A pattern is a shell-style wildcard (``*``, ``?``, ``[...]``; case-sensitive) matched against a
stream's ``namespace.name`` and against its bare ``name``: ``sales.*`` keeps every table of schema
``sales``, ``orders`` a table (or collection) called ``orders`` in any namespace, ``*.tmp_*`` any
name starting ``tmp_``. Without ``include`` every stream is kept; ``exclude`` wins over ``include``.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from collections.abc import Sequence

from olake_cli.core.errors import ConfigError


def matches(pattern: str, namespace: str | None, name: str) -> bool:
    """Whether ``pattern`` names the stream ``namespace.name``."""
    return fnmatchcase(name, pattern) or (namespace is not None and fnmatchcase(f"{namespace}.{name}", pattern))


def kept(namespace: str | None, name: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Whether the patterns keep the stream ``namespace.name``."""
    if any(matches(p, namespace, name) for p in exclude):
        return False
    return not include or any(matches(p, namespace, name) for p in include)


def keep_streams(found: list[tuple[str | None, str]], include: Sequence[str], exclude: Sequence[str],
                 source: str) -> list[tuple[str | None, str]]:
    """The (namespace, name) pairs the patterns keep; a ConfigError when they keep none of several."""
    chosen = [(ns, name) for ns, name in found if kept(ns, name, include, exclude)]
    if found and not chosen:
        raise ConfigError(f"{source}: 'include'/'exclude' leave none of the {len(found)} table(s) found "
                          f"(include {list(include) or 'everything'}, exclude {list(exclude)})")
    return chosen
