"""What both benchmarks share: timing a shell pipeline."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def timed(command: str, cwd: Path, env: dict[str, str]) -> float:
    """Wall seconds of a shell pipeline (fails loudly if it fails)."""
    started = time.perf_counter()
    subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env, check=True)
    return time.perf_counter() - started
