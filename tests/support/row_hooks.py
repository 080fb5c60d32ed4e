"""The row filter and transform the row-hook tests install as a module beside their configs."""

from __future__ import annotations

from pathlib import Path

HOOKS = '''
import pyarrow.compute as pc

def only_even(batch):
    return pc.equal(pc.bit_wise_and(batch.column("id"), 1), 0)

def shout(batch):
    index = batch.schema.get_field_index("note")
    return batch.set_column(index, "note", pc.utf8_upper(batch.column("note")))
'''


def install_hooks(folder: Path, module: str) -> tuple[str, str]:
    """Write the hooks as ``folder/<module>.py``; the catalog's ``row_filter`` (even ids only) and
    ``transform`` (``note`` upper-cased) naming them."""
    (folder / f"{module}.py").write_text(HOOKS)
    return f"{module}:only_even", f"{module}:shout"
