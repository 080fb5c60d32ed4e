"""PostgreSQL source settings and connections (psycopg for control, ADBC for Arrow scans)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from olake_cli.core.errors import ConnectionFailed

DEFAULT_CHUNK_ROWS = 250_000
DEFAULT_BATCH_ROWS = 10_000


@dataclass(frozen=True)
class PostgresSettings:
    """The validated ``postgres`` source config, with defaults applied."""

    host: str
    database: str
    username: str
    password: str = field(default="", repr=False)
    port: int = 5432
    schemas: tuple[str, ...] = ("public",)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    sslmode: str = "prefer"
    connect_timeout: int = 10
    chunk_strategy: str = "ctid"
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_parallel: int | None = None
    replication_slot: str | None = None
    publication: str | None = None
    create_slot_and_publication: bool = False
    on_position_lost: str = "resync"

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "PostgresSettings":
        """Build settings from a config dict already validated against the source schema."""
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in cfg.items() if k in known}
        for name in ("schemas", "include", "exclude"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)

    def conninfo(self) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect``."""
        return {"host": self.host, "port": self.port, "dbname": self.database, "user": self.username,
                "password": self.password, "sslmode": self.sslmode, "connect_timeout": self.connect_timeout,
                "application_name": "olake"}

    def uri(self) -> str:
        """A postgresql:// URI for ADBC (contains the password: never print it)."""
        auth = quote(self.username, safe="")
        if self.password:
            auth += ":" + quote(self.password, safe="")
        return (f"postgresql://{auth}@{self.host}:{self.port}/{quote(self.database, safe='')}"
                f"?sslmode={self.sslmode}&connect_timeout={self.connect_timeout}&application_name=olake")

    def describe(self) -> str:
        """host:port/database as users know it, without secrets."""
        return f"{self.username}@{self.host}:{self.port}/{self.database}"


def connect(settings: PostgresSettings, autocommit: bool = True):
    """Open a psycopg connection, turning failures into one actionable ConnectionFailed line."""
    import psycopg

    try:
        return psycopg.connect(**settings.conninfo(), autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise ConnectionFailed(explain_connect_error(settings, str(exc))) from None


def explain_connect_error(settings: PostgresSettings, raw: str) -> str:
    """Map a libpq error text to a one-line hint naming what to fix (never the password)."""
    text = scrub(raw, settings.password).strip().splitlines()
    detail = text[-1].strip() if text else "unknown error"
    lowered = raw.lower()
    where = f"{settings.host}:{settings.port}"
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        hint = f"wrong username or password for user '{settings.username}'"
    elif f'database "{settings.database}" does not exist'.lower() in lowered:
        hint = f"database '{settings.database}' does not exist on {where}"
    elif "could not translate host name" in lowered or "name or service not known" in lowered:
        hint = f"unknown host '{settings.host}'; check 'host'"
    elif "connection refused" in lowered:
        hint = f"nothing accepts connections at {where}; check 'host' and 'port' and that PostgreSQL runs"
    elif "timeout" in lowered or "timed out" in lowered:
        hint = f"connecting to {where} timed out after {settings.connect_timeout}s; check 'host', 'port' and firewalls"
    elif "no pg_hba.conf entry" in lowered:
        hint = f"the server at {where} refuses this client (pg_hba.conf)"
    else:
        hint = f"cannot connect to {where}"
    return f"postgres: {hint} ({detail})"


def scrub(text: str, secret: str) -> str:
    """Remove a secret from a text before it is shown anywhere."""
    if secret:
        text = text.replace(secret, "***").replace(quote(secret, safe=""), "***")
    return text
