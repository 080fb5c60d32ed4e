"""The README, CONTRIBUTING, CHANGELOG and every page of docs/ render as written: every code fence
closes, every heading outside a fence is a heading, and no merge conflict marker is left."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fence_closes_and_every_heading_renders(page):
    name = page.relative_to(ROOT)
    lines = page.read_text(encoding="utf-8").splitlines()
    tokens = MarkdownIt("commonmark").parse("\n".join(lines))
    fences = [t for t in tokens if t.type == "fence"]
    for fence in fences:
        start, end = fence.map
        closing = lines[end - 1] if end - 1 > start else ""
        assert FENCE.match(closing) and closing.strip().strip("`~") == "", (
            f"{name}:{start + 1}: the code fence is not closed (it runs to line {end})")
        opened = [n + 1 for n in range(start + 1, end - 1) if FENCE.match(lines[n])]
        assert not opened, f"{name}:{start + 1}: the code block swallows fence lines {opened}"
    for n, line in enumerate(lines):
        marker = FENCE.match(line)
        assert not marker or re.fullmatch(r"[\w+-]*", line[marker.end():].strip()), (
            f"{name}:{n + 1}: text after a fence marker keeps the fence from closing: {line!r}")
    inside = {n for fence in fences for n in range(fence.map[0], fence.map[1])}
    wanted = [n for n, line in enumerate(lines) if line.startswith("#") and n not in inside]
    rendered = [t.map[0] for t in tokens if t.type == "heading_open"]
    assert rendered == wanted, f"{name}: a heading is swallowed by a code block"
    if page == README:
        assert "Usage" in [lines[n].lstrip("# ") for n in rendered]


def test_no_merge_conflict_marker_is_left():
    """A line of a merge conflict marker in a page (or any tracked text) renders as text."""
    marker = re.compile(r"^(<{7}|>{7}|={7})( |$)", re.M)
    for path in [*PAGES, *sorted((ROOT / "olake_cli").rglob("*.py")), *sorted((ROOT / "tests").rglob("*.py")),
                 ROOT / "pyproject.toml", ROOT / "mkdocs.yml", *sorted((ROOT / "schemas").glob("*.json"))]:
        hit = marker.search(path.read_text(encoding="utf-8"))
        assert hit is None, f"{path.relative_to(ROOT)}: a merge conflict marker: {hit.group(0)!r}"
