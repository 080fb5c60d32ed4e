"""olake's processes convert Python values to Arrow without importing pandas (0.25 s of every run's
start), and pandas still works for whatever asks for it (PySpark, ``to_pandas``)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from olake_cli.core.arrow_start import skip_pandas_probe
skip_pandas_probe()
import pyarrow as pa
pa.array(["c", "u", "d"]); pa.scalar(1); pa.table({"a": [1, 2]})
print("pandas" in sys.modules)
import pandas as pd
print(pa.table({"a": [1, 2]}).to_pandas()["a"].tolist(), pa.array(pd.Series([1.5, None])).to_pylist())
"""


def test_arrow_conversions_leave_pandas_unimported_and_pandas_still_works():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["False", "[1, 2] [1.5, None]"], done.stderr


def test_without_the_probe_skipped_pyarrow_would_import_pandas():
    """The reason for skip_pandas_probe: a plain conversion imports pandas (if this ever fails, pyarrow
    stopped doing it and arrow_start can go)."""
    done = subprocess.run([sys.executable, "-c", "import sys, pyarrow as pa; pa.scalar(1); print('pandas' in sys.modules)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
