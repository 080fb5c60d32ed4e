"""The architecture's rules as code: the layers and connector independence (import-linter, configured in
pyproject.toml), no import circle between modules, and only ``engine/`` importing pyspark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    """cli > pipeline > sources | destinations | engine > shared > core; connectors independent; pyspark
    only in engine; no driver in core."""
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(linter), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_no_module_imports_one_that_imports_it_back():
    """No circle of imports between modules, at any depth (function-level imports included)."""
    graph = grimp.build_graph("olake_cli")
    circles = set()
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported != module and graph.chain_exists(importer=imported, imported=module):
                circles.add(tuple(sorted((module, imported))))
    assert not circles, f"import circles through: {sorted(circles)}"


def test_ruff_finds_nothing():
    """pyflakes, bugbear and pyupgrade as configured in pyproject.toml, over the code, tests and benchmarks."""
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run([str(ruff), "check", "--no-cache", "olake_cli", "tests", "bench"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_no_module_is_over_400_lines():
    """Small modules: a module past 400 lines is split along a seam, not squeezed."""
    long = {str(path.relative_to(ROOT)): n for path in sorted((ROOT / "olake_cli").rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > 400}
    assert not long, long
