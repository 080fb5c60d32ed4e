"""What ``olake --help``, ``olake COMMAND --help`` and ``olake --version`` show."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from olake_cli import __version__
from olake_cli.cli.app import app
from olake_cli.core.registry import DESTINATIONS, SOURCES
from tests.support.cli import run_olake

COMMANDS = [["spec"], ["check"], ["discover"], ["read"], ["write"], ["sync"], ["state"], ["state", "show"],
            ["state", "reset"], ["state", "recover"]]
TYPE_PLACEHOLDER = re.compile(r"<(str|bool|int|text)[^>]*>")


def test_version_prints_the_version_on_stdout():
    result = run_olake("--version")
    assert result.returncode == 0 and result.stderr == b""
    assert result.stdout.decode() == f"olake {__version__}\n"


def test_top_level_help_names_every_source_and_destination():
    result = run_olake("--help")
    text = result.stdout.decode()
    assert result.returncode == 0, result.stderr
    assert f"Sources: {', '.join(SOURCES)}. Destinations: {', '.join(DESTINATIONS)}." in " ".join(text.split())
    assert "--version" in text and "--log-format text|json" in text
    assert not TYPE_PLACEHOLDER.search(text), text


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_command_help_shows_value_names_not_types(command):
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert not TYPE_PLACEHOLDER.search(result.output), result.output
    assert re.search(r"^  --help\s+Show this message and exit\.$", result.output, re.MULTILINE), result.output
    for option in ("--config", "--catalog", "--state", "--source", "--destination"):
        for line in result.output.splitlines():
            if line.strip().startswith(option + " "):
                assert line.split()[1] in ("FILE", "TYPE"), line


def test_sync_help_names_its_values():
    output = CliRunner().invoke(app, ["sync", "--help"]).output
    for shown in ("--source FILE", "--destination FILE", "--catalog FILE", "--state FILE", "--spark-master URL",
                  "--max-parallel N"):
        assert shown in output, output
