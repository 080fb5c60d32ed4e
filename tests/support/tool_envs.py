"""Virtual environments of outside tools the tests run (Airbyte's faker source, PyAirbyte), each with its
own dependencies (they clash with each other and with olake's), made once per machine and reused.

A tool's environment lives outside the repository, in ``~/.cache/olake-tests/<name>-<hash of its
requirements>`` (``OLAKE_TEST_TOOLS_HOME`` moves it), so a fresh clone on the same machine reuses it and a
changed requirement makes a new one. It is made under a lock file (the suite runs two pytest workers) and
counts as made once its ``ready`` file exists; a half-made one (a run killed while installing) is made anew.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def tools_home() -> Path:
    """Where the tools' environments live."""
    return Path(os.environ.get("OLAKE_TEST_TOOLS_HOME") or Path.home() / ".cache" / "olake-tests")


def tool_env(name: str, requirements: list[str]) -> Path:
    """The environment holding ``requirements`` (pip requirement lines), made if missing; its folder."""
    digest = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    home = tools_home()
    home.mkdir(parents=True, exist_ok=True)
    folder = home / f"{name}-{digest}"
    with open(home / f"{name}-{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "ready").exists():
            _make(folder, requirements)
    return folder


def _make(folder: Path, requirements: list[str]) -> None:
    """Make the environment anew and write its ``ready`` file (with how long it took, in seconds)."""
    shutil.rmtree(folder, ignore_errors=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    result = subprocess.run([*pip, *requirements], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(requirements)} failed:\n{result.stderr[-3000:]}")
    (folder / "ready").write_text(f"{time.monotonic() - started:.0f}\n")
