"""Which pipeline a run belongs to: the destination it writes into and the state file it resumes from.

A change log that only one reader may move (a PostgreSQL replication slot) is claimed by one pipeline
(see ``sources/postgres/slot_claim``). A run knows what its command names: ``sync`` the destination
and perhaps a state file, ``read --state`` the state file only, ``read --state-from`` the destination.
Two identities are the same pipeline when every part both know is equal, and they share at least one;
they contradict each other when a part both know differs. Identities that share no part (``read --state``
then ``read --state-from``, the recovery of a lost state file) neither match nor contradict.
"""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass, replace

from olake_cli.core.airbyte_form import handed_by_client
from olake_cli.core.locks import lock_identity


@dataclass(frozen=True)
class PipelineIdentity:
    """The parts of a pipeline a run knows (None: not known to it), and a description for people."""

    destination: str | None = None  # where it writes, as its lock identity (core.locks.lock_identity)
    state_file: str | None = None  # the absolute path of its state file
    description: str = ""

    @property
    def known(self) -> bool:
        """Whether the run names a destination or a state file at all."""
        return self.destination is not None or self.state_file is not None

    def same_pipeline(self, other: PipelineIdentity) -> bool:
        """Every part both know is equal, and they know at least one part in common."""
        pairs = [(a, b) for a, b in ((self.destination, other.destination), (self.state_file, other.state_file))
                 if a is not None and b is not None]
        return bool(pairs) and all(a == b for a, b in pairs)

    def contradicts(self, other: PipelineIdentity) -> bool:
        """Some part both know differs."""
        return any(a is not None and b is not None and a != b
                   for a, b in ((self.destination, other.destination), (self.state_file, other.state_file)))

    def filled_from(self, other: PipelineIdentity) -> PipelineIdentity:
        """This identity with the parts it lacks taken from ``other`` (a claim learns the destination)."""
        return replace(self, destination=self.destination or other.destination,
                       state_file=self.state_file or other.state_file)


def pipeline_identity(command: str, destination_lock: str | None, destination_config: str | None,
                      state_file: str | None) -> PipelineIdentity:
    """The identity of this run: ``command`` (``sync``, ``read``), the destination by its lock file (the
    one destination ↔ one lock of ``core.locks``) and its config file, the state file (made absolute);
    described with this host and user. A state file an Airbyte client made for this run names no pipeline
    (it is new each run: ``airbyte_form.handed_by_client``)."""
    state = os.path.abspath(state_file) if state_file and not handed_by_client(state_file) else None
    parts = [f"olake {command}"]
    if destination_config:
        parts.append(f"into the destination of {os.path.abspath(destination_config)}")
    parts.append(f"with state file {state}" if state else "without a state file")
    parts.append(f"on {_user()}@{socket.gethostname()}")
    return PipelineIdentity(lock_identity(destination_lock) if destination_lock else None, state, " ".join(parts))


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        return str(os.getuid())
