"""The Iceberg destination's config: which catalog, how tables are named, how they are written.

``{"type": "iceberg", "path": DIR}`` is the embedded default: a SQLite SQL catalog ``DIR/catalog.db``
and a warehouse ``DIR/warehouse`` (both created on first use). ``{"type": "iceberg", "catalog":
{...}}`` passes pyiceberg catalog properties through (``type`` ``rest``, ``sql``, ``glue``, ``hive``,
...; REST: ``uri``, ``warehouse``, ``credential`` or ``token``). Errors are one line naming the field.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any

from olake_cli.core.errors import ConfigError
from olake_cli.core.locks import LOCK_FILE, host_lock_path
from olake_cli.core.redact import is_secret_name, remove_secrets

DEFAULT_CATALOG_NAME = "olake"
DEFAULT_NAMESPACE = "default"
KNOWN_CATALOG_TYPES = ("rest", "sql", "hive", "glue", "dynamodb", "in-memory", "bigquery")
_TRANSFORM = re.compile(r"(identity|year|month|day|hour|void|bucket\[(\d+)\]|truncate\[(\d+)\])")


@dataclass(frozen=True)
class PartitionField:
    """One partition field of a stream's table: a column and a transform (``day``, ``bucket[16]``, ...)."""

    column: str
    transform: str


@dataclass
class IcebergConfig:
    """A validated Iceberg destination config."""

    catalog_name: str
    catalog_properties: dict[str, str]
    embedded_dir: str | None = None  # the ``path`` of the embedded default
    namespace: str | None = None
    table_prefix: str = ""
    soft_delete: bool = False
    compression: str = "zstd"
    rows_per_file: int = 1_000_000
    partitioning: dict[str, list[PartitionField]] = field(default_factory=dict)

    @property
    def catalog_type(self) -> str:
        """The catalog's type (``sql`` for the embedded default)."""
        return self.catalog_properties.get("type", "py-catalog-impl")

    def table_identifier(self, namespace: str | None, name: str) -> tuple[str, str]:
        """(namespace, table) of a stream: the configured namespace or the stream's, prefix + name."""
        return (self.namespace or namespace or DEFAULT_NAMESPACE, f"{self.table_prefix}{name}")

    def partition_fields(self, namespace: str | None, name: str) -> list[PartitionField]:
        """The configured partition fields of a stream (``namespace.stream`` wins over ``stream``)."""
        return self.partitioning.get(f"{namespace}.{name}") or self.partitioning.get(name) or []

    def describe(self) -> str:
        """The catalog in words, without secrets."""
        if self.embedded_dir is not None:
            return f"embedded catalog in '{self.embedded_dir}'"
        where = self.catalog_properties.get("uri") or self.catalog_properties.get("warehouse") or ""
        return f"{self.catalog_type} catalog '{self.catalog_name}'" + (f" at {where}" if where else "")


def parse_config(config: dict[str, Any]) -> IcebergConfig:
    """An :class:`IcebergConfig` from a schema-validated config dict (ConfigError if inconsistent)."""
    path, catalog = config.get("path"), config.get("catalog")
    if (path is None) == (catalog is None):
        raise ConfigError("iceberg: give exactly one of 'path' (embedded catalog) or 'catalog' "
                          "(pyiceberg catalog properties)")
    if path is not None:
        root = os.path.abspath(path)
        properties = {"type": "sql", "uri": f"sqlite:///{os.path.join(root, 'catalog.db')}",
                      "warehouse": f"file://{os.path.join(root, 'warehouse')}"}
        name, embedded = DEFAULT_CATALOG_NAME, root
    else:
        properties = {str(k): _text(v) for k, v in catalog.items() if k != "name"}
        name, embedded = str(catalog.get("name") or DEFAULT_CATALOG_NAME), None
        kind = properties.get("type")
        if kind is None and "py-catalog-impl" not in properties:
            raise ConfigError("iceberg: 'catalog.type' is missing (one of "
                              f"{', '.join(KNOWN_CATALOG_TYPES)}, or give 'py-catalog-impl')")
        if kind is not None and kind.lower() not in KNOWN_CATALOG_TYPES:
            raise ConfigError(f"iceberg: unknown catalog type '{kind}' "
                              f"(known: {', '.join(KNOWN_CATALOG_TYPES)})")
    return IcebergConfig(
        catalog_name=name, catalog_properties=properties, embedded_dir=embedded,
        namespace=config.get("namespace"), table_prefix=config.get("table_prefix", ""),
        soft_delete=bool(config.get("soft_delete", False)), compression=config.get("compression", "zstd"),
        rows_per_file=int(config.get("rows_per_file", 1_000_000)),
        partitioning=_partitioning(config.get("partitioning") or {}))


def _text(value: Any) -> str:
    """A catalog property value as pyiceberg expects it (text)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _partitioning(raw: dict[str, Any]) -> dict[str, list[PartitionField]]:
    out: dict[str, list[PartitionField]] = {}
    for stream, fields in raw.items():
        parsed = []
        for item in fields:
            transform = str(item.get("transform", "identity")).replace(" ", "").lower()
            match = _TRANSFORM.fullmatch(transform)
            if match is None or (match.group(2) or match.group(3) or "1") == "0":
                raise ConfigError(f"iceberg: partitioning of '{stream}': unknown transform '{item.get('transform')}' "
                                  f"(identity, year, month, day, hour, bucket[N], truncate[W])")
            parsed.append(PartitionField(str(item["column"]), transform))
        out[stream] = parsed
    return out


def prepare_embedded(root: str) -> None:
    """Create the embedded catalog's folders; a ConfigError when they cannot be written."""
    existing = root
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(f"iceberg: cannot write into '{root}': Not a directory ('{existing}' is a file)")
    try:
        os.makedirs(os.path.join(root, "warehouse"), exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=os.path.join(root, "warehouse"), prefix=".olake-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"iceberg: cannot write into '{root}': {exc.strerror or exc}") from None


def probe_warehouse(cfg: IcebergConfig, warehouse: str) -> None:
    """Write and remove a probe object in a warehouse on object storage (``s3://...``) through the
    catalog's FileIO; a ConfigError naming the warehouse when it cannot be written."""
    import uuid

    from pyiceberg.io import load_file_io

    probe = f"{warehouse.rstrip('/')}/.olake-check-{uuid.uuid4().hex}"
    try:
        io = load_file_io(cfg.catalog_properties, warehouse)
        with io.new_output(probe).create(overwrite=True) as out:
            out.write(b"olake check\n")
        io.delete(probe)
    except Exception as exc:  # pyarrow, fsspec and the stores raise many types
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"iceberg: cannot write into the warehouse '{warehouse}': {redact(reason, cfg)}") from None


def open_catalog(cfg: IcebergConfig):
    """The pyiceberg catalog of a config (the embedded one is created on first use)."""
    from pyiceberg.catalog import load_catalog

    if cfg.embedded_dir is not None:
        prepare_embedded(cfg.embedded_dir)
    try:
        return load_catalog(cfg.catalog_name, **cfg.catalog_properties)
    except ConfigError:
        raise
    except Exception as exc:  # pyiceberg raises many types for a bad catalog config
        raise ConfigError(f"iceberg: cannot open the {cfg.describe()}: {redact(str(exc), cfg)}") from None


def lock_path(cfg: IcebergConfig) -> str:
    """Where runs writing into this catalog lock (``core.locks``): the embedded catalog's folder, a local
    warehouse, or else a file on this host (a remote catalog offers no lock every host would see)."""
    warehouse = cfg.catalog_properties.get("warehouse", "")
    if cfg.embedded_dir is not None:
        return os.path.join(cfg.embedded_dir, LOCK_FILE)
    if warehouse.startswith(("file:", "/")):
        return os.path.join(warehouse.removeprefix("file://").removeprefix("file:"), LOCK_FILE)
    return host_lock_path("iceberg", "|".join((cfg.catalog_name, cfg.catalog_properties.get("uri", ""), warehouse)))


def redact(text: str, cfg: IcebergConfig) -> str:
    """``text`` without the values of secret-named catalog properties (see core.redact)."""
    return remove_secrets(text, [value for key, value in cfg.catalog_properties.items() if is_secret_name(key)])
