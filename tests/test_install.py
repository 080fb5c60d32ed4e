"""Installing the tool alone: the wheel ``pip wheel --no-deps .`` builds, installed into a fresh virtual
environment with its runtime dependencies only (no test tools), gives an ``olake`` that prints its
version and a spec, and copies a PostgreSQL table into Parquet by ``sync``, value by value."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import psycopg
import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parents[1]
TEST_ONLY = {"pytest", "moto", "duckdb", "secantusdb", "mkdocs"}


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{argv[:4]}: {result.stderr[-3000:]}"
    return result.stdout


def _wheel(folder: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the project's packaging files (the checkout stays clean)."""
    project = folder / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, project / name)
    shutil.copytree(ROOT / "olake_cli", project / "olake_cli",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), symlinks=True)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(folder / "dist"), str(project)],
         cwd=folder)
    [wheel] = sorted((folder / "dist").glob("olake_cli-*.whl"))
    return wheel


def _installed_env(folder: Path, wheel: Path) -> Path:
    """A fresh virtual environment (no system site packages) with the wheel and its dependencies, installed
    by this environment's pip (``--python``: no pip of its own to bootstrap) from PyPI through pip's cache."""
    target = folder / "venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(target)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    _run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "--no-compile", "-q",
          str(wheel)], cwd=folder, env=env)
    return target


def _clean_env(target: Path) -> dict[str, str]:
    """The environment a user's shell gives the installed olake: its venv first on PATH, nothing of ours."""
    keep = ("HOME", "JAVA_HOME", "LANG", "TMPDIR", "XDG_CACHE_HOME", "XDG_STATE_HOME")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env["PATH"] = f"{target / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    env.update(OLAKE_SPARK_MASTER="local[2]", OLAKE_SPARK_DRIVER_MEMORY="1g")
    return env


def test_the_wheel_installs_alone_and_olake_runs(pg_cluster, pg_db, tmp_path):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, status text, total numeric(10,2), placed date)")
        conn.execute("INSERT INTO orders SELECT g, 'new', g * 10.5, date '2024-01-01' + g "
                     "FROM generate_series(1, 50) g")
        expected = conn.execute("SELECT id, status, total, placed FROM orders ORDER BY id").fetchall()
    target = _installed_env(tmp_path, _wheel(tmp_path))
    try:
        _check_installed(target, pg_cluster.source_config(pg_db), tmp_path, expected)
    finally:
        shutil.rmtree(target, ignore_errors=True)  # about 1 GB; pytest keeps the tmp folders of recent runs


def _check_installed(target: Path, source: dict, tmp_path: Path, expected: list[tuple]) -> None:
    """The installed olake: imported from its own environment with no test tool beside it; its version,
    a spec, and a sync of ``source``'s orders into Parquet equal to ``expected``."""
    env, olake = _clean_env(target), str(target / "bin" / "olake")
    where = _run([str(target / "bin" / "python"), "-c", "import olake_cli; print(olake_cli.__file__)"], tmp_path, env)
    assert where.startswith(str(target)), where
    installed = set(_run([str(target / "bin" / "python"), "-c", "import importlib.metadata as m; "
                          "print('\\n'.join(d.metadata['Name'].lower() for d in m.distributions()))"],
                         tmp_path, env).split())
    assert "pyspark" in installed and "olake-cli" in installed, installed
    assert not installed & TEST_ONLY, f"test tools installed with the runtime: {installed & TEST_ONLY}"
    pandas = _run([str(target / "bin" / "python"), "-c", "import pandas; print(pandas.__version__)"], tmp_path, env)
    assert int(pandas.split(".")[0]) < 3, f"pandas {pandas.strip()}: PySpark 4 does not fully support pandas 3"

    assert _run([olake, "--version"], tmp_path, env).strip().startswith("olake ")
    [spec] = [json.loads(line) for line in _run([olake, "spec", "--source", "postgres"], tmp_path, env).splitlines()]
    assert spec["type"] == "SPEC" and "replication_slot" in spec["spec"]["connectionSpecification"]["properties"]

    (tmp_path / "src.json").write_text(json.dumps(source))
    (tmp_path / "dst.json").write_text(json.dumps({"type": "parquet", "path": str(tmp_path / "lake")}))
    _run([olake, "discover", "--config", "src.json", "--output", "catalog.json"], tmp_path, env)
    _run([olake, "sync", "--source", "src.json", "--destination", "dst.json", "--catalog", "catalog.json",
          "--state", "state.json"], tmp_path, env)
    rows = ds.dataset(str(tmp_path / "lake" / "public" / "orders")).to_table(
        columns=["id", "status", "total", "placed"]).sort_by("id").to_pylist()
    assert [(r["id"], r["status"], r["total"], r["placed"]) for r in rows] == expected
