"""``olake state drop-slot``: remove the change log a source keeps for one pipeline (a replication slot)."""

from __future__ import annotations

from collections.abc import Callable

from olake_cli.core.config import load_config
from olake_cli.core.contracts import SlotOwner
from olake_cli.core.errors import ConfigError
from olake_cli.core.registry import make_source


def run_drop_slot(config_path: str, claim_only: bool, log: Callable[[str], None]) -> None:
    """Drop the slot (and publication, and claim) the source config names; each thing done on stderr."""
    _, kind, config = load_config(config_path, role="source")
    source = make_source(kind, config)
    if not isinstance(source, SlotOwner):
        raise ConfigError(f"{config_path}: a {kind} source keeps no replication slot (drop-slot is for postgres "
                          "sources)")
    for line in source.drop_slot(claim_only):
        log(line)
