"""Array columns' shapes read from the data, for ``discover``.

PostgreSQL does not enforce an array column's declared dimensions (``int[]`` holds ``{{1,2},{3,4}}``
as readily as ``{1,2}``) nor its lower bounds (``'[0:2]={1,2,3}'``), so discovery reads them from the
values, one aggregate query per table over all its array columns:

* every non-empty value of one depth D, every lower bound 1: nested lists D deep (``array<...<T>>``);
* values of different depths, or any lower bound other than 1: ``ndarray<T>`` (lower bounds, lengths
  and elements), which holds every shape;
* no non-empty value yet: the declared depth (at least 1).

Empty arrays (``{}``, no dimensions) and NULLs fit every shape.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from psycopg import sql

from olake_cli.core.codec.types import NDARRAY, array_shape, shaped_array

# array_dims prints [lower:upper] per dimension; a value whose every lower bound is 1 matches this
_DEFAULT_BOUNDS = r"^(\[1:[0-9]+\])+$"


@dataclass(frozen=True)
class ArrayShape:
    """What one array column holds: the least and greatest depth of its non-empty values (None when
    it has none) and whether any lower bound is not 1."""

    min_depth: int | None
    max_depth: int | None
    odd_bounds: bool

    def olake_type(self, declared: str) -> str:
        """The column's type: ``declared`` (an array type) reshaped to fit every value."""
        element, depth = array_shape(declared) or (declared, 1)
        if self.odd_bounds or self.min_depth != self.max_depth:
            return shaped_array(element, NDARRAY)
        return shaped_array(element, self.max_depth or depth)


def with_data_shapes(conn, schema: str, table: str, columns: list, populated: bool = True) -> list:
    """``columns`` (PgColumn) with each array column's type reshaped to the values the table holds
    (an unpopulated materialized view, ``populated`` False, keeps the declared shapes)."""
    arrays = [c for c in columns if c.element_oid is not None]
    if not arrays or not populated:
        return columns
    shapes = _read_shapes(conn, schema, table, [c.name for c in arrays])
    return [replace(c, olake_type=shapes[c.name].olake_type(c.olake_type)) if c.name in shapes else c
            for c in columns]


def _read_shapes(conn, schema: str, table: str, names: list[str]) -> dict[str, ArrayShape]:
    """One pass over the table: the depths and bounds of each named array column."""
    parts = [sql.SQL("min(array_ndims({c})), max(array_ndims({c})), "
                     "coalesce(bool_or(array_dims({c}) !~ {p}), false)").format(
                         c=sql.Identifier(name), p=sql.Literal(_DEFAULT_BOUNDS)) for name in names]
    query = sql.SQL("SELECT {} FROM {}.{}").format(sql.SQL(", ").join(parts), sql.Identifier(schema),
                                                   sql.Identifier(table))
    row = conn.execute(query).fetchone()
    return {name: ArrayShape(row[3 * i], row[3 * i + 1], row[3 * i + 2]) for i, name in enumerate(names)}
