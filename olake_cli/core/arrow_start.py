"""pyarrow without its pandas probe: the first time pyarrow converts any Python value (``pa.array``,
``pa.scalar``, a table from a dict) it imports pandas, about 0.25 s, only to ask whether the value is
a pandas object. olake never hands it one, so at start-up the probe is answered "no pandas" once.

Nothing is lost: pyarrow imports pandas as soon as something asks it for pandas itself (a
``to_pandas()``, PySpark's Arrow conversions), and ``import pandas`` works as before.
"""

from __future__ import annotations

import sys


def skip_pandas_probe() -> None:
    """Let pyarrow record that pandas is absent without importing it (unless pandas is imported already)."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    sys.meta_path.insert(0, _NoPandas)  # ``import pandas`` fails at once, for pyarrow's one probe
    try:
        pa.scalar(0)
    finally:
        sys.meta_path.remove(_NoPandas)


class _NoPandas:
    """A meta path finder that refuses pandas."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("pandas is left out of pyarrow's probe", name=name)
        return None
