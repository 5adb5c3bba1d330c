"""Trace readers: records/s and peak memory per reader, against DuckDB on the same events in the same run.

For each reader the SYNTHETIC events of :mod:`aumann.data.traces.synth` (heavy-tailed agents, time-ordered
steps, 7 OASIS action types) are written once in the reader's schema; then, each in a fresh process
(so peak RSS is the read's own):

* ``aumann``: ``read_trace`` with the format's default spec (OASIS: per-step counts of each action;
  AgentSociety 2 spans: per-tick counts of each span name, ticks inherited through trace ids; table: a
  count_each spec) → a dense panel;
* ``duckdb``: DuckDB counting the same events per (agent, step, action) — ``GROUP BY ALL`` over the same
  file (JSONL shards, CSV), or for SQLite over the same events written as Parquet (DuckDB cannot read
  SQLite without downloading an extension);
* ``otlp``: the same spans as ``otel`` in the OpenTelemetry protocol's JSON encoding (one ``resourceSpans``
  envelope per trace and line), read by the otel reader with its default spec; DuckDB unnests the envelopes of the
  same file and counts the spans per (agent, trace, name);
* Concordia: the default spec (acted, action_chars) over a log of entity actions; DuckDB counts the same
  entries written as JSON lines (a single JSON document is not DuckDB's streaming case);
* ``sqlite scan`` (OASIS only): Python iterating ``SELECT user_id, created_at, action FROM trace`` — the
  floor of any Python SQLite reader.

Ratios (aumann / duckdb) are what to compare; absolute seconds depend on the load (printed beside).

    python benchmarks/bench_traces.py --events 1e7 --agents 1e5 --steps 50 --readers oasis,otel,table
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time
from pathlib import Path


def _vm(key: str) -> float:
    """VmHWM (peak) or VmRSS of this process in MiB (/proc: reset at exec, unlike ru_maxrss)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(kind: str, path: str, q) -> None:
    import duckdb  # imported before the clock and the baseline RSS: imports are not reading
    import numpy  # noqa: F401
    import pandas  # noqa: F401

    import aumann.data.traces.read  # noqa: F401

    base = _vm("VmRSS")
    t0 = time.perf_counter()
    info: dict = {}
    if kind == "aumann":
        from aumann.data.traces import read_trace

        fmt, spec = path.split("|", 1)[0], None
        target = path.split("|", 1)[1]
        if fmt == "table":
            spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "step"},
                    "action": {"field": "action"}, "features": [{"kind": "count_each"}]}
        r = read_trace(target, spec, format=fmt)
        info = {"records": r.report.records, "skipped": r.report.n_skipped, "panel": list(r.panel.shape)}
    elif kind == "duckdb":
        import duckdb

        con = duckdb.connect()
        src, cols = path.split("|", 1)
        n = con.execute(f"SELECT count(*), sum(n) FROM (SELECT {cols}, count(*) AS n FROM {src} GROUP BY ALL)"
                        ).fetchone()
        info = {"cells": n[0], "records": int(n[1])}
    elif kind == "sqlite":
        import sqlite3

        con = sqlite3.connect(path)
        cur = con.execute("SELECT user_id, created_at, action FROM trace")
        n = 0
        while True:
            rows = cur.fetchmany(65536)
            if not rows:
                break
            n += len(rows)
        info = {"records": n}
    seconds = time.perf_counter() - t0
    q.put({"seconds": seconds, "peak_mib": _vm("VmHWM"), "base_mib": base, **info})


def measure(kind: str, path: str) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(kind, path, q))
    p.start()
    out = q.get()
    p.join()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=float, default=1e6)
    ap.add_argument("--agents", type=float, default=1e4)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--readers", default="oasis,otel,table")
    ap.add_argument("--workdir", default="/tmp/aumann-bench-traces")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    from aumann.data.traces import synth

    n, agents = int(a.events), int(a.agents)
    wd = Path(a.workdir) / f"n{n}-a{agents}-s{a.steps}"
    wd.mkdir(parents=True, exist_ok=True)
    rows = []
    for reader in a.readers.split(","):
        t0 = time.perf_counter()
        if reader == "oasis":
            db = wd / "oasis.db"
            pq = wd / "events.parquet"
            if not db.exists():
                synth.write_oasis(db, n, agents, a.steps)
            if not pq.exists():
                synth.write_table(pq, n, agents, a.steps)
            jobs = [("aumann", f"oasis|{db}"), ("duckdb", f"read_parquet('{pq}')|agent, step, action"),
                    ("sqlite", str(db))]
            size = db.stat().st_size
        elif reader == "otel":
            d = wd / "otel"
            if not (d / "done").exists():
                synth.write_otel(d, n, agents, a.steps)
                (d / "done").write_text("")
            glob = str(d / "trace_*.jsonl")
            jobs = [("aumann", f"otel|{d}"),
                    ("duckdb", f"read_json('{glob}', format='newline_delimited', columns={{resource: "
                               f"'STRUCT(\"agent.id\" BIGINT)', trace_id: 'VARCHAR', name: 'VARCHAR'}})"
                               f"|resource.\"agent.id\", trace_id, name")]
            size = sum(f.stat().st_size for f in d.glob("trace_*.jsonl"))
        elif reader == "otlp":
            f = wd / "otlp.jsonl"
            if not f.exists():
                synth.write_otlp(f, n, agents, a.steps)
            src = ("(SELECT rs.resource.attributes[2].value.intValue AS agent, unnest(ss.spans, recursive := true) "
                   "FROM (SELECT rs, unnest(rs.scopeSpans) AS ss FROM (SELECT unnest(resourceSpans) AS rs FROM "
                   f"read_json('{f}', format='newline_delimited'))))")
            jobs = [("aumann", f"otel|{f}"), ("duckdb", f"{src}|agent, traceId, name")]
            size = f.stat().st_size
        elif reader == "table":
            csv = wd / "events.csv"
            if not csv.exists():
                synth.write_table(csv, n, agents, a.steps)
            jobs = [("aumann", f"table|{csv}"), ("duckdb", f"read_csv('{csv}')|agent, step, action")]
            size = csv.stat().st_size
        elif reader == "concordia":
            log, side = wd / "concordia.json", wd / "concordia_entries.jsonl"
            if not side.exists():
                synth.write_concordia(log, n, agents, a.steps, jsonl=side)
            jobs = [("aumann", f"concordia|{log}"),
                    ("duckdb", f"read_json('{side}', format='newline_delimited')|entity_name, step, action")]
            size = log.stat().st_size
        else:
            print(f"unknown reader {reader!r}", file=sys.stderr)
            return 2
        gen = time.perf_counter() - t0
        res = {kind: measure(kind, path) for kind, path in jobs}
        ref = res["duckdb"]["seconds"]
        for kind, r in res.items():
            rows.append({"reader": reader, "what": kind, "seconds": r["seconds"], "records": r.get("records"),
                         "records_per_s": (r.get("records") or 0) / r["seconds"], "ratio_vs_duckdb":
                         r["seconds"] / ref, "peak_mib": r["peak_mib"], "base_mib": r["base_mib"],
                         "bytes": size, "generate_s": gen, **({"panel": r["panel"]} if "panel" in r else {})})
    load = os.getloadavg()
    print(f"events={n:,} agents={agents:,} steps={a.steps}  load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f} on {os.cpu_count()} cores")
    print(f"{'reader':8} {'what':8} {'seconds':>9} {'records/s':>12} {'× duckdb':>9} {'peak MiB':>9} {'(base)':>7}")
    for r in rows:
        print(f"{r['reader']:8} {r['what']:8} {r['seconds']:9.2f} {r['records_per_s']:12,.0f} "
              f"{r['ratio_vs_duckdb']:9.2f} {r['peak_mib']:9.0f} {r['base_mib']:7.0f}"
              + (f"  panel {r['panel']}" if "panel" in r else ""))
    if a.json:
        Path(a.json).write_text(json.dumps({"load": load, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
