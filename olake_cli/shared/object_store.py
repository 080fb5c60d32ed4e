"""S3-compatible object storage as configs name it: ``s3://bucket/prefix`` plus the ``s3.*`` fields
(the names the Iceberg destination's catalog properties use), opened through pyarrow's S3 filesystem.

Shared by the Parquet destination (its ``path``) and the chunk spool of ``read`` on a cluster (the
source's ``spark.spool``). The secret key and session token never reach a message: errors go through
:meth:`S3Options.redact`, and ``repr`` leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from olake_cli.core.errors import ConfigError
from olake_cli.core.redact import remove_secrets

SCHEME = "s3://"
FIELDS = {"s3.endpoint": "endpoint", "s3.region": "region", "s3.access-key-id": "access_key_id",
          "s3.secret-access-key": "secret_access_key", "s3.session-token": "session_token"}


def is_s3_path(path: str) -> bool:
    """Whether ``path`` names object storage (``s3://bucket/prefix``)."""
    return path.startswith(SCHEME)


@dataclass(frozen=True)
class S3Options:
    """Picklable: where the bucket answers and how to sign (secrets kept out of ``repr``)."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, config: dict[str, Any], path_field: str = "path", what: str = "parquet") -> S3Options | None:
        """The options of a validated config section whose ``path_field`` names the place; None for a
        local path (ConfigError, prefixed ``what``, when the ``s3.*`` fields and the path disagree)."""
        given = {name: str(config[key]) for key, name in FIELDS.items() if config.get(key) is not None}
        if not is_s3_path(config[path_field]):
            if given:
                raise ConfigError(f"{what}: '{next(k for k in FIELDS if k in config)}' applies only to a path "
                                  f"on object storage (s3://bucket/prefix), not to '{config[path_field]}'")
            return None
        if ("access_key_id" in given) != ("secret_access_key" in given):
            raise ConfigError(f"{what}: give both 's3.access-key-id' and 's3.secret-access-key', or neither "
                              "(the default AWS credential chain)")
        return cls(**given)

    def filesystem(self) -> Any:
        """A pyarrow S3 filesystem with these options (default credential chain when none are given)."""
        from pyarrow import fs

        return fs.S3FileSystem(endpoint_override=self.endpoint, region=self.region, access_key=self.access_key_id,
                               secret_key=self.secret_access_key, session_token=self.session_token)

    def redact(self, text: str) -> str:
        """``text`` without the secret key or the session token."""
        return remove_secrets(text, [self.secret_access_key, self.session_token], keep=[self.access_key_id])


def bucket_path(uri: str) -> str:
    """``bucket/prefix`` of ``s3://bucket/prefix/`` (what pyarrow's S3 filesystem takes)."""
    return uri[len(SCHEME):].strip("/")
