"""Target tables: what each stream's table must look like, created when missing and checked when present.

A missing table is created with the stream's primary key and the exact type of each column
(``types.wanted_type``), plus the ``_olake_*`` columns with ``metadata_columns``. An existing table is
checked before anything is written: a stream column it has must be of a type that holds the source
type, the stream's key must be its primary key or a unique index, and a NOT NULL column the stream
does not carry must have a default; otherwise a config error names the table and the column. Stream
columns it lacks are added.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Callable

from psycopg import sql

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.codec.types import olake_type_of
from olake_cli.core.errors import ConfigError
from olake_cli.destinations.postgres.config import MAX_IDENTIFIER_BYTES
from olake_cli.destinations.postgres.types import holds, olake_sql_type, replaces, rescales, wanted_type

METADATA_COLUMNS = (("_olake_op", "text"), ("_olake_op_id", "text"),
                    ("_olake_commit_ts", "timestamp with time zone"), ("_olake_synced_at", "timestamp with time zone"))


@dataclass(frozen=True)
class TargetColumn:
    """A stream column and its type in the target."""

    name: str
    sql_type: str  # format_type text
    olake_type: str
    prop: dict | None = None  # the json_schema property (documents and arrays need it)


@dataclass(frozen=True)
class TargetTable:
    """A stream's target table (picklable: Spark tasks of ``sync`` receive it)."""

    schema: str
    name: str
    label: str  # the stream, for messages
    columns: tuple[TargetColumn, ...]
    key: tuple[str, ...]
    metadata: bool = False
    copy_casts: tuple[tuple[str, str], ...] | None = None  # see load_copy.passthrough_casts

    @property
    def ident(self) -> tuple[str, str]:
        """(schema, table)."""
        return (self.schema, self.name)

    @property
    def qualified(self) -> sql.Identifier:
        """The table's name in SQL."""
        return sql.Identifier(self.schema, self.name)

    def column_list(self, with_metadata: bool = True) -> sql.Composable:
        """The columns olake writes, in order (``_olake_*`` last when the table has them)."""
        return sql.SQL(", ").join(sql.Identifier(n) for n in self.column_names(with_metadata))

    def column_names(self, with_metadata: bool = True) -> list[str]:
        """Names of the columns olake writes."""
        names = [c.name for c in self.columns]
        return names + [m for m, _ in METADATA_COLUMNS] if self.metadata and with_metadata else names

    def describe(self) -> str:
        """schema.table as users write it."""
        return f"{self.schema}.{self.name}"


def column_identifier(name: str) -> str:
    """The name PostgreSQL gives a column called ``name``: at most 63 bytes, cut at a character boundary
    (it cuts every longer identifier so, in DDL and statements alike)."""
    data = name.encode()
    if len(data) <= MAX_IDENTIFIER_BYTES:
        return name
    return data[:MAX_IDENTIFIER_BYTES].decode("utf-8", errors="ignore")


def check_identifiers(stream: CatalogStream, ident: tuple[str, str], names: list[str],
                       log: Callable[[str], None]) -> None:
    """Log the stream columns whose names PostgreSQL cuts to 63 bytes; a ConfigError when two of them
    would become one column."""
    seen: dict[str, str] = {}
    for name in names:
        cut = column_identifier(name)
        if cut in seen:
            raise ConfigError(f"postgres destination: table {ident[0]}.{ident[1]} (stream {stream.label}): columns "
                              f"'{seen[cut]}' and '{name}' are one column '{cut}' in PostgreSQL, which keeps the first "
                              f"{MAX_IDENTIFIER_BYTES} bytes of a name; rename one at the source")
        seen[cut] = name
        if cut != name:
            log(f"{stream.label}: column '{name}' is longer than PostgreSQL's {MAX_IDENTIFIER_BYTES} bytes; the "
                f"table's column is '{cut}'")


def plan_table(conn, stream: CatalogStream, ident: tuple[str, str], metadata: bool,
               log: Callable[[str], None]) -> TargetTable:
    """The table ``stream`` needs: source types the target knows, text (or text[]) for the others."""
    props = stream.json_schema.get("properties", {})
    check_identifiers(stream, ident, list(props), log)
    wanted = {name: wanted_type(prop, olake_type_of(prop, name)) for name, prop in props.items()}
    known = dict(conn.execute("SELECT t, to_regtype(t) IS NOT NULL FROM unnest(%s::text[]) AS t",
                              (sorted(set(wanted.values())),)).fetchall())
    columns = []
    for name, prop in props.items():
        olake_type, sql_type = olake_type_of(prop, name), wanted[name]
        if not known.get(sql_type):
            fallback = olake_sql_type(olake_type)
            log(f"{stream.label}: the target has no type {sql_type} (column '{name}'); it becomes {fallback}")
            sql_type = fallback
        elif prop.get("x-pg-type") and enum_labels(prop) is not None:
            check_enum(conn, f"table {ident[0]}.{ident[1]} (stream {stream.label})", name, sql_type, enum_labels(prop))
        columns.append(TargetColumn(name, sql_type, olake_type, prop))
    return TargetTable(ident[0], ident[1], stream.label, tuple(columns), tuple(stream.primary_key_columns), metadata)


def enum_labels(prop: dict) -> list[str] | None:
    """The labels of a source enum column (or of its array elements), from the catalog's ``enum``."""
    while isinstance(prop, dict):
        if isinstance(prop.get("enum"), list):
            return [label for label in prop["enum"] if label is not None]
        prop = prop.get("items")
    return None


def check_enum(conn, where: str, column: str, sql_type: str, labels: list[str]) -> None:
    """A ConfigError unless the target's type ``sql_type`` (or its element type) is an enum holding every
    one of the source enum's ``labels``: a value it lacks would fail the load or a change later on."""
    base = sql_type
    while base.endswith("[]"):
        base = base[:-2]
    is_enum, have = conn.execute("SELECT t.typtype = 'e', array(SELECT e.enumlabel FROM pg_enum e WHERE e.enumtypid "
                                 "= t.oid) FROM pg_type t WHERE t.oid = to_regtype(%s)", (base,)).fetchone()
    missing = [label for label in labels if label not in set(have)]
    if is_enum and not missing:
        return
    what = "is not an enum" if not is_enum else \
        f"lacks the value(s) {', '.join(repr(m) for m in missing)} (ALTER TYPE {base} ADD VALUE ...)"
    raise ConfigError(f"postgres destination: {where}: column '{column}' is of the source's enum type {base}, and the "
                      f"target's type {base} {what}; complete the type, or drop it to copy the column as text")


def existing_columns(conn, ident: tuple[str, str]) -> dict[str, tuple[str, bool, bool]] | None:
    """Column name -> (format_type, NOT NULL, has a default) of an existing table, or None if missing."""
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef OR a.attidentity <> '' "
        "OR a.attgenerated <> '' FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
        "AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", ident).fetchall()
    return {name: (type_text, not_null, has_default) for name, type_text, not_null, has_default in rows} or None


def unique_keys(conn, ident: tuple[str, str]) -> list[set[str]]:
    """Column sets of the table's primary key and full (non-partial, column-only) unique indexes."""
    rows = conn.execute(
        "SELECT array_agg(a.attname) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid "
        "AND a.attnum = ANY(i.indkey) WHERE n.nspname = %s AND c.relname = %s AND i.indisunique "
        "AND i.indpred IS NULL AND i.indexprs IS NULL GROUP BY i.indexrelid", ident).fetchall()
    return [set(names) for (names,) in rows]


def check_table(plan: TargetTable, existing: dict[str, tuple[str, bool, bool]], keys: list[set[str]],
                widen: bool = False) -> TargetTable:
    """``plan`` with the existing table's column types (columns it lacks, and with ``widen`` columns of a
    narrower type that the planned one holds or replaces (``types.replaces``), keep the planned type: see
    :func:`evolve`); a ConfigError naming the table and column when it cannot receive the stream."""
    where = f"postgres destination: table {plan.describe()} (stream {plan.label})"
    columns = []
    for column in plan.columns:
        found = existing.get(column_identifier(column.name))
        if found is None or (widen and not holds(found[0], column.sql_type)
                             and (holds(column.sql_type, found[0]) or replaces(column.sql_type, found[0]))):
            columns.append(column)
            continue
        if not holds(found[0], column.sql_type) and not (widen and rescales(column.sql_type, found[0])):
            # (a table rescaled by an earlier run whose state did not commit takes the narrower values as well)
            raise ConfigError(f"{where}: column '{column.name}' is {found[0]}, which cannot hold the source's "
                              f"{column.sql_type}; alter it or drop the table")
        columns.append(replace(column, sql_type=found[0]))
    if plan.key and {column_identifier(k) for k in plan.key} not in keys:
        raise ConfigError(f"{where} has no primary key or unique index on ({', '.join(plan.key)}), the stream's "
                          f"key; changes are applied by key")
    carried = {column_identifier(n) for n in plan.column_names()}
    for name, (_, not_null, has_default) in existing.items():
        if not_null and not has_default and name not in carried:
            raise ConfigError(f"{where}: column '{name}' is NOT NULL without a default and the stream does not "
                              f"carry it; drop the constraint or give it a default")
    return replace(plan, columns=tuple(columns))


def evolve(conn, plan: TargetTable, existing: dict[str, tuple[str, bool, bool]]) -> list[str]:
    """Add the columns ``plan`` has and the table lacks, and widen those ``check_table`` kept at the
    planned type (into jsonb by ``to_jsonb``); the names of the columns changed."""
    changed = [name for name, _ in missing_columns(plan, existing)]
    add_columns(conn, plan, missing_columns(plan, existing))
    for column in retyped_columns(plan, existing):
        name = sql.Identifier(column.name)
        using = sql.SQL(" USING to_jsonb({})").format(name) if column.sql_type == "jsonb" else sql.SQL("")
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {}{}").format(
            plan.qualified, name, sql.SQL(column.sql_type), using))
        changed.append(column.name)
    return changed


def retyped_columns(plan: TargetTable, existing: dict[str, tuple[str, bool, bool]]) -> list[TargetColumn]:
    """The columns ``evolve`` gives another type (``ALTER ... TYPE``, which may rewrite every row)."""
    found = {c.name: existing.get(column_identifier(c.name)) for c in plan.columns}
    return [c for c in plan.columns if found[c.name] is not None and found[c.name][0] != c.sql_type]


def missing_columns(plan: TargetTable, existing: dict) -> list[tuple[str, str]]:
    """(name, type) of the stream columns, and of the ``_olake_*`` columns ``metadata_columns`` asks for,
    that an existing table lacks."""
    wanted = [(c.name, c.sql_type) for c in plan.columns] + (list(METADATA_COLUMNS) if plan.metadata else [])
    return [(name, type_text) for name, type_text in wanted if column_identifier(name) not in existing]


def create_table(conn, plan: TargetTable) -> None:
    """CREATE SCHEMA (if missing) and the table, with the stream's primary key."""
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(plan.schema)))
    definitions = [sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.sql_type)) for c in plan.columns]
    if plan.metadata:
        definitions += [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in METADATA_COLUMNS]
    if plan.key:
        definitions.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in plan.key)))
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(plan.qualified, sql.SQL(", ").join(definitions)))


def add_columns(conn, plan: TargetTable, columns: list[tuple[str, str]]) -> None:
    """ALTER TABLE ... ADD COLUMN for each (name, type)."""
    for name, type_text in columns:
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
            plan.qualified, sql.Identifier(name), sql.SQL(type_text)))
