"""Which cases of a test matrix the suite runs: the reduced set by default, every case on request.

Many end-to-end tests could run over every destination and both paths (``read | write`` and ``sync``).
Where the behaviour under test is the source's or the pipeline's, the destination conformance suite
(tests/test_destination_conformance.py) already covers each destination's part, so by default a test
keeps one or two combinations, chosen so that across its file every destination and path still appear.

- ``OLAKE_TEST_ALL_PATHS=1``: every combination of every matrix (``cases``).
- ``OLAKE_TEST_LONG=1``: the long fault and kill schedules (more kill points, every path; ``LONG``),
  and every combination as well.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

LONG = os.environ.get("OLAKE_TEST_LONG") == "1"
ALL_PATHS = LONG or os.environ.get("OLAKE_TEST_ALL_PATHS") == "1"


def cases(every: Sequence[T], default: Sequence[T]) -> list[T]:
    """``every`` under OLAKE_TEST_ALL_PATHS=1 (or OLAKE_TEST_LONG=1), else ``default``, which must be
    a subset of it (in ``every``'s order)."""
    missing = [case for case in default if case not in every]
    assert not missing, f"default cases not in the full matrix: {missing}"
    return list(every) if ALL_PATHS else [case for case in every if case in default]
