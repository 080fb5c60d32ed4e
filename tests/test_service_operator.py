"""Running ``--follow`` as a service (docs/running-continuously.md): Ctrl-C in the change phase ends with
exactly one line and status 130, the metrics are served on this machine only unless ``--metrics-host``
says otherwise, and a bad ``--metrics-host`` is refused before the run starts. The page's systemd unit
(checked by ``systemd-analyze verify`` where it is installed) and Kubernetes Deployment say what the
exit-code table, the Dockerfile and the build command say."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.support.cdc import discover_catalog
from tests.support.cli import run_olake, write_json
from tests.support.follow import create_counted_table, lake_equals_source, start_olake, stop, wait_until
from tests.test_bad_input import assert_one_error
from tests.test_docs_site import DOCS, ROOT, code_blocks, section


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _outside_address() -> str | None:
    """An address of this machine that is not loopback (None when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
        except OSError:
            return None
        address = sock.getsockname()[0]
    return None if address.startswith("127.") else address


def _serves_metrics(host: str, port: int) -> bool:
    try:
        return b"olake_commits_total" in urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read()
    except OSError:
        return False


def test_ctrl_c_while_following_says_one_line_and_metrics_stay_local_unless_asked(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    create_counted_table(dsn)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=f"svc_{pg_db}", publication=f"svc_{pg_db}_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    port, outside = _free_port(), _outside_address()
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(tmp_path / "state.json"), "--follow", "--commit-interval", "0.5",
            "--metrics-port", str(port)]
    log = tmp_path / "run.log"
    run = start_olake(args, log, stdout=subprocess.DEVNULL)
    wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
    wait_until(lambda: _serves_metrics("127.0.0.1", port), "metrics are served on 127.0.0.1", run=run)
    assert f"metrics on http://127.0.0.1:{port}/metrics" in log.read_text()
    if outside is not None:
        assert not _serves_metrics(outside, port), f"metrics reachable on {outside}"
    stop(run, signal.SIGINT)
    ending = log.read_text().split("following the change log", 1)[1]
    endings = [line for line in ending.splitlines() if "stopped by" in line or "interrupted" in line]
    assert run.returncode == 130 and endings == [ending.strip().splitlines()[-1]], ending[-3000:]
    assert endings[0].startswith("olake: stopped by SIGINT; what was committed is kept"), endings

    log.write_text("")
    run = start_olake([*args, "--metrics-host", "0.0.0.0"], log, stdout=subprocess.DEVNULL)
    wait_until(lambda: "following the change log" in log.read_text(), "the rerun follows", run=run)
    wait_until(lambda: _serves_metrics(outside or "127.0.0.1", port), "metrics on every interface", run=run)
    assert f"metrics on http://0.0.0.0:{port}/metrics" in log.read_text()
    wait_until(lambda: lake_equals_source(tmp_path / "lake" / "public" / "t", dsn), "the lake equals the source")
    stop(run)
    assert run.returncode == 0 and "stopped by SIGTERM" in log.read_text().splitlines()[-1], log.read_text()[-3000:]


def test_a_bad_metrics_host_is_refused_before_the_run(tmp_path):
    src = write_json(tmp_path / "src.json", {"type": "postgres", "host": "127.0.0.1", "database": "x",
                                             "username": "u"})
    base = ["sync", "--source", src, "--destination", src, "--catalog", str(tmp_path / "none.json"), "--follow"]
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        for extra, needle in (
                (["--metrics-host", "0.0.0.0"], "--metrics-host applies with --metrics-port only"),
                (["--metrics-port", "9464", "--metrics-host", "no-such-host.invalid"],
                 "--metrics-host no-such-host.invalid --metrics-port 9464: cannot serve metrics there"),
                (["--metrics-port", port], f"--metrics-host 127.0.0.1 --metrics-port {port}: cannot serve metrics "
                                           "there (Address already in use)")):
            result = run_olake(*base, *extra)
            assert_one_error(result, "config_error", needle)
            assert result.returncode == 78


# ----------------------------------------------------------------------------- the pages' service examples

PAGE = DOCS / "running-continuously.md"


def test_the_systemd_unit_restarts_after_transient_failures_only(tmp_path):
    from olake_cli.cli.report import EXIT_CONFIG, EXIT_TRANSIENT

    [unit] = [b for b in code_blocks(section(PAGE, "As a systemd service"), "ini") if "[Service]" in b]
    settings = dict(line.split("=", 1) for line in re.sub(r"\\\n\s*", " ", unit).splitlines()
                    if "=" in line and not line.startswith("#"))
    assert settings["ExecStart"].startswith("/opt/olake/bin/olake sync ") and ".venv" not in unit
    assert settings["EnvironmentFile"] == "/etc/olake/orders.env" and settings["Environment"].startswith("JAVA_HOME=")
    assert settings["Restart"] == "on-failure"
    assert set(settings["RestartPreventExitStatus"].split()) == {"2", str(EXIT_CONFIG)} and EXIT_TRANSIENT != 1
    table = section(DOCS / "troubleshooting.md", "Exit codes")
    for status in (0, 1, 2, EXIT_TRANSIENT, EXIT_CONFIG, 130):
        assert f"\n| {status} |" in table, status
    assert "--follow" in table and "stopped by SIGTERM" in table
    if shutil.which("systemd-analyze") is None:
        return
    path = tmp_path / "olake-orders.service"  # the unit as written, its olake this environment's
    path.write_text(unit.replace("/opt/olake/bin/olake", str(Path(sys.executable).parent / "olake")))
    verified = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and verified.stdout + verified.stderr == "", verified.stderr


def test_the_kubernetes_example_runs_the_built_image_with_secrets_and_a_writable_home():
    import yaml

    [build] = [line.split() for line in code_blocks(section(PAGE, "A container image"), "bash")[0].splitlines()
               if line.startswith("docker build ")]
    image = build[build.index("-t") + 1]
    kubectl = code_blocks(section(PAGE, "As a Kubernetes Deployment"), "bash")[0]
    secret = re.search(r"kubectl create secret generic (\S+)", kubectl)[1]
    [deployment] = [yaml.safe_load(b) for b in code_blocks(section(PAGE, "As a Kubernetes Deployment"), "yaml")]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == image and deployment["spec"]["replicas"] == 1
    passwords = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert passwords == {name: {"name": secret, "key": name} for name in ("PGPASSWORD", "TARGET_PGPASSWORD")}
    assert all(f"--from-literal={name}=" in kubectl for name in passwords)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    assert mounts["/home/olake"]["emptyDir"] == {} and mounts["/tmp"]["emptyDir"] == {}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "HOME=/home/olake" in dockerfile and f"USER {pod['securityContext']['runAsUser']}\n" in dockerfile
    args = container["args"]
    port = args[args.index("--metrics-port") + 1]
    assert args[args.index("--metrics-host") + 1] == "0.0.0.0" and container["ports"][0]["containerPort"] == int(port)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}  # served from the start
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["ports"][0]["name"] == "metrics"
