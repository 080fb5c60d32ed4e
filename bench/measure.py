"""Wall time and peak memory of a shell pipeline and every process it starts.

Two memory figures, because neither alone is right for a process tree:

* ``tree_peak_mib``: the peak of the *sum* of the resident set sizes of every live process in the
  tree (``bash`` and everything below it: both ends of a pipe, a JVM, Spark's Python workers),
  sampled from ``/proc`` every ``interval`` seconds (what psutil would do, without needing it in
  the venv). It can miss a spike shorter than the interval, and counts pages shared by forked
  workers once per process. It is never below ``max_proc_mib`` (the tree held at least that much
  when its largest process peaked).
* ``max_proc_mib``: the largest peak RSS of any *single* process of the tree: the larger of
  ``ru_maxrss`` from ``/usr/bin/time -v`` and the kernel's per-process high-water mark (``VmHWM``
  in ``/proc/PID/status``) read at each sample. Both are exact peaks, but ``/usr/bin/time`` sees only
  descendants that were waited for, and pyspark never waits for its JVM (it is re-parented when the
  driver exits), so without VmHWM the JVM would be missing; VmHWM can miss only growth in the last
  ``interval`` of a process's life. ``max_proc_kind`` says which kind of process it was.

``driver_mib`` is the largest peak of a process whose command line runs ``olake_cli`` (the driver of
``sync``; ``read`` and ``write`` of a pipe), not counting its JVM or Spark's Python workers.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TIME_BIN = "/usr/bin/time"
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Measurement:
    """What one timed run gave."""

    wall_s: float
    returncode: int
    tree_peak_mib: float
    max_proc_mib: float | None
    driver_mib: float | None
    per_kind_mib: dict[str, float] = field(default_factory=dict)  # largest single process per kind
    source: str = ""  # where max_proc_mib came from
    max_proc_kind: str = ""  # olake, jvm, spark-python-worker, python, psql, ...


def _ppid_and_rss(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        with open(f"/proc/{pid}/statm", "rb") as fh:
            rss_pages = int(fh.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return int(fields[1]), rss_pages * _PAGE


def _hwm(pid: int) -> int:
    """The kernel's own peak RSS of ``pid`` so far (VmHWM), exact between samples."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _kind(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return "other"
    text = b" ".join(argv).decode(errors="replace")
    exe = os.path.basename(argv[0].decode(errors="replace")) if argv else ""
    if exe == "java":  # before olake_cli: the JVM's options name olake_cli's log4j file
        return "jvm"
    if "pyspark.daemon" in text or "pyspark.worker" in text:
        return "spark-python-worker"
    if "olake_cli" in text:
        return "olake"
    if exe.startswith("python"):
        return "python"
    return exe or "other"


class TreeSampler(threading.Thread):
    """Samples the RSS of ``root`` and all its descendants until stopped."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak_sum = 0
        self.per_pid_peak: dict[int, int] = {}
        self.kinds: dict[int, str] = {}
        self._halt = threading.Event()

    def sample(self) -> None:
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            got = _ppid_and_rss(int(name))
            if got is not None:
                children.setdefault(got[0], []).append(int(name))
                rss[int(name)] = got[1]
        total, todo = 0, [self.root]
        while todo:
            pid = todo.pop()
            if pid in rss:
                total += rss[pid]
                peak = max(rss[pid], _hwm(pid))
                if peak > self.per_pid_peak.get(pid, 0):
                    self.per_pid_peak[pid] = peak
                kind = _kind(pid)  # every time: spark-submit's bash execs java in place
                if kind != "other" or pid not in self.kinds:  # a zombie's cmdline is empty: keep the last
                    self.kinds[pid] = kind
            todo.extend(children.get(pid, ()))
        self.peak_sum = max(self.peak_sum, total)

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def measured(command: str, cwd: Path, env: dict[str, str], interval: float = 0.2) -> Measurement:
    """Run ``command`` with ``bash -o pipefail`` and measure it; a failure is returned, not raised."""
    rusage_file = Path(cwd) / f".time-{os.getpid()}-{time.monotonic_ns()}.txt"
    argv = ["bash", "-o", "pipefail", "-c", command]
    have_time = os.access(TIME_BIN, os.X_OK)
    if have_time:
        argv = [TIME_BIN, "-v", "-o", str(rusage_file)] + argv
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env)
    sampler = TreeSampler(proc.pid, interval)
    sampler.start()
    returncode = proc.wait()
    wall = time.perf_counter() - started
    sampler.stop()
    mib = 1024 * 1024
    per_kind: dict[str, float] = {}
    for pid, peak in sampler.per_pid_peak.items():
        kind = sampler.kinds.get(pid, "other")
        per_kind[kind] = max(per_kind.get(kind, 0.0), peak / mib)
    max_proc, source = None, "/proc VmHWM"
    if have_time and rusage_file.exists():
        found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", rusage_file.read_text())
        rusage_file.unlink()
        if found:
            max_proc, source = int(found.group(1)) / 1024, "/usr/bin/time -v"
    kind = max(per_kind, key=per_kind.get) if per_kind else ""
    if kind and (max_proc is None or per_kind[kind] >= max_proc * 0.98):
        # VmHWM agrees with ru_maxrss (to a page or so), or a process time did not reap peaked higher
        max_proc = max(max_proc or 0.0, per_kind[kind])
        source = "/proc VmHWM" if max_proc == per_kind[kind] else source
    else:
        kind = "?"  # ru_maxrss is higher than any sampled peak: a process too short-lived to sample
    # the tree held at least its largest process when that one peaked, whatever the samples missed
    tree_peak = max(sampler.peak_sum / mib, max_proc or 0.0)
    return Measurement(wall_s=wall, returncode=returncode, tree_peak_mib=tree_peak,
                       max_proc_mib=max_proc, driver_mib=per_kind.get("olake"), per_kind_mib=per_kind,
                       source=source, max_proc_kind=kind)
