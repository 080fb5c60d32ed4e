"""The documentation holds together: the site builds with ``mkdocs build --strict``, every internal link
and anchor of every page resolves (as GitHub renders them), every command-line option and config field
is documented, and no user page leans on what is not in the repository.

Also the page helpers the doc tests share: the Markdown pages, their code blocks and their commands."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
USER_PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
ALL_PAGES = [*USER_PAGES, ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
SCHEMAS = ROOT / "olake_cli" / "schemas"
CONNECTOR_PAGES = {"source-postgres": "sources/postgres.md", "source-mongodb": "sources/mongodb.md",
                   "source-dynamodb": "sources/dynamodb.md", "source-kafka": "sources/kafka.md",
                   "destination-parquet": "destinations/parquet.md",
                   "destination-iceberg": "destinations/iceberg.md", "destination-postgres": "destinations/postgres.md",
                   "destination-kafka": "destinations/kafka.md"}


def tokens(page: Path) -> list:
    """The page parsed as CommonMark (tables on, as GitHub and mkdocs render them)."""
    return MarkdownIt("commonmark").enable("table").parse(page.read_text(encoding="utf-8"))


def section(page: Path, heading: str) -> str:
    """The text of ``page`` from the heading ``heading`` up to the next heading of the same or a higher level."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found = [t for t in tokens(page) if t.type == "heading_open"]
    titles = {n: lines[t.map[0]].lstrip("#").strip() for n, t in enumerate(found)}
    [start] = [n for n, title in titles.items() if title == heading]
    level = found[start].tag
    after = [t.map[0] for t in found[start + 1:] if t.tag <= level]
    return "\n".join(lines[found[start].map[0]:after[0] if after else len(lines)])


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``text`` whose info string is ``language``, in order."""
    return [t.content for t in MarkdownIt("commonmark").parse(text) if t.type == "fence" and t.info.strip() == language]


def olake_commands(block: str) -> list[list[str]]:
    """The ``olake`` command lines of a shell block as argv lists (without ``olake``), continuation
    lines joined; comments and a final ``> FILE`` redirection are left out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    commands = []
    for line in joined.splitlines():
        if not line.startswith("olake "):
            continue
        words = shlex.split(line, comments=True)
        if words[:1] == ["olake"]:
            if len(words) >= 2 and words[-2] == ">":
                words = words[:-2]
            commands.append(words[1:])
    return commands


def github_slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, each space a hyphen."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of ``page`` as GitHub renders it (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    result = set()
    parsed = tokens(page)
    for n, token in enumerate(parsed):
        if token.type == "heading_open":
            text = "".join(child.content for child in parsed[n + 1].children
                           if child.type in ("text", "code_inline"))
            slug = github_slug(text)
            result.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return result


def links(page: Path) -> list[str]:
    """Every link target of ``page`` (inline links, outside code)."""
    found = []
    for token in tokens(page):
        for child in token.children or []:
            if child.type == "link_open":
                found.append(child.attrGet("href"))
    return found


def test_the_site_builds_strictly(tmp_path):
    """mkdocs builds docs/ with --strict: every page is in the nav, every link and anchor resolves."""
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                             str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / "site" / "destinations" / "postgres" / "index.html").is_file()


@pytest.mark.parametrize("page", ALL_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_internal_link_and_anchor_resolves(page):
    """Relative links name files that exist, and their anchors (or the page's own) name headings there."""
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:: not checked here
        path, _, anchor = target.partition("#")
        assert not path.startswith("/"), f"{page.name}: absolute link {target!r} breaks on GitHub"
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.relative_to(ROOT)}: link {target!r}: no such file"
        assert linked.is_relative_to(ROOT), f"{page.relative_to(ROOT)}: link {target!r} leaves the repository"
        if anchor:
            assert linked.suffix == ".md", f"{page.relative_to(ROOT)}: anchor on a non-page {target!r}"
            assert anchor in anchors(linked), (
                f"{page.relative_to(ROOT)}: link {target!r}: {linked.relative_to(ROOT)} has no heading #{anchor}")


def test_every_docs_page_is_in_the_nav_and_linked_from_the_readme():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    readme_links = {(ROOT / target.partition("#")[0]).resolve() for target in links(ROOT / "README.md")}
    for page in sorted(DOCS.rglob("*.md")):
        name = str(page.relative_to(DOCS))
        assert re.search(rf":\s+{re.escape(name)}\s*$", nav, re.M), f"mkdocs.yml: {name} is not in the nav"
        assert page.resolve() in readme_links, f"README.md does not link to docs/{name}"


def _click_commands():
    """Every olake command as (name, click command), subcommands of ``state`` included."""
    import typer

    from olake_cli.cli.app import app

    root = typer.main.get_command(app)
    found = [("olake", root)]
    for name, command in root.commands.items():
        found.append((name, command))
        for sub_name, sub in getattr(command, "commands", {}).items():
            found.append((f"{name} {sub_name}", sub))
    return found


def test_every_command_and_option_is_documented():
    """Each command of ``olake --help`` and every long option of each command (what ``olake COMMAND
    --help`` lists) appears on the Commands page."""
    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    for name, command in _click_commands():
        if name != "olake":
            assert re.search(rf"^## .*\b{re.escape(name)}\b", text, re.M), f"commands.md has no section for '{name}'"
        for param in command.params:
            for flag in [*param.opts, *param.secondary_opts]:
                if flag.startswith("--") and flag != "--help":
                    assert f"`{flag}" in text, f"commands.md does not document '{name} {flag}'"


@pytest.mark.parametrize("schema", sorted(CONNECTOR_PAGES))
def test_every_config_field_is_documented_on_its_connector_page(schema):
    """Each top-level field of a connector's config schema appears, as `field`, on the connector's page."""
    fields = json.loads((SCHEMAS / f"{schema}.schema.json").read_text())["properties"]
    text = (DOCS / CONNECTOR_PAGES[schema]).read_text(encoding="utf-8")
    missing = [f for f in fields if f != "type" and f"`{f}`" not in text]
    assert not missing, f"docs/{CONNECTOR_PAGES[schema]} does not document {missing}"


CONNECTOR_OUTLINE = ["Quickstart", "Config fields", "What the server needs", "Types", "Full load", "Change capture",
                     "Following", "Limits", "Tested against"]


@pytest.mark.parametrize("page", sorted(set(CONNECTOR_PAGES.values())))
def test_every_connector_page_follows_the_one_outline(page):
    """A connector page's second-level headings are the outline every connector page shares, in its order."""
    headings = [t for t in tokens(DOCS / page) if t.type == "heading_open" and t.tag == "h2"]
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    assert [lines[t.map[0]].lstrip("#").strip() for t in headings] == CONNECTOR_OUTLINE, page


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_user_pages_name_no_issue_numbers_and_no_documents_outside_the_repository(page):
    text = page.read_text(encoding="utf-8")
    for pattern in (r"\[F\d+\]", r"\bseeds?\b ?0\d\d", r"seeds/", r"\bissue #?\d", r"\bthe issue's\b", r"DESIGN\.md"):
        hit = re.search(pattern, text, re.I)
        assert hit is None, f"{page.relative_to(ROOT)}: {hit.group(0)!r} refers to what a user cannot see"


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_duckdb_read_of_a_stream_folder_unions_by_name(page):
    """A stream folder's files may differ in columns (a field added later): DuckDB's read_parquet over
    several files keeps only the first file's columns unless union_by_name is on."""
    for call in re.findall(r"read_parquet\((?:[^()]|\([^()]*\))*\)", page.read_text(encoding="utf-8")):
        if "*" in call or "[" in call:
            assert "union_by_name = true" in call, f"{page.relative_to(ROOT)}: {call} drops later columns"
