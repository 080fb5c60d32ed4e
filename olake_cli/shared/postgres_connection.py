"""Connecting to PostgreSQL, shared by the ``postgres`` source and the ``postgres`` destination.

One implementation of the connection fields (host, port, database, credentials, TLS files), of
turning a failed connection into one line saying what to fix, and of keeping the password out of
every text: both connectors build their settings on :class:`ConnectionSettings` and connect with
:func:`connect`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from olake_cli.core.config import config_files
from olake_cli.core.errors import ConfigError, ConnectionFailed, ServerUnreachable
from olake_cli.core.redact import remove_secrets

TLS_FILE_FIELDS = ("sslrootcert", "sslcert", "sslkey")
# libpq's words for a server that is starting, stopping or full, or a network that does not reach it
SERVER_DOWN = ("the database system is", "too many clients", "remaining connection slots", "temporary failure",
               "no route to host", "network is unreachable", "server closed the connection unexpectedly")


@dataclass(frozen=True)
class ConnectionSettings:
    """Where and how to connect (validated config fields, TLS paths made absolute)."""

    host: str
    database: str
    username: str
    password: str = field(default="", repr=False)
    port: int = 5432
    sslmode: str = "prefer"
    sslrootcert: str | None = None  # absolute paths (resolved by from_config), or "system" for the root
    sslcert: str | None = None
    sslkey: str | None = None
    connect_timeout: int = 10

    @classmethod
    def from_config(cls, cfg: dict[str, Any]):
        """Settings from a config dict already validated against the connector's schema (fields the
        class does not know are ignored)."""
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in cfg.items() if k in known}
        values.update(_tls_files(values))
        return cls(**values)

    def tls_options(self) -> dict[str, str]:
        """The libpq TLS parameters that are set: sslmode, and sslrootcert, sslcert, sslkey if given."""
        options = {"sslmode": self.sslmode}
        for name in TLS_FILE_FIELDS:
            if getattr(self, name):
                options[name] = getattr(self, name)
        return options

    def conninfo(self) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect``."""
        return {"host": self.host, "port": self.port, "dbname": self.database, "user": self.username,
                "password": self.password, **self.tls_options(), "connect_timeout": self.connect_timeout,
                "application_name": "olake"}

    def uri(self) -> str:
        """A postgresql:// URI for ADBC (contains the password: never print it); libpq reads the TLS
        parameters from its query, percent-decoded, exactly as from ``conninfo``."""
        auth = quote(self.username, safe="")
        if self.password:
            auth += ":" + quote(self.password, safe="")
        query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in
                         {**self.tls_options(), "connect_timeout": self.connect_timeout,
                          "application_name": "olake"}.items())
        return f"postgresql://{auth}@{self.host}:{self.port}/{quote(self.database, safe='')}?{query}"

    def describe(self) -> str:
        """host:port/database as users know it, without secrets."""
        return f"{self.username}@{self.host}:{self.port}/{self.database}"

    def scrub(self, text: str) -> str:
        """``text`` without the password (see core.redact; the user name stays readable)."""
        return remove_secrets(text, [self.password], keep=[self.username])


def _tls_files(values: dict[str, Any]) -> dict[str, str]:
    """The configured certificate and key paths made absolute; ``sslrootcert: system`` (libpq 16+: the
    system's CAs) as it is; the client certificate and its key only together."""
    found = config_files("postgres", values, TLS_FILE_FIELDS,
                         keep=lambda name, path: name == "sslrootcert" and path == "system")
    if bool(values.get("sslcert")) != bool(values.get("sslkey")):
        raise ConfigError("postgres: give 'sslcert' and 'sslkey' together (the client certificate and its key)")
    return found


def connect(settings: ConnectionSettings, autocommit: bool = True):
    """Open a psycopg connection, turning failures into one actionable line: a ServerUnreachable (transient)
    for a server that is down, starting or full or out of reach, else a ConnectionFailed (fix the config)."""
    import psycopg

    try:
        return psycopg.connect(**settings.conninfo(), autocommit=autocommit)
    except psycopg.OperationalError as exc:
        hint, down = _connect_hint(settings, str(exc).lower())
        raise (ServerUnreachable if down else ConnectionFailed)(_with_detail(settings, hint, str(exc))) from None


def _with_detail(settings: ConnectionSettings, hint: str, raw: str) -> str:
    """``postgres: hint (libpq's cause)``, without the password."""
    text = [line.strip() for line in settings.scrub(raw).strip().splitlines() if line.strip()]
    failed = [line for line in text if "failed:" in line]  # libpq's cause, not its closing advice
    detail = (failed or text or ["unknown error"])[-1]
    return f"postgres: {hint} ({detail})"


def _connect_hint(settings: ConnectionSettings, lowered: str) -> tuple[str, bool]:
    """What a failed connection's (lower-cased) text means, and whether the server is down or out of reach
    rather than the config wrong."""
    where = f"{settings.host}:{settings.port}"
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return f"wrong username or password for user '{settings.username}'", False
    if f'database "{settings.database}" does not exist'.lower() in lowered:
        return f"database '{settings.database}' does not exist on {where}", False
    if "could not translate host name" in lowered and "temporary failure" not in lowered \
            or "name or service not known" in lowered:
        return f"unknown host '{settings.host}'; check 'host'", False
    if "connection refused" in lowered:
        return f"nothing accepts connections at {where}; check 'host' and 'port' and that PostgreSQL runs", True
    if "timeout" in lowered or "timed out" in lowered:
        return (f"connecting to {where} timed out after {settings.connect_timeout}s; check 'host', 'port' and "
                f"firewalls"), True
    if tls := _tls_hint(settings, lowered, where):
        return tls, False
    if "no pg_hba.conf entry" in lowered:
        return f"the server at {where} refuses this client (pg_hba.conf)", False
    if f'permission denied for database "{settings.database}"'.lower() in lowered:
        return (f"user '{settings.username}' may not connect to database '{settings.database}'; run as an "
                f"administrator: GRANT CONNECT ON DATABASE {_quoted(settings.database)} TO "
                f"{_quoted(settings.username)};"), False
    return f"cannot connect to {where}", any(sign in lowered for sign in SERVER_DOWN)


def _quoted(name: str) -> str:
    """An SQL identifier, always quoted (as psycopg quotes them)."""
    return '"' + name.replace('"', '""') + '"'


def _tls_hint(settings: ConnectionSettings, lowered: str, where: str) -> str | None:
    """What a TLS failure means and which config fields to check; None if it is not one."""
    files = f"'sslrootcert' ({settings.sslrootcert})" if settings.sslrootcert else "'sslrootcert' (not set)"
    if "no pg_hba.conf entry" in lowered and "no encryption" in lowered:
        return (f"the server at {where} accepts this client only over TLS, but 'sslmode' is "
                f"'{settings.sslmode}'; set 'sslmode' to require, verify-ca or verify-full")
    if "server does not support ssl" in lowered:
        return (f"the server at {where} does not offer TLS, but 'sslmode' is '{settings.sslmode}'; "
                f"enable ssl on the server, or lower 'sslmode'")
    if "root certificate file" in lowered and ("does not exist" in lowered or "could not" in lowered):
        return (f"'sslmode' {settings.sslmode} verifies the server certificate of {where} and needs the CA "
                f"that signed it: set 'sslrootcert' to its PEM file")
    if "does not match host name" in lowered or "no subjectaltname" in lowered:
        return (f"the server certificate of {where} does not name host '{settings.host}' ('sslmode' "
                f"verify-full); connect through a name the certificate lists (check 'host'), or use verify-ca")
    if "certificate verify failed" in lowered or "self-signed certificate" in lowered \
            or "unable to get local issuer" in lowered:
        return (f"the server certificate of {where} does not verify against {files}; check 'sslrootcert' "
                f"and 'sslmode'")
    if "requires a valid client certificate" in lowered or "certificate authentication failed" in lowered \
            or "alert unknown ca" in lowered or "alert certificate" in lowered or "alert bad certificate" in lowered:
        return (f"the server at {where} refuses the client certificate; check 'sslcert' and 'sslkey' "
                f"(a certificate its CA signed, for user '{settings.username}')")
    if "private key file" in lowered or "certificate file" in lowered or "certificate present" in lowered:
        return (f"cannot use the client certificate for {where}; check 'sslcert' and 'sslkey' (PEM files; "
                f"the key readable by this user only, mode 0600)")
    if "ssl" in lowered and ("error" in lowered or "handshake" in lowered):
        return f"the TLS handshake with {where} failed; check 'sslmode', 'sslrootcert', 'sslcert' and 'sslkey'"
    return None


# SQLSTATE classes and codes worth retrying: connection exceptions, serialization failures and
# deadlocks, insufficient resources, a backend terminated by an administrator or a server shutdown.
_TRANSIENT_CLASSES = ("08", "40", "53")
_TRANSIENT_CODES = ("57P01", "57P02", "57P03")


def is_transient(exc: BaseException) -> bool:
    """Whether a driver error may go away on retry (by SQLSTATE; a lost connection has none)."""
    state = sqlstate(exc)
    if state:
        return state[:2] in _TRANSIENT_CLASSES or state in _TRANSIENT_CODES
    text = str(exc).lower()
    if "failed to connect" in text or "could not connect" in text or "shutting down" in text \
            or "starting up" in text:  # an earlier connection worked: a server restarting, not a wrong address
        return True
    return "terminating connection" in text or "connection" in text and ("closed" in text or "reset" in text)


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE a driver error carries (psycopg and ADBC name it differently), if any."""
    state = getattr(exc, "sqlstate", None) or getattr(exc, "sqlstate_code", None)
    return state if isinstance(state, str) and state else None
