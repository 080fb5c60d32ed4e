"""Connecting to Kafka, shared by the ``kafka`` source and the ``kafka`` destination.

One implementation of the connection fields (``bootstrap_servers``, the security fields, librdkafka
settings passed through), of the topic names (a stream's data topic, the catalog and state topics),
of the admin steps (list, create), of reading a topic to its end, and of turning a client failure into
one line with every secret removed. librdkafka comes from ``confluent-kafka``, the optional extra
``olake-cli[kafka]``: a config naming Kafka without it installed is one ConfigError saying so.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from olake_cli.core.errors import ConfigError, DestinationError, OlakeError, ServerUnreachable
from olake_cli.core.redact import is_secret_name, remove_secrets

SECURITY_FIELDS = {  # config field -> librdkafka setting
    "security_protocol": "security.protocol", "sasl_mechanism": "sasl.mechanism",
    "sasl_username": "sasl.username", "sasl_password": "sasl.password",
    "ssl_ca_location": "ssl.ca.location", "ssl_certificate_location": "ssl.certificate.location",
    "ssl_key_location": "ssl.key.location", "ssl_key_password": "ssl.key.password",
}
DEFAULT_PREFIX = "olake."
DEFAULT_TEMPLATE = "{prefix}{namespace}.{name}"
MAX_TOPIC_CHARS = 249
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_UNREACHABLE = ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_RESOLVE", "Connection refused",
                "timed out", "Failed to resolve")


def require_client() -> Any:
    """The ``confluent_kafka`` module, or a ConfigError saying how to install it."""
    try:
        import confluent_kafka
    except ImportError:
        raise ConfigError("kafka: the Kafka client is not installed; run: pip install 'olake-cli[kafka]'") from None
    return confluent_kafka


@dataclass(frozen=True)
class KafkaSettings:
    """The connection part of a validated ``kafka`` config (source or destination)."""

    bootstrap_servers: str
    security: dict[str, str] = field(default_factory=dict)  # librdkafka settings of the security fields
    passthrough: dict[str, Any] = field(default_factory=dict)  # librdkafka settings given as they are
    timeout_s: float = 30.0
    topic_prefix: str = DEFAULT_PREFIX
    topic_template: str = DEFAULT_TEMPLATE

    @classmethod
    def from_config(cls, cfg: dict[str, Any], passthrough_field: str) -> KafkaSettings:
        """Settings from a validated config; ``passthrough_field`` names its librdkafka settings
        (``producer`` for the destination, ``consumer`` for the source)."""
        servers = cfg["bootstrap_servers"]
        servers = ",".join(servers) if isinstance(servers, list) else servers
        security = {SECURITY_FIELDS[k]: str(v) for k, v in cfg.items() if k in SECURITY_FIELDS and v is not None}
        return cls(servers, security, dict(cfg.get(passthrough_field) or {}), float(cfg.get("timeout_s", 30.0)),
                   cfg.get("topic_prefix", DEFAULT_PREFIX), cfg.get("topic_template", DEFAULT_TEMPLATE))

    def secrets(self) -> list[str]:
        """Every secret value of the settings (removed from every text shown)."""
        found = [v for k, v in {**self.security, **self.passthrough}.items() if is_secret_name(k)]
        return [str(v) for v in found if v]

    def clean(self, text: str) -> str:
        """``text`` with every secret removed."""
        return remove_secrets(text, self.secrets(), keep=[self.bootstrap_servers])

    def client_config(self, extra: dict[str, Any] | None = None, errors: ErrorLog | None = None) -> dict[str, Any]:
        """The librdkafka config of a client: bootstrap, security, timeouts, ``extra``, then the settings
        passed through (they win). librdkafka's own log is off; its errors go to ``errors``."""
        timeout_ms = int(self.timeout_s * 1000)
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "log_level": 0,
                                  "socket.timeout.ms": max(timeout_ms, 10), "socket.connection.setup.timeout.ms":
                                  max(timeout_ms, 1000), **self.security, **(extra or {}), **self.passthrough}
        if errors is not None:
            config["error_cb"] = errors
        return config

    def topic_of(self, namespace: str | None, name: str) -> str:
        """A stream's data topic: the template filled in, characters outside ``[A-Za-z0-9._-]`` as ``_``."""
        template = self.topic_template
        if namespace is None:
            template = template.replace("{namespace}.", "").replace("{namespace}", "")
        try:
            topic = template.format(prefix=self.topic_prefix, namespace=namespace or "", name=name)
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"kafka: topic_template {self.topic_template!r} is not valid ({exc}); it may name "
                              f"{{prefix}}, {{namespace}} and {{name}}") from None
        return _checked_topic(_UNSAFE.sub("_", topic), f"stream {namespace + '.' if namespace else ''}{name}")

    @property
    def catalog_topic(self) -> str:
        """The compacted topic of the streams' catalog entries."""
        return _checked_topic(_UNSAFE.sub("_", f"{self.topic_prefix}_catalog"), "the catalog")

    @property
    def state_topic(self) -> str:
        """The compacted topic of the committed stream states."""
        return _checked_topic(_UNSAFE.sub("_", f"{self.topic_prefix}_state"), "the state")


def _checked_topic(topic: str, what: str) -> str:
    if not topic or topic in (".", "..") or len(topic) > MAX_TOPIC_CHARS:
        raise ConfigError(f"kafka: the topic name of {what} ({topic!r}) is not a valid Kafka topic name (1 to "
                          f"{MAX_TOPIC_CHARS} characters, not '.' or '..'); set topic_prefix or topic_template")
    return topic


def stream_label(namespace: str | None, name: str) -> str:
    """``namespace.name`` (or ``name``): a stream's key in the catalog topic."""
    return f"{namespace}.{name}" if namespace else name


class ErrorLog:
    """librdkafka's ``error_cb``: keeps the last error it reported (a broker it cannot reach, say)."""

    def __init__(self) -> None:
        self.last: str | None = None
        self._lock = threading.Lock()

    def __call__(self, error: Any) -> None:
        with self._lock:
            self.last = str(error.str() if hasattr(error, "str") else error)

    def take(self) -> str | None:
        """The last error reported since the last call (None: none), forgotten."""
        with self._lock:
            last, self.last = self.last, None
            return last


def failure(exc: BaseException, settings: KafkaSettings, doing: str, errors: ErrorLog | None = None,
            error_type: type[OlakeError] = DestinationError) -> OlakeError:
    """One line for a client failure while ``doing``: ServerUnreachable when the broker cannot be reached
    (with librdkafka's last error), ``error_type`` otherwise; secrets removed."""
    if isinstance(exc, OlakeError):
        return exc
    detail = _detail(exc)
    last = errors.last if errors is not None else None
    where = f"kafka at {settings.bootstrap_servers}"
    if any(word in detail for word in _UNREACHABLE) or (last and any(w in last for w in _UNREACHABLE)):
        why = last or detail
        return ServerUnreachable(settings.clean(f"{where}: cannot reach the broker while {doing} ({why}); "
                                                f"check bootstrap_servers, the network and the security settings"))
    return error_type(settings.clean(f"{where}: {doing} failed: {detail}"))


def _detail(exc: BaseException) -> str:
    """A client exception as one line (a KafkaError's name and text)."""
    arg = exc.args[0] if exc.args else exc
    if hasattr(arg, "name") and hasattr(arg, "str"):
        return f"{arg.name()}: {arg.str()}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
