"""DynamoDB settings from a validated config, boto3 clients, and AWS errors as one clear line each.

Settings are a small frozen value (picklable: Spark tasks build their own clients from it). Secrets
(the secret access key, the session token) never appear in ``repr`` or in any error text.
"""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass, field
from typing import Any

from olake_cli.core.errors import (
    ConfigError, ConnectionFailed, OlakeError, ServerUnreachable, SourceError, TransientError,
)

_TRANSIENT_CODES = frozenset({
    "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
    "InternalServerError", "ServiceUnavailable", "LimitExceededException", "InternalFailure",
})
_CREDENTIAL_CODES = frozenset({
    "UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException",
    "InvalidClientTokenId", "MissingAuthenticationToken", "IncompleteSignature", "SignatureDoesNotMatch",
})
_DENIED_CODES = frozenset({"AccessDeniedException", "AccessDenied"})
RETRY_ATTEMPTS = 4
_XML_ERROR_FIELD = re.compile(r"<(Code|Message)>([^<]*)</\1>")


@dataclass(frozen=True)
class TagFilter:
    """Tables carrying a tag named ``ingestion_key`` and ``environment_key`` = ``environment_value``."""

    ingestion_key: str
    environment_key: str
    environment_value: str

    def matches(self, tags: dict[str, str]) -> bool:
        """Whether a table's tags pass the filter."""
        return self.ingestion_key in tags and tags.get(self.environment_key) == self.environment_value

    def describe(self) -> str:
        """The filter as a phrase for messages."""
        return (f"tag '{self.ingestion_key}' and tag '{self.environment_key}' = "
                f"'{self.environment_value}'")


@dataclass(frozen=True)
class DynamoSettings:
    """Everything needed to talk to DynamoDB and how to read it."""

    region: str
    endpoint_url: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    tables: tuple[str, ...] | None = None
    tags: TagFilter | None = None
    namespace: str = "dynamodb"
    segments: int = 4
    checkpoint_items: int = 100_000
    page_items: int | None = None
    sample_size: int = 1000
    init_sync: str = "run"
    safe_zone_hours: float = 20.0
    replay_margin_minutes: int = 60
    on_position_lost: str = "resync"
    connect_timeout: int = 10

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> DynamoSettings:
        """Settings of a schema-validated config; ConfigError for combinations the schema allows."""
        if ("tables" in config) == ("tags" in config):
            raise ConfigError("dynamodb: give 'tables' (an allow-list of table names) or 'tags' (the "
                              "ingestion and environment tags to discover tables by), exactly one of them")
        if ("access_key_id" in config) != ("secret_access_key" in config):
            raise ConfigError("dynamodb: 'access_key_id' and 'secret_access_key' go together; give both, or "
                              "neither to use the default AWS credential chain")
        if "profile" in config and "access_key_id" in config:
            raise ConfigError("dynamodb: give 'profile' or 'access_key_id', not both")
        tags = config.get("tags")
        plain = {name: config[name] for name in (
            "region", "endpoint_url", "access_key_id", "secret_access_key", "session_token", "profile",
            "namespace", "segments", "checkpoint_items", "page_items", "sample_size", "init_sync",
            "safe_zone_hours", "replay_margin_minutes", "on_position_lost", "connect_timeout") if name in config}
        return cls(**plain, tables=tuple(config["tables"]) if "tables" in config else None,
                   tags=TagFilter(**tags) if tags else None)

    def where(self) -> str:
        """The endpoint and region, for messages."""
        return f"{self.endpoint_url or 'AWS'} (region {self.region})"

    def client(self, service: str = "dynamodb"):
        """A boto3 client of ``service`` (``dynamodb`` or ``dynamodbstreams``) for these settings, made
        once per process (a client takes a second to build; Spark's Python workers serve many tasks)."""
        return _client(self, service)

    def scrub(self, text: str) -> str:
        """``text`` with the secrets replaced by ``***``."""
        for secret in (self.secret_access_key, self.session_token):
            if secret:
                text = text.replace(secret, "***")
        return text


@functools.lru_cache(maxsize=16)
def _client(settings: DynamoSettings, service: str):
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=settings.access_key_id, aws_secret_access_key=settings.secret_access_key,
        aws_session_token=settings.session_token, profile_name=settings.profile)
    config = Config(connect_timeout=settings.connect_timeout, read_timeout=max(60, settings.connect_timeout),
                    retries={"mode": "standard", "max_attempts": RETRY_ATTEMPTS},
                    max_pool_connections=32)
    return session.client(service, region_name=settings.region, endpoint_url=settings.endpoint_url, config=config)


def error_fields(exc: BaseException) -> tuple[str | None, str]:
    """The AWS error code (None for an error that is not a botocore ClientError) and message, on one line.

    An error body botocore could not parse (an endpoint answering this JSON API in XML, as moto's
    authentication does, or a proxy) gives the ``<Code>`` and ``<Message>`` it holds."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None, " ".join(str(exc).split())
    error = response.get("Error") or {}
    code, message = error.get("Code"), error.get("Message") or str(exc)
    fields = dict(_XML_ERROR_FIELD.findall(message))
    if "Code" in fields:
        code, message = html.unescape(fields["Code"]), html.unescape(fields.get("Message", message))
    return code, " ".join(message.split())


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError (None for other errors)."""
    return error_fields(exc)[0]


def aws_error(settings: DynamoSettings, exc: BaseException, doing: str) -> OlakeError:
    """An AWS failure as one line saying what failed and what to fix, secrets removed."""
    import botocore.exceptions as bex

    if isinstance(exc, OlakeError):
        return exc
    where = settings.where()
    if isinstance(exc, (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ConnectionClosedError)):
        return ServerUnreachable(settings.scrub(f"dynamodb: cannot reach {where} while {doing}: {exc}; check "
                                               "'endpoint_url' and 'region'"))
    if isinstance(exc, (bex.NoCredentialsError, bex.PartialCredentialsError, bex.ProfileNotFound)):
        return ConnectionFailed(settings.scrub(
            f"dynamodb: no usable AWS credentials while {doing} ({exc}); set 'access_key_id' and "
            "'secret_access_key' (or 'profile'), or configure the default chain (AWS_ACCESS_KEY_ID, "
            "~/.aws/credentials, an instance role)"))
    code, message = error_fields(exc)
    if code in _CREDENTIAL_CODES:
        return ConnectionFailed(settings.scrub(f"dynamodb: {where} refused the credentials while {doing} "
                                               f"({code}: {message}); check the access key and secret"))
    if code in _DENIED_CODES:
        return ConfigError(settings.scrub(f"dynamodb: access denied while {doing} ({message}); grant the "
                                          "IAM permission it names"))
    if code in _TRANSIENT_CODES or isinstance(exc, (bex.ReadTimeoutError, bex.ConnectionError)):
        return TransientError(settings.scrub(f"dynamodb: {doing}: {code or type(exc).__name__}: {message}"))
    return SourceError(settings.scrub(f"dynamodb: {doing}: {code or type(exc).__name__}: {message}"))
