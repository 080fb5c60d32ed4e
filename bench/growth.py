"""How cost grows: every full-load path at several table sizes, a least-squares fit per path, and a chart.

    .venv/bin/python bench/growth.py --png docs/images/growth.png           # 1M, 5M, 10M, 20M rows (~30 min)
    .venv/bin/python bench/growth.py --sizes 20000,50000 --out /tmp/g.json  # a quick check
    .venv/bin/python bench/growth.py --from /tmp/g.json --png docs/images/growth.png  # table and chart again

Measuring: one throwaway PostgreSQL; for each size (smallest first), bench/run.py's own full load
(``run.full_load``: the table regenerated at that size in a fresh database, VACUUM FREEZE, every
selected path timed as one cold process tree, every output's rows counted; a wrong count marks the path
FAILED, and a failed path stays in the results with its reason). Paths (``--only`` picks some; the raw
COPY baseline always runs): raw COPY, ``olake sync`` → Parquet, ``olake sync`` → Iceberg, ``olake read |
olake write`` → Parquet, dlt + connectorx → Parquet (from bench/.venv-peers). Wall time and peak RSS
(bench/measure.py: the process tree's, the largest process's, the olake driver's) of each, whether olake
scanned in process or as Spark tasks (its log says), and the 1-minute load average (sampled every 10 s)
go to the JSON file ``--out`` (after each size, so a stopped run keeps what it measured).

Then, from that JSON (or from ``--from``): a Markdown table on stdout (wall seconds per path per size,
and per path the fit ``time = fixed cost + cost per million rows × millions`` over the sizes where the
path succeeded), peak RSS per path per size; progress goes to stderr. With ``--png``, the chart: time
against rows, one line with markers per path (hollow where olake scanned as Spark tasks), each fit as a
dotted line. matplotlib is not one of
olake's dependencies: it is in bench/requirements-peers.txt, and this script draws by running itself
with bench/.venv-peers' Python (``--chart-from JSON --png FILE``, a mode that imports nothing but
matplotlib and the standard library), creating or refreshing that venv first as run.py does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = ("copy", "sync-parquet", "sync-iceberg", "pipe-parquet", "dlt-connectorx")
OLAKE_PATHS = {"sync-parquet", "sync-parquet-spark", "sync-iceberg", "pipe-parquet"}
COLORS = {"copy": "black", "sync-parquet": "tab:blue", "sync-parquet-spark": "tab:cyan", "sync-iceberg": "tab:green",
          "pipe-parquet": "tab:purple", "dlt-connectorx": "tab:red", "dlt-pyarrow": "tab:orange",
          "spark-jdbc": "tab:brown"}
SHORT = {"copy": "raw COPY (FORMAT binary) > /dev/null", "dlt-connectorx": "dlt + connectorx → Parquet"}


def say(text: str) -> None:
    """A progress line on stderr."""
    print(f"[growth] {text}", file=sys.stderr, flush=True)


class LoadSampler(threading.Thread):
    """The machine's 1-minute load average every ``interval`` seconds while the benchmark runs."""

    def __init__(self, interval: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.interval, self.samples = interval, []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.samples.append(round(os.getloadavg()[0], 2))
            self._halt.wait(self.interval)

    def take(self) -> dict[str, float]:
        """Mean, min and max of the samples so far, and starts afresh."""
        samples, self.samples = self.samples or [round(os.getloadavg()[0], 2)], []
        return {"mean": round(statistics.fmean(samples), 2), "min": min(samples), "max": max(samples)}

    def stop(self) -> None:
        self._halt.set()
        self.join()


# --- measuring (olake's .venv) ------------------------------------------------------------------


def path_result(row, log: Path) -> dict:
    """One path at one size as JSON: its status, wall time and memory, and where olake scanned (and the
    row estimate it decided by)."""
    m = row.m
    out = {"label": row.label, "status": row.status, "ok": row.ok, "wall_s": m.wall_s if m else None}
    if m is not None:
        out.update(tree_peak_mib=m.tree_peak_mib, max_proc_mib=m.max_proc_mib, max_proc_kind=m.max_proc_kind,
                   driver_mib=m.driver_mib, per_kind_mib=m.per_kind_mib)
    if row.key in OLAKE_PATHS and log.exists():
        text = log.read_text(errors="replace")
        out["scanned"] = "in process" if "without Spark" in text else "Spark tasks"
        planned = re.search(r"full load in \d+ chunk\(s\), about (\d+) rows", text)
        out["row_estimate"] = int(planned.group(1)) if planned else None  # what in_process_rows is held to
    return out


def one_size(run, cluster, root: Path, args: argparse.Namespace, rows: int, selected: set[str],
             load: LoadSampler) -> dict:
    """bench/run.py's full load at ``rows`` rows (fresh database and work folder), as JSON."""
    work = root / f"rows-{rows}"
    work.mkdir()
    bench_args = argparse.Namespace(rows=rows, chunk_rows=args.chunk_rows, spark_master=args.spark_master)
    load.take()
    found, info = run.full_load(run.Bench(bench_args, cluster, work), selected)
    result = {"rows": rows, "table_size": info.get("table_size"), "server_version": info.get("server_version"),
              "load": load.take(), "paths": {r.key: path_result(r, work / f"{r.key}.log") for r in found}}
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


def measure(args: argparse.Namespace, selected: set[str]) -> dict:
    """Every size in turn on one throwaway cluster; the results written to ``args.out`` after each."""
    sys.path.insert(0, str(ROOT))
    from bench import run

    run.KEEP = args.keep
    mach = run.machine()
    results = {"command": shlex.join(["bench/growth.py", *sys.argv[1:]]), "machine": mach,
               "python": platform.python_version(), "spark_master": args.spark_master,
               "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "sizes": []}
    say(f"{mach['cores']} cores, {mach['memory']}, load {mach['load']}; sizes {args.sizes}; "
        f"paths {', '.join(sorted(selected))}; results to {args.out}")
    cluster, root = run.start_cluster(), Path(tempfile.mkdtemp(prefix="olake-bench-growth-"))
    load = LoadSampler()
    load.start()
    try:
        for rows in args.sizes:
            say(f"--- {rows:,} rows (load average {os.getloadavg()[0]:.2f}) ---")
            results["sizes"].append(one_size(run, cluster, root, args, rows, selected, load))
            results["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            args.out.write_text(json.dumps(results, indent=1) + "\n")
    finally:
        load.stop()
        cluster.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return results


# --- the report (either venv) --------------------------------------------------------------------


def fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares over (millions of rows, seconds): (fixed seconds, seconds per million), or None."""
    if len({x for x, _ in points}) < 2:
        return None
    slope, intercept = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    return intercept, slope


def series(results: dict) -> dict[str, dict]:
    """Per path (in the order they ran): its label, its (millions, seconds) points where it succeeded, and
    for each point whether olake scanned as Spark tasks."""
    out: dict[str, dict] = {}
    for size in results["sizes"]:
        for key, p in size["paths"].items():
            s = out.setdefault(key, {"label": p["label"], "points": [], "spark": []})
            if p["ok"]:
                s["points"].append((size["rows"] / 1e6, p["wall_s"]))
                s["spark"].append(p.get("scanned") == "Spark tasks")
    return out


def _cell(p: dict | None) -> str:
    """A path's wall seconds at one size, its failure, or a dash where it did not run."""
    if p is None:
        return "–"
    if not p["ok"]:
        return "**" + p["status"].split(":")[0] + "**"
    return f"{p['wall_s']:.2f}" + (" ¹" if p.get("scanned") == "Spark tasks" else "")


def markdown(results: dict) -> str:
    """The tables: wall seconds per path per size with each path's fit, then peak RSS."""
    sizes, mach = results["sizes"], results["machine"]
    head = " | ".join(f"{s['rows']:,}" for s in sizes)
    loads = ", ".join(f"{s['rows'] / 1e6:g}M {s['load']['mean']:.1f} ({s['load']['min']:.1f}-{s['load']['max']:.1f})"
                      for s in sizes)
    out = ["```", f"$ .venv/bin/python {results['command']}", "```", "",
           f"{mach['cores']} cores ({mach['cpu']}), {mach['memory']}; {results['started_at']} to "
           f"{results.get('finished_at', '?')} UTC; 1-minute load average during each size, mean (min-max): {loads}.",
           "", f"| path \\ rows | {head} | fixed cost s | s per million rows |",
           "|---|" + "---:|" * (len(sizes) + 2)]
    notes = []
    for key, s in series(results).items():
        f = fit(s["points"])
        cells = [_cell(size["paths"].get(key)) for size in sizes]
        notes += [f"- {s['label']} at {size['rows']:,} rows: {size['paths'][key]['status']}"
                  for size in sizes if key in size["paths"] and not size["paths"][key]["ok"]]
        fitted = [f"{f[0]:.2f}", f"{f[1]:.2f}"] if f else ["–", "–"]
        out.append(f"| {s['label']} | " + " | ".join(cells + fitted) + " |")
    out += ["", "¹ olake scanned the chunks as Spark tasks (the load was above `in_process_rows`); unmarked olake "
            "cells: in process, without Spark."] + ([""] + notes if notes else [])
    out += ["", "Peak RSS in MiB: the olake driver's (largest olake_cli process) / the whole process tree's.", "",
            f"| path \\ rows | {head} |", "|---|" + "---:|" * len(sizes)]
    for key, s in series(results).items():
        cells = []
        for size in sizes:
            p = size["paths"].get(key)
            driver = p.get("driver_mib") if p and p["ok"] else None
            cells.append("–" if not p or not p["ok"] else
                         f"{driver:,.0f} / {p['tree_peak_mib']:,.0f}" if driver else f"{p['tree_peak_mib']:,.0f}")
        out.append(f"| {s['label']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


# --- the chart (bench/.venv-peers) -----------------------------------------------------------------


def draw(results: dict, png: Path) -> None:
    """The chart: seconds against millions of rows, one line with markers per path (hollow where olake ran
    Spark tasks), its fit dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    top = max((s["rows"] for s in results["sizes"]), default=1) / 1e6
    for key, s in series(results).items():
        if not s["points"]:
            continue
        xs, ys = zip(*s["points"])
        label = SHORT.get(key) or s["label"].replace("`", "").replace("\\|", "|")
        f = fit(s["points"])
        if f:
            label += f" ({f[0]:.1f} s + {f[1]:.2f} s/M)"
            ax.plot([0, top], [f[0], f[0] + f[1] * top], ":", color=COLORS.get(key), linewidth=1)
        ax.plot(xs, ys, "-", color=COLORS.get(key), label=label, linewidth=1.8)
        for x, y, spark in zip(xs, ys, s["spark"]):
            ax.plot([x], [y], "o", color=COLORS.get(key), markersize=6, markerfacecolor="white" if spark else None)
    mach, day = results["machine"], results["started_at"][:10]
    loads = [s["load"]["mean"] for s in results["sizes"]]
    ax.set_title(f"Full load from PostgreSQL: wall time against rows\n{mach['cores']}-core machine, {day}, "
                 f"load average {min(loads):.1f} to {max(loads):.1f} (shared machine)", fontsize=11)
    ax.set_xlabel("rows (millions)")
    ax.set_ylabel("wall time (s), one cold process tree")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xticks([s["rows"] / 1e6 for s in results["sizes"]])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.text(0.99, 0.01, "dotted: least-squares fit, fixed cost + cost per million rows; hollow marker: olake "
             "scanned as Spark tasks (above in_process_rows), filled: in process", ha="right", fontsize=7, color="gray")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    say(f"chart written to {png}")


def chart(json_path: Path, png: Path) -> None:
    """Draw ``png`` from ``json_path`` with bench/.venv-peers' Python (which has matplotlib)."""
    sys.path.insert(0, str(ROOT))
    from bench import peers

    python = peers.ensure_peers_venv()
    subprocess.run([str(python), __file__, "--chart-from", str(json_path), "--png", str(png)], check=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,5000000,10000000,20000000", help="rows, comma-separated")
    parser.add_argument("--only", default=",".join(DEFAULT_PATHS[1:]),
                        help="bench/run.py full-load paths to run (the raw COPY baseline always runs)")
    parser.add_argument("--out", type=Path, default=None, help="the results as JSON (default: under /tmp)")
    parser.add_argument("--png", type=Path, default=None, help="draw the chart into this PNG file")
    parser.add_argument("--from", dest="from_json", type=Path, help="report (and draw) from earlier results")
    parser.add_argument("--chart-from", type=Path, help=argparse.SUPPRESS)  # the drawing step, in .venv-peers
    parser.add_argument("--chunk-rows", type=int, default=None, help="olake's chunk_rows (default: olake's)")
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument("--keep", action="store_true", help="keep the work folders (logs, configs, outputs)")
    args = parser.parse_args()
    args.sizes = sorted(int(x) for x in args.sizes.split(",") if x.strip())
    if not args.sizes or min(args.sizes) <= 0:
        parser.error("--sizes: one or more positive row counts")
    if args.out is None:
        args.out = Path(tempfile.gettempdir()) / f"olake-growth-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}.json"
    return args


def main() -> None:
    args = parse_args()
    if args.chart_from:
        draw(json.loads(args.chart_from.read_text()), args.png)
        return
    if args.from_json:
        results, args.out = json.loads(args.from_json.read_text()), args.from_json
    else:
        sys.path.insert(0, str(ROOT))
        from bench.run import FULL_PATHS

        selected = {p.strip() for p in args.only.split(",") if p.strip()}
        unknown = selected - set(FULL_PATHS)
        if unknown:
            raise SystemExit(f"growth.py: unknown path(s) in --only: {', '.join(sorted(unknown))} "
                             f"(paths: {', '.join(FULL_PATHS)})")
        results = measure(args, selected)
    print(markdown(results))
    if args.png:
        chart(args.out, args.png)


if __name__ == "__main__":
    main()
