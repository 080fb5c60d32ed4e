"""``olake pack``: one archive holding olake and its dependencies, for executors that have neither.

The archive (``.tar.gz``) unpacks to a folder of importable packages: olake_cli as installed here,
and every dependency it declares, resolved by pip for this interpreter and platform. Name it in the
source config's ``spark.archive``: a run adds it to its Spark session (``addArtifacts(...,
archive=True)``: ``spark.archives`` on classic Spark, a session artifact over Spark Connect), each
task puts the unpacked folder first on ``sys.path`` (engine/task_entry.py), so the workers' own
Python needs no olake. Left out, because every Python worker of a PySpark Arrow UDF already has them:
PySpark itself (and py4j, and its Spark Connect client libraries), pyarrow, pandas and numpy.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable

from olake_cli.core.errors import ConfigError, OlakeError

DISTRIBUTION = "olake-cli"
LEFT_OUT = {"pyspark", "py4j", "pyarrow", "pandas", "numpy", "grpcio", "grpcio-status",
            "googleapis-common-protos", "protobuf"}


def _name(requirement: str) -> str:
    """The normalised project name of a requirement string (``pyspark[connect]>=4`` -> ``pyspark``)."""
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def runtime_requirements() -> list[str]:
    """olake's declared dependencies that executors need (no extras, nothing in LEFT_OUT)."""
    declared = importlib.metadata.requires(DISTRIBUTION) or []
    return [r for r in declared if "extra ==" not in r and _name(r) not in LEFT_OUT]


def _resolve(requirements: list[str], folder: str) -> list[str]:
    """``name==version`` of everything pip would install for ``requirements`` here, minus LEFT_OUT."""
    report = os.path.join(folder, "report.json")
    _pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", report, *requirements])
    with open(report) as fh:
        installs = json.load(fh)["install"]
    pinned = []
    for item in installs:
        meta = item["metadata"]
        if _name(meta["name"]) not in LEFT_OUT:
            pinned.append(f"{meta['name']}=={meta['version']}")
    return pinned


def _pip(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise OlakeError(f"pack: pip {args[0]} failed ({reason})")


def build_pack(output: str, log: Callable[[str], None]) -> str:
    """Write the archive to ``output`` (atomically: a half-built one is never left there); its path."""
    output = os.path.abspath(os.path.expanduser(output))
    if not output.endswith((".tar.gz", ".tgz")):
        raise ConfigError(f"pack: '{output}' must end in .tar.gz or .tgz (Spark unpacks archives by their name)")
    if not os.path.isdir(os.path.dirname(output)):
        raise ConfigError(f"pack: the folder of '{output}' does not exist")
    with tempfile.TemporaryDirectory(prefix="olake-pack-") as work:
        target = os.path.join(work, "env")
        pinned = _resolve(runtime_requirements(), work)
        log(f"pack: installing {len(pinned)} package(s) for Python "
            f"{sys.version_info.major}.{sys.version_info.minor}")
        _pip(["install", "--quiet", "--no-deps", "--no-compile", "--target", target, *pinned])
        import olake_cli

        shutil.copytree(os.path.dirname(os.path.abspath(olake_cli.__file__)), os.path.join(target, "olake_cli"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        partial = os.path.join(work, "pack.tar.gz")
        with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
            for entry in sorted(os.listdir(target)):
                tar.add(os.path.join(target, entry), arcname=entry)
        shutil.move(partial, output + ".partial")
        os.replace(output + ".partial", output)
    log(f"pack: wrote {output} ({os.path.getsize(output) >> 20} MiB); name it in the source config as "
        f"\"spark\": {{\"archive\": \"{output}\"}}")
    return output
