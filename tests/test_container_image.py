"""The container image (``Dockerfile``), built and run when ``OLAKE_TEST_IMAGE=1`` (about 7 minutes; it needs
Debian's ``buildah`` and ``mmdebstrap``): a Debian 12 base is built from Debian's packages (nothing is pulled
from a registry), the ``Dockerfile`` is built on it as written, and in the image, as uid 10001 with ``HOME``
and ``/tmp`` on volumes and the password from the environment (as the Kubernetes example gives them),
``olake --version``, ``discover`` and a ``sync`` (on Spark) of a PostgreSQL table into Parquet run; the rows
equal the table's, and the run wrote nothing outside ``HOME``, ``/tmp`` and its work folder (the example's
read-only root file system holds)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import psycopg
import pyarrow.dataset as ds
import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE, IMAGE = "localhost/olake-test-base:bookworm", "localhost/olake-test:latest"
SITE_CAS = Path("/usr/local/share/ca-certificates")  # a site's own CAs (a proxy's), as its base image has them

pytestmark = pytest.mark.skipif(os.environ.get("OLAKE_TEST_IMAGE") != "1",
                                reason="builds the container image: OLAKE_TEST_IMAGE=1 (about 7 minutes)")


def _run(*argv: str, timeout: float = 1800) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(argv[:6])}: {result.stderr[-3000:]}"
    return result.stdout


def _base(folder: Path) -> str:
    """A Debian 12 minbase image made from Debian's packages by mmdebstrap (kept between runs)."""
    if subprocess.run(["buildah", "inspect", "--type", "image", BASE], capture_output=True).returncode == 0:
        return BASE
    rootfs = folder / "rootfs.tar"
    _run("mmdebstrap", "--variant=minbase", "--include=ca-certificates", "bookworm", str(rootfs),
         "http://deb.debian.org/debian")
    ctr = _run("buildah", "from", "scratch").strip()
    try:
        _run("buildah", "add", ctr, str(rootfs), "/")
        if any(SITE_CAS.glob("*.crt")):
            _run("buildah", "copy", ctr, str(SITE_CAS), str(SITE_CAS))
            _run("buildah", "run", "--isolation", "chroot", ctr, "--", "sh", "-c", "update-ca-certificates && "
                 "printf '[global]\\ncert = /etc/ssl/certs/ca-certificates.crt\\n' > /etc/pip.conf")
        _run("buildah", "commit", "-q", ctr, BASE)
    finally:
        subprocess.run(["buildah", "rm", ctr], capture_output=True)
    return BASE


def _in_image(ctr: str, volumes: dict[Path, str], env: dict[str, str], *argv: str) -> str:
    """Run ``argv`` in the working container as uid 10001, on the host's network, with ``volumes``."""
    mounts = [arg for host, inside in volumes.items() for arg in ("-v", f"{host}:{inside}")]
    envs = [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]
    return _run("buildah", "run", "--isolation", "chroot", "--network", "host", "--user", "10001",
                "--workingdir", "/work", *mounts, *envs, ctr, "--", *argv, timeout=600)


@pytest.mark.timeout(2400)
def test_the_image_builds_and_syncs_as_its_user_with_a_read_only_root(pg_cluster, pg_db, tmp_path):
    missing = [tool for tool in ("buildah", "mmdebstrap") if shutil.which(tool) is None]
    assert not missing, f"OLAKE_TEST_IMAGE=1 needs {missing} (apt-get install buildah mmdebstrap)"
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, status text, total numeric(10,2))")
        conn.execute("INSERT INTO orders SELECT g, 'new', g * 10.5 FROM generate_series(1, 40) g")
        expected = conn.execute("SELECT id, status, total FROM orders ORDER BY id").fetchall()
    _run("buildah", "bud", "--isolation", "chroot", "--network", "host", "--layers", "--build-arg",
         f"BASE={_base(tmp_path)}", "-t", IMAGE, str(ROOT))
    work, home, tmp = (tmp_path / name for name in ("work", "home", "tmp"))
    for folder in (work, home, tmp):
        folder.mkdir()
        folder.chmod(0o777)  # an emptyDir: writable by the pod's user
    source = {**pg_cluster.source_config(pg_db), "password": {"env": "PGPASSWORD"}, "in_process_rows": 0}  # Spark
    (work / "src.json").write_text(json.dumps(source))
    (work / "dst.json").write_text(json.dumps({"type": "parquet", "path": "/work/lake"}))
    ctr = _run("buildah", "from", IMAGE).strip()
    try:
        rootfs = Path(_run("buildah", "mount", ctr).strip())
        started = time.time() - 1
        volumes, env = {work: "/work", home: "/home/olake", tmp: "/tmp"}, {"PGPASSWORD": pg_cluster.password}
        assert _in_image(ctr, volumes, env, "olake", "--version").startswith("olake ")
        _in_image(ctr, volumes, env, "olake", "discover", "--config", "src.json", "--output", "catalog.json")
        _in_image(ctr, volumes, env, "olake", "sync", "--source", "src.json", "--destination", "dst.json",
                  "--catalog", "catalog.json", "--state", "state.json")
        written = _written_since(rootfs, started, ("home/olake", "tmp", "work", "proc", "sys", "dev", "run"))
    finally:
        subprocess.run(["buildah", "rm", ctr], capture_output=True)
    rows = ds.dataset(str(work / "lake" / "public" / "orders")).to_table(
        columns=["id", "status", "total"]).sort_by("id").to_pylist()
    assert [(r["id"], r["status"], r["total"]) for r in rows] == expected
    assert written == [], f"the run wrote outside HOME, /tmp and its work folder: {written[:20]}"
    assert (home / ".local" / "state" / "olake" / "spark.log").is_file(), "Spark's JVM ran, its log under HOME"


def _written_since(rootfs: Path, since: float, skipped: tuple[str, ...]) -> list[str]:
    """Files of the container's root file system changed after ``since`` (``skipped`` folders left out)."""
    changed = []
    for folder, subfolders, files in os.walk(rootfs):
        relative = os.path.relpath(folder, rootfs)
        subfolders[:] = [name for name in subfolders if os.path.normpath(os.path.join(relative, name)) not in skipped]
        changed += [os.path.join(relative, name) for name in files
                    if os.lstat(os.path.join(folder, name)).st_mtime > since]
    return sorted(changed)
