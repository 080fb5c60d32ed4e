"""MongoDB source settings, clients, and driver errors turned into one clear line without secrets."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from olake_cli.core.config import config_files
from olake_cli.core.errors import (
    ConfigError, ConnectionFailed, OlakeError, ServerUnreachable, SourceError, TransientError,
)
from olake_cli.core.redact import remove_secrets

DEFAULT_READ_PREFERENCE = "secondaryPreferred"
_AUTH_FAILED, _UNAUTHORIZED, _NAMESPACE_NOT_FOUND = 18, 13, 26


@dataclass(frozen=True)
class MongoSettings:
    """The validated ``mongodb`` source config, with defaults applied (picklable: tasks get a copy)."""

    database: str
    uri: str | None = field(default=None, repr=False)  # may hold a password: never printed
    hosts: tuple[str, ...] = ()
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    auth_source: str | None = None
    replica_set: str | None = None
    tls: bool | None = None
    tls_ca_file: str | None = None  # absolute paths (resolved by from_config)
    tls_certificate_key_file: str | None = None
    tls_allow_invalid_certificates: bool | None = None
    collections: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    read_preference: str | None = None
    sample_size: int = 1000
    chunk_documents: int = 250_000
    batch_documents: int = 10_000
    max_parallel: int | None = None
    on_position_lost: str = "resync"
    connect_timeout: int = 10

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> MongoSettings:
        """Settings from a config already validated against the source schema; exactly one of
        ``uri`` and ``hosts`` must be given (a ConfigError says so otherwise)."""
        if ("uri" in cfg) == ("hosts" in cfg):
            found = "both" if "uri" in cfg else "neither"
            raise ConfigError(f"mongodb: give either 'uri' (a connection string) or 'hosts' (with 'username' "
                              f"and 'password'), not both; found {found}")
        uri = cfg.get("uri")
        if uri is not None and not uri.lower().startswith(("mongodb://", "mongodb+srv://")):
            raise ConfigError("mongodb: 'uri' must start with mongodb:// or mongodb+srv://")
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in cfg.items() if k in known}
        for name in ("hosts", "collections", "include", "exclude"):
            if name in values:
                values[name] = tuple(values[name])
        values.update(config_files("mongodb", values, _TLS_FILE_FIELDS))
        return cls(**values)

    # ------------------------------------------------------------------ clients

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``pymongo.MongoClient`` (besides the uri or host list)."""
        millis = self.connect_timeout * 1000
        options: dict[str, Any] = {
            "serverSelectionTimeoutMS": millis, "connectTimeoutMS": millis, "appname": "olake",
            "uuidRepresentation": "standard", "datetime_conversion": "DATETIME_MS",
            "readPreference": self.effective_read_preference(),
        }
        if self.username is not None:
            options["username"] = self.username
        if self.password is not None:
            options["password"] = self.password
        if self.auth_source is not None or (self.uri is None and self.username is not None):
            options["authSource"] = self.auth_source or "admin"
        if self.replica_set:
            options["replicaSet"] = self.replica_set
        for key, value in (("tls", self.tls), ("tlsCAFile", self.tls_ca_file),
                           ("tlsCertificateKeyFile", self.tls_certificate_key_file),
                           ("tlsAllowInvalidCertificates", self.tls_allow_invalid_certificates)):
            if value is not None:
                options[key] = value
        return options

    def client(self, **kw: Any):
        """A new ``MongoClient`` (connects lazily; server selection gives up after ``connect_timeout``).

        A malformed uri or option is a ConfigError (the driver's warnings about unknown or invalid uri
        options too: they would otherwise be ignored silently).
        """
        from pymongo import MongoClient
        from pymongo.errors import ConfigurationError

        options = {**self.client_options(), **kw}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if self.uri is not None:
                    client = MongoClient(self.uri, **options)
                else:
                    client = MongoClient(host=list(self.hosts), **options)
            except (ConfigurationError, ValueError, TypeError) as exc:
                raise ConfigError(f"mongodb: invalid connection settings: {_detail(self, exc)}") from None
        problems = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        if problems:
            client.close()
            raise ConfigError(f"mongodb: invalid connection settings: {self.scrub('; '.join(problems))}")
        return client

    def effective_read_preference(self) -> str:
        """The configured read preference, else the uri's own, else secondaryPreferred."""
        if self.read_preference:
            return self.read_preference
        return _uri_options(self.uri).get("readpreference") or DEFAULT_READ_PREFERENCE

    # ------------------------------------------------------------------ messages

    def where(self) -> str:
        """The servers as users wrote them (host:port list or SRV name), without credentials."""
        if self.uri is None:
            return ",".join(self.hosts)
        return _uri_hosts(self.uri)

    def user(self) -> str | None:
        """The user name logging in, from the config or the uri."""
        if self.username is not None:
            return self.username
        user, _ = _uri_credentials(self.uri)
        return user

    def describe(self) -> str:
        """``user@host:port/database`` as users know it, never the password."""
        user = self.user()
        return f"{user + '@' if user else ''}{self.where()}/{self.database}"

    def scrub(self, text: str) -> str:
        """``text`` without the password or a mongodb:// URI's (see core.redact; the user stays readable)."""
        return remove_secrets(text, [self.password, _uri_credentials(self.uri)[1]], keep=[self.user()])


_TLS_FILE_FIELDS = ("tls_ca_file", "tls_certificate_key_file")


# ---------------------------------------------------------------------- uri parsing (no DNS)


def _uri_netloc_and_query(uri: str | None) -> tuple[str, str]:
    if not uri:
        return "", ""
    rest = uri.split("://", 1)[-1]
    rest, _, query = rest.partition("?")
    netloc = rest.split("/", 1)[0]
    return netloc, query


def _uri_credentials(uri: str | None) -> tuple[str | None, str | None]:
    """(user, password) a uri carries, percent-decoded."""
    netloc, _ = _uri_netloc_and_query(uri)
    if "@" not in netloc:
        return None, None
    userinfo = netloc.rpartition("@")[0]
    user, sep, password = userinfo.partition(":")
    return unquote(user), (unquote(password) if sep else None)


def _uri_hosts(uri: str) -> str:
    netloc, _ = _uri_netloc_and_query(uri)
    return netloc.rpartition("@")[2]


def _uri_options(uri: str | None) -> dict[str, str]:
    """The uri's query options, keys lower-cased (MongoDB option names are case-insensitive)."""
    _, query = _uri_netloc_and_query(uri)
    return {k.lower(): v for k, v in parse_qsl(query)}


# ---------------------------------------------------------------------- errors


def connection_error(settings: MongoSettings, exc: Exception) -> OlakeError:
    """What a driver error while connecting means, as one line naming what to fix."""
    from pymongo import errors

    detail = _detail(settings, exc)
    where = settings.where()
    if isinstance(exc, errors.OperationFailure) and exc.code == _AUTH_FAILED:
        source = settings.auth_source or _uri_options(settings.uri).get("authsource") or "admin"
        return ConnectionFailed(f"mongodb: wrong username or password for user '{settings.user()}' "
                                f"(auth_source '{source}') at {where}")
    if isinstance(exc, errors.OperationFailure) and exc.code == _UNAUTHORIZED:
        return ConnectionFailed(f"mongodb: user '{settings.user()}' is not authorized ({detail}); grant it "
                                f"the read role on database '{settings.database}'")
    if isinstance(exc, (errors.InvalidURI, errors.ConfigurationError)):
        return ConfigError(f"mongodb: invalid connection settings: {detail}")
    if isinstance(exc, errors.ServerSelectionTimeoutError):
        hint, down = _unreachable_hint(settings, str(exc))
        return (ServerUnreachable if down else ConnectionFailed)(f"mongodb: {hint} ({detail})")
    if isinstance(exc, errors.PyMongoError):
        return ConnectionFailed(f"mongodb: cannot use the server at {where}: {detail}")
    return ConnectionFailed(f"mongodb: cannot connect to {where}: {type(exc).__name__}: {detail}")


def _unreachable_hint(settings: MongoSettings, raw: str) -> tuple[str, bool]:
    """What a server selection timeout means, and whether the servers are down or out of reach (transient)
    rather than the config wrong (an unknown host, TLS)."""
    lowered, where = raw.lower(), settings.where()
    key = "'uri'" if settings.uri is not None else "'hosts'"
    if "connection refused" in lowered:
        return f"nothing accepts connections at {where}; check {key} and that MongoDB runs", True
    if any(s in lowered for s in ("name or service not known", "nodename nor servname", "getaddrinfo",
                                  "no address associated", "temporary failure in name resolution")):
        return f"unknown host in {where}; check {key}", False
    tls = _tls_hint(settings, lowered)
    if tls:
        return tls, False
    if "replicaset" in lowered.replace(" ", "") or "replica set" in lowered:
        return f"no member of replica set '{settings.replica_set}' answered at {where}; check 'replica_set'", True
    return f"no server answered at {where} within {settings.connect_timeout}s; check {key} and firewalls", True


def _tls_hint(settings: MongoSettings, lowered: str) -> str | None:
    """What a TLS failure means and which config fields to check; None if it is not one."""
    where = settings.where()
    ca = f"'tls_ca_file' ({settings.tls_ca_file or 'not set: the system CAs'})"
    if "mismatch" in lowered and ("hostname" in lowered or "ip address" in lowered):
        return (f"the server certificate of {where} does not name the host connected to; connect through a name "
                f"the certificate lists (check {'uri' if settings.uri else 'hosts'!r})")
    if "certificate verify failed" in lowered or "certificate_verify_failed" in lowered:
        return f"the server certificate of {where} does not verify against {ca}; check 'tls_ca_file'"
    if "certificate required" in lowered or "bad certificate" in lowered or "unknown ca" in lowered:
        return (f"the server at {where} refuses the client certificate; check 'tls_certificate_key_file' (a "
                f"certificate and key in one PEM file, signed by a CA the server trusts)")
    if "wrong version number" in lowered or "record layer failure" in lowered or "packet length too long" in lowered:
        return f"the TLS handshake with {where} failed (does the server speak TLS?); check 'tls'"
    if "eof occurred" in lowered or "unexpected eof" in lowered:
        if settings.tls_certificate_key_file:
            return (f"{where} ended the TLS handshake; check 'tls_certificate_key_file' (a certificate signed by a "
                    f"CA the server trusts) and 'tls'")
        return (f"{where} ended the TLS handshake; if it requires a client certificate, set "
                f"'tls_certificate_key_file'; check 'tls'")
    if "handshake" in lowered and "timed out" in lowered:
        return f"{where} did not answer the TLS handshake (does the server speak TLS?); check 'tls'"
    if "ssl" in lowered or "tls" in lowered or "certificate" in lowered:
        return (f"the TLS handshake with {where} failed; check 'tls', 'tls_ca_file' and "
                f"'tls_certificate_key_file'")
    options = _uri_options(settings.uri)
    tls_set = settings.tls or settings.tls_ca_file or settings.tls_certificate_key_file \
        or "true" in (options.get("tls"), options.get("ssl"))
    if not tls_set and ("connection reset" in lowered or "connection closed" in lowered):
        return (f"{where} closed the connection at once; if the server requires TLS, set 'tls': true and "
                f"'tls_ca_file'")
    return None


def _detail(settings: MongoSettings, exc: Exception) -> str:
    """The driver's message, scrubbed, on one line and without the topology dump."""
    text = str(exc).split(", Timeout:", 1)[0].split(", full error:", 1)[0]
    text = re.sub(r"\s*\(configured timeouts:[^)]*\)", "", text)
    text = " ".join(text.split())
    return settings.scrub(text[:300])


def read_error(settings: MongoSettings, exc: Exception, what: str) -> OlakeError:
    """A driver error while reading ``what``: TransientError when it may go away on retry (by type,
    error label and code, see ``retryable``), ConnectionFailed for authorization, else SourceError."""
    from pymongo import errors

    from olake_cli.sources.mongodb.retryable import is_transient

    if isinstance(exc, OlakeError):
        return exc
    detail = _detail(settings, exc)
    if isinstance(exc, errors.OperationFailure) and exc.code is not None:
        detail += f" (code {exc.code} {(exc.details or {}).get('codeName', '')})".replace(" )", ")")
    if is_transient(exc):
        return TransientError(f"mongodb: {what}: {type(exc).__name__}: {detail}")
    if isinstance(exc, errors.OperationFailure) and exc.code in (_AUTH_FAILED, _UNAUTHORIZED):
        return connection_error(settings, exc)
    return SourceError(f"mongodb: {what}: {type(exc).__name__}: {detail}")


def open_client(settings: MongoSettings):
    """A client whose connection and login were verified with ``ping`` (errors: one clear line)."""
    client = settings.client()
    try:
        client.admin.command("ping")
    except Exception as exc:  # driver errors arrive as many types; each becomes one OlakeError
        client.close()
        raise connection_error(settings, exc) from None
    return client


def server_hello(client) -> dict[str, Any]:
    """The ``hello`` reply (``isMaster`` on servers older than 4.4.2)."""
    from pymongo.errors import OperationFailure

    try:
        return client.admin.command("hello")
    except OperationFailure:
        return client.admin.command("isMaster")


def cluster_time(client) -> tuple[int, int] | None:
    """The deployment's latest operation time (time, inc), or None on a standalone server.

    Readers wait until the member they read from has applied it (``afterClusterTime``), so a
    lagging secondary never serves data older than a position captured before.
    """
    reply = client.admin.command("ping")
    stamp = reply.get("operationTime")
    return None if stamp is None else (stamp.time, stamp.inc)


def is_missing_namespace(exc: Exception) -> bool:
    """Whether a driver error says the collection does not exist."""
    return getattr(exc, "code", None) == _NAMESPACE_NOT_FOUND
