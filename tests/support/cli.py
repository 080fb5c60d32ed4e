"""Run the real ``olake`` command as a subprocess, alone or as ``read | write``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson


def olake_env() -> dict[str, str]:
    """Environment for olake subprocesses (a small local Spark)."""
    env = dict(os.environ)
    env.setdefault("OLAKE_SPARK_MASTER", "local[2]")
    env.setdefault("OLAKE_SPARK_DRIVER_MEMORY", "1g")
    return env


def olake_cmd(*args: str) -> list[str]:
    """argv running olake with this interpreter."""
    return [sys.executable, "-m", "olake_cli", *args]


def run_olake(*args: str, stdin: bytes | None = None, timeout: float = 600,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run one olake command to completion, capturing stdout and stderr as bytes (``env``: extra variables)."""
    return subprocess.run(olake_cmd(*args), input=stdin, capture_output=True, timeout=timeout,
                          env={**olake_env(), **(env or {})})


def messages(stdout: bytes) -> list[dict]:
    """Parse stdout as JSON lines (every line must be a JSON object)."""
    return [orjson.loads(line) for line in stdout.splitlines() if line.strip()]


def trace_errors(stdout: bytes) -> list[dict]:
    """The TRACE error messages on stdout."""
    return [m for m in messages(stdout) if m.get("type") == "TRACE" and m["trace"].get("type") == "ERROR"]


def write_json(path: Path, obj: object) -> str:
    """Write ``obj`` as JSON to ``path``; returns the path as a string."""
    path.write_text(json.dumps(obj, indent=2))
    return str(path)


@dataclass
class PipeResult:
    """Outcome of ``olake read | olake write``."""

    read_code: int
    write_code: int
    read_stderr: bytes
    write_stdout: bytes
    write_stderr: bytes


def read_into_write(read_args: list[str], write_args: list[str], timeout: float = 900) -> PipeResult:
    """Run ``olake read ARGS | olake write ARGS`` and wait for both."""
    env = olake_env()
    reader = subprocess.Popen(olake_cmd("read", *read_args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    writer = subprocess.Popen(olake_cmd("write", *write_args), stdin=reader.stdout, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env)
    reader.stdout.close()
    w_out, w_err = writer.communicate(timeout=timeout)
    r_err = reader.stderr.read()
    reader.wait(timeout=60)
    return PipeResult(reader.returncode, writer.returncode, r_err, w_out, w_err)


def start_read_into_write(read_args: list[str], write_args: list[str]) -> tuple[subprocess.Popen, subprocess.Popen]:
    """Start ``olake read ARGS | olake write ARGS`` as a terminal runs a job: both in one new process
    group (whose id is the reader's pid), so ``os.killpg(reader.pid, SIGINT)`` is Ctrl-C. Both
    stderrs and write's stdout are pipes; read ``(reader.stderr, writer.stdout, writer.stderr)``."""
    env = olake_env()
    reader = subprocess.Popen(olake_cmd("read", *read_args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env, process_group=0)
    writer = subprocess.Popen(olake_cmd("write", *write_args), stdin=reader.stdout, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, process_group=reader.pid)
    reader.stdout.close()
    return reader, writer


def kill_read_after_chunks(read_args: list[str], write_args: list[str], chunks: int = 3) -> tuple[int, bytes]:
    """Run ``read | write`` and SIGKILL read once write has echoed ``chunks`` committed chunks; returns
    write's exit status and stderr.

    write echoes a STATE once it is committed; the pipe's back-pressure keeps read at most a chunk or
    two ahead, so the kill lands in the middle of the load.
    """
    import signal

    env = olake_env()
    reader = subprocess.Popen(olake_cmd("read", *read_args), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env)
    writer = subprocess.Popen(olake_cmd("write", *write_args), stdin=reader.stdout, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env)
    reader.stdout.close()
    for line in writer.stdout:
        echoed = json.loads(line)["state"]["streams"][0]["stream_state"].get("chunks") or []
        if sum(c["status"] == "succeed" for c in echoed) >= chunks:
            break
    assert reader.poll() is None, "read finished before it could be killed"
    os.kill(reader.pid, signal.SIGKILL)
    reader.wait()
    _, stderr = writer.communicate(timeout=60)
    return writer.returncode, stderr


def with_stream_ends(stdin: bytes) -> bytes:
    """``stdin`` followed by a STREAM_STATUS COMPLETE for every stream of its CATALOG lines: the end
    ``olake read`` gives its output, without which ``write`` reports that the reading side stopped early."""
    ends = []
    for line in stdin.splitlines():
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(msg, dict) and msg.get("type") == "CATALOG":
            for stream in msg["catalog"]["streams"]:
                body = stream.get("stream", stream)
                ends.append({"type": "TRACE", "trace": {"type": "STREAM_STATUS", "emitted_at": 0, "stream_status": {
                    "stream_descriptor": {"name": body["name"], "namespace": body.get("namespace")},
                    "status": "COMPLETE"}}})
    return stdin + b"".join(orjson.dumps(end) + b"\n" for end in ends)


def end_process(process: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM a server this process started, SIGKILL it if it has not ended within ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
