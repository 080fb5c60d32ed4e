"""``olake pack``: one archive holding olake and its dependencies, for executors that have neither.

The archive (``.tar.gz``) unpacks to a folder of importable packages: olake_cli and every
distribution it needs, copied as they are installed here (the very versions the driver runs; no
download, so it works offline and takes seconds). Name it in the source config's
``spark.archive``: a run adds it to its Spark session (``addArtifacts(..., archive=True)``:
``spark.archives`` on classic Spark, a session artifact over Spark Connect), and each task puts the
unpacked folder first on ``sys.path`` (engine/task_entry.py), so the workers' own Python needs no
olake. The workers' Python must be the same minor version on the same platform (compiled modules),
and have what every PySpark Arrow worker has, which the archive leaves out: pyarrow, pandas, numpy
(and PySpark itself with py4j and its Spark Connect client libraries).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Callable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from olake_cli.core.errors import ConfigError, OlakeError

DISTRIBUTION = "olake-cli"
LEFT_OUT = {"pyspark", "py4j", "pyarrow", "pandas", "numpy", "grpcio", "grpcio-status",
            "googleapis-common-protos", "protobuf"}


def needed_distributions() -> list[importlib.metadata.Distribution]:
    """The installed distributions olake needs at run time, transitively (without LEFT_OUT)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = [(DISTRIBUTION, frozenset())]
    while pending:
        name, extras = pending.pop()
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise OlakeError(f"pack: '{name}', which olake needs, is not installed here") from None
        for text in dist.requires or []:
            requirement = Requirement(text)
            wanted = canonicalize_name(requirement.name)
            if wanted in LEFT_OUT or wanted in found:
                continue
            markers = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(m) for m in markers):
                pending.append((wanted, frozenset(requirement.extras)))
        found[canonicalize_name(name)] = dist
    del found[canonicalize_name(DISTRIBUTION)]  # olake_cli itself is copied from its package folder
    return list(found.values())


def _copy_distribution(dist: importlib.metadata.Distribution, target: str) -> int:
    """Copy a distribution's installed files that live in its site-packages folder; how many."""
    copied = 0
    for entry in dist.files or []:
        if entry.parts[0] == ".." or "__pycache__" in entry.parts:
            continue  # scripts in bin/ and the like; compiled bytecode is made again where it runs
        source = str(dist.locate_file(entry))
        if os.path.isfile(source):
            destination = os.path.join(target, *entry.parts)
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            shutil.copy2(source, destination)
            copied += 1
    return copied


def build_pack(output: str, log: Callable[[str], None]) -> str:
    """Write the archive to ``output`` (atomically: a half-built one is never left there); its path."""
    output = os.path.abspath(os.path.expanduser(output))
    if not output.endswith((".tar.gz", ".tgz")):
        raise ConfigError(f"pack: '{output}' must end in .tar.gz or .tgz (Spark unpacks archives by their name)")
    if not os.path.isdir(os.path.dirname(output)):
        raise ConfigError(f"pack: the folder of '{output}' does not exist")
    import olake_cli

    distributions = needed_distributions()
    with tempfile.TemporaryDirectory(prefix="olake-pack-", dir=os.path.dirname(output)) as work:
        target = os.path.join(work, "env")
        for dist in distributions:
            _copy_distribution(dist, target)
        shutil.copytree(os.path.dirname(os.path.abspath(olake_cli.__file__)), os.path.join(target, "olake_cli"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        partial = os.path.join(work, "pack.tar.gz")
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            for entry in sorted(os.listdir(target)):
                tar.add(os.path.join(target, entry), arcname=entry)
        os.replace(partial, output)
    log(f"pack: wrote {output} ({os.path.getsize(output) >> 20} MiB, olake and {len(distributions)} package(s) "
        f"for Python {sys.version_info.major}.{sys.version_info.minor}); name it in the source config as "
        f"\"spark\": {{\"archive\": \"{output}\"}}")
    return output
