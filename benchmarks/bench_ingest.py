"""Ingestion throughput benchmark: a generated Jetstream-shaped JSONL through `ingest` and the CLI.

Generates ``--mb`` MB (default 300) of Jetstream v1 events with the event mix of the specs file
(likes 62 %, posts 13 % of which 45 % replies, reposts 9 %, follows 8 %, deletes, identity,
account, non-Bluesky collections, ~0.1 % malformed lines; 200k users), then measures, each against
a reference measured in the same run on the same file:

1. :func:`ingest` in process vs a DuckDB envelope-only scan (did, kind, commit.collection)
   (target ratio ≥ 0.3);
2. ``aumann bluesky build-panel`` (a subprocess, its start-up — ``aumann bluesky build-panel --help``, the
   interpreter and the command's parser — subtracted; also shown with only a bare ``python -c pass``
   subtracted) vs a DuckDB scan of (did, time_us, kind) with a distinct-DID count per kind, both on
   ``--threads`` threads (target ratio ≥ 0.2).

The load average and thread settings are printed with the results, and where the ingest's time goes:
its stages (the ingester logs them at DEBUG), in wall and CPU seconds and in units of the reference's
wall time. ``--repeat N`` measures (1) N times, reference and ingest alternately, and prints each ratio
and their median (the machine is shared: one run says little). ``--floors`` measures the floors of the
design the same way: DuckDB reading every field of the ingester's column spec (no derived column, no table),
the same fields into a table, and the ingester's own scan statement (fields + derived columns → the per-line
table); ``reference / scan`` is the best ratio the ingest could reach if everything after its scan were free.
It also times the floor of a hand-written reader in place of DuckDB's (``_json_locator.py``: a compiled JSON
validator that only records where the ingester's fields lie, builds no string).

Run: ``python benchmarks/bench_ingest.py --mb 300 --threads 2 [--keep /tmp/jetstream-300.jsonl] [--repeat 3]
[--floors]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _env import header

_ALPH = "234567abcdefghijklmnopqrstuvwxyz"
_WORDS = ("the", "a", "today", "really", "news", "people", "think", "game", "love", "vote", "great",
          "weather", "music", "city", "morning", "coffee", "art", "book", "film", "cat", "dog")
_TOPIC_WORDS = ("tariffs", "Claude Mythos", "the Masters", "Earth Day", "WrestleMania", "climate")


def _tid(rng: np.random.Generator, n: int) -> list[str]:
    idx = rng.integers(0, 32, size=(n, 13))
    return ["".join(_ALPH[j] for j in row) for row in idx]


def generate(path: Path, target_bytes: int, seed: int = 0, day: str = "2026-04-20") -> int:
    """Write a Jetstream-shaped JSONL of about ``target_bytes`` bytes; return the number of lines."""
    rng = np.random.default_rng(seed)
    n_users = 200_000
    dids = [f"did:plc:{''.join(_ALPH[j] for j in row)}" for row in rng.integers(0, 32, size=(n_users, 24))]
    t0 = int(np.datetime64(day, "us").astype(np.int64))
    lines = 0
    written = 0
    recent_posts: list[str] = []
    with open(path, "w", encoding="utf-8") as fh:
        while written < target_bytes:
            batch = 20_000
            actors = rng.zipf(1.6, size=batch) % n_users
            targets = rng.zipf(1.4, size=batch) % n_users
            kinds = rng.random(batch)
            times = t0 + np.sort(rng.integers(0, 86_400_000_000, size=batch))
            rkeys = _tid(rng, batch)
            revs = _tid(rng, batch)
            out = []
            for i in range(batch):
                did, tgt, k, tu = dids[actors[i]], dids[targets[i]], kinds[i], int(times[i])
                if k < 0.62:
                    uri = recent_posts[int(rng.integers(len(recent_posts)))] if recent_posts else \
                        f"at://{tgt}/app.bsky.feed.post/{rkeys[i]}"
                    rec = {"$type": "app.bsky.feed.like", "createdAt": "2026-04-20T12:00:00.000Z",
                           "subject": {"cid": "bafyreib" + revs[i] * 4, "uri": uri}}
                    ev = {"collection": "app.bsky.feed.like", "operation": "create", "record": rec}
                elif k < 0.75:
                    words = [_WORDS[j] for j in rng.integers(0, len(_WORDS), size=12)]
                    if rng.random() < 0.05:
                        words[3] = _TOPIC_WORDS[int(rng.integers(len(_TOPIC_WORDS)))]
                    rec = {"$type": "app.bsky.feed.post", "createdAt": "2026-04-20T12:00:00.000Z",
                           "langs": ["en"], "text": " ".join(words)}
                    if rng.random() < 0.45 and recent_posts:
                        p = recent_posts[int(rng.integers(len(recent_posts)))]
                        rec["reply"] = {"parent": {"cid": "bafyreic" + revs[i] * 4, "uri": p},
                                        "root": {"cid": "bafyreic" + revs[i] * 4, "uri": p}}
                    if rng.random() < 0.02:
                        rec["facets"] = [{"index": {"byteStart": 0, "byteEnd": 8},
                                          "features": [{"$type": "app.bsky.richtext.facet#tag", "tag": "Tariffs"}]}]
                    uri = f"at://{did}/app.bsky.feed.post/{rkeys[i]}"
                    if len(recent_posts) < 5000:
                        recent_posts.append(uri)
                    else:
                        recent_posts[int(rng.integers(5000))] = uri
                    ev = {"collection": "app.bsky.feed.post", "operation": "create", "record": rec}
                elif k < 0.84:
                    uri = recent_posts[int(rng.integers(len(recent_posts)))] if recent_posts else \
                        f"at://{tgt}/app.bsky.feed.post/{rkeys[i]}"
                    rec = {"$type": "app.bsky.feed.repost", "createdAt": "2026-04-20T12:00:00.000Z",
                           "subject": {"cid": "bafyreid" + revs[i] * 4, "uri": uri}}
                    ev = {"collection": "app.bsky.feed.repost", "operation": "create", "record": rec}
                elif k < 0.92:
                    rec = {"$type": "app.bsky.graph.follow", "createdAt": "2026-04-20T12:00:00.000Z",
                           "subject": tgt}
                    ev = {"collection": "app.bsky.graph.follow", "operation": "create", "record": rec}
                elif k < 0.96:
                    coll = ("app.bsky.feed.like", "app.bsky.graph.follow", "app.bsky.feed.post")[i % 3]
                    ev = {"collection": coll, "operation": "delete"}
                elif k < 0.97:
                    line = {"did": did, "time_us": tu, "kind": "identity",
                            "identity": {"did": did, "seq": i, "time": "2026-04-20T12:00:00.000Z"}}
                    out.append(json.dumps(line, separators=(",", ":")))
                    continue
                elif k < 0.98:
                    line = {"did": did, "time_us": tu, "kind": "account",
                            "account": {"active": True, "did": did, "seq": i, "time": "2026-04-20T12:00:00.000Z"}}
                    out.append(json.dumps(line, separators=(",", ":")))
                    continue
                elif k < 0.999:
                    ev = {"collection": "fm.teal.alpha.feed.play", "operation": "create",
                          "record": {"$type": "fm.teal.alpha.feed.play", "trackName": "song"}}
                else:
                    out.append('{"did":"did:plc:broken","time_us":17')
                    continue
                commit = {"rev": revs[i], "operation": ev["operation"], "collection": ev["collection"],
                          "rkey": rkeys[i]}
                if "record" in ev:
                    commit["record"] = ev["record"]
                    commit["cid"] = "bafyrei" + rkeys[i] * 4
                out.append(json.dumps({"did": did, "time_us": tu, "kind": "commit", "commit": commit},
                                      separators=(",", ":")))
            chunk = "\n".join(out) + "\n"
            fh.write(chunk)
            written += len(chunk.encode())
            lines += len(out)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=300.0, help="size of the generated JSONL in MB")
    ap.add_argument("--threads", type=int, default=2, help="DuckDB threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="write the file here (reused if it exists)")
    ap.add_argument("--skip-cli", action="store_true", help="skip the build-panel measurement")
    ap.add_argument("--repeat", type=int, default=1, help="measure the in-process ratio this many times")
    ap.add_argument("--floors", action="store_true",
                    help="also measure the design's floors (the fields read, into a table, the scan statement)")
    args = ap.parse_args()
    header(f"bench_ingest (DuckDB threads {args.threads})")

    import duckdb

    from aumann.data.bluesky.ingest import IngestOptions, ingest

    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "2026-04-20.jsonl"
        if not path.exists():
            t = time.perf_counter()
            n = generate(path, int(args.mb * 1e6), seed=args.seed)
            took = time.perf_counter() - t
            print(f"generated {n:,} lines, {path.stat().st_size / 1e6:.1f} MB in {took:.1f} s")
        size_mb = path.stat().st_size / 1e6
        with open(path, "rb") as fh:  # into the page cache first, so that neither side pays for the disk
            while fh.read(1 << 24):
                pass
        con = duckdb.connect()
        con.execute(f"SET threads = {args.threads}")
        grab = _StageLog()
        log = logging.getLogger("aumann.data.bluesky.ingest")
        log.addHandler(grab)
        log.setLevel(logging.DEBUG)
        ratios = []
        for run in range(max(1, args.repeat)):
            # Reference: DuckDB parsing the envelope of every line (no extraction, no tables).
            w, c = time.perf_counter(), time.process_time()
            con.execute(_REFERENCE, [str(path)]).fetchall()
            ref_wall, ref_cpu = time.perf_counter() - w, time.process_time() - c
            w, c = time.perf_counter(), time.process_time()
            counts, report = ingest([path], options=IngestOptions(threads=args.threads))
            wall, cpu = time.perf_counter() - w, time.process_time() - c
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            ratios.append(ref_wall / wall)
            if args.repeat > 1:
                print(f"run {run + 1}: reference {ref_wall:.2f} s ({ref_cpu:.2f} CPU-s), ingest {wall:.2f} s "
                      f"({cpu:.2f} CPU-s): ratio {ref_wall / wall:.2f} wall, {ref_cpu / cpu:.2f} CPU; load {load:.2f}")
        log.removeHandler(grab)
        print(f"machine: {os.cpu_count()} cores, load average {load:.1f} during the run, DuckDB threads={args.threads}")
        print(f"reference (DuckDB envelope scan): {size_mb / ref_wall:8.1f} MB/s wall, "
              f"{size_mb / ref_cpu:8.1f} MB per CPU-s")
        print(f"ingest:                           {size_mb / wall:8.1f} MB/s wall, "
              f"{size_mb / cpu:8.1f} MB per CPU-s  ({wall:.2f} s wall, {cpu:.2f} CPU-s; {counts.n_users:,} users, "
              f"{report.malformed_lines} malformed lines)")
        print(f"ingest on {args.threads} idle cores (CPU-bound estimate): {args.threads * size_mb / cpu:8.1f} MB/s")
        print(f"ratio ingest / reference (wall):  {ref_wall / wall:8.2f}  (target ≥ 0.3)"
              + (f"; median of {len(ratios)} runs {float(np.median(ratios)):.2f}" if len(ratios) > 1 else ""))
        print(f"target >= 300 MB/s wall: {'met' if size_mb / wall >= 300 else 'NOT met'}")
        if grab.stages:
            print(f"where the ingest's time goes (last run; × = multiples of the reference's {ref_wall:.2f} s wall):")
            for name, (sw, sc) in grab.stages.items():
                print(f"  {name:40s} {sw:6.2f} s wall {sc:6.2f} CPU-s  {sw / ref_wall:5.2f}×")
            rest = wall - sum(v[0] for v in grab.stages.values())
            print(f"  {'outside the stages (Python)':40s} {rest:6.2f} s wall {'':13s}  {rest / ref_wall:5.2f}×")
        if args.floors:
            floors(path, args.threads, max(3, args.repeat))
        if not args.skip_cli:
            build_panel(path, Path(tmp) / "panel", con, args.threads)
    header("bench_ingest done")


_REFERENCE = ("SELECT count(*), count(did), max(kind), max(commit.collection) FROM read_json(?, columns={'did': "
              "'VARCHAR', 'kind': 'VARCHAR', 'commit': 'STRUCT(collection VARCHAR)'}, format='newline_delimited', "
              "ignore_errors=true)")


def floors(path: Path, threads: int, repeat: int) -> None:
    """The floors of the ingest's design, each against the envelope scan measured just before it (fresh
    connections, ``threads`` threads, the median of ``repeat`` alternating runs): reading the fields the ingester
    reads, the same into a table, its scan statement (the per-line table every later statement reads), the same scan
    with every column computed and none stored (the floor of a one-pass design); and
    the floor of a hand-written reader instead of DuckDB's: a compiled JSON validator that only locates the same
    fields (:mod:`_json_locator`)."""
    import re

    import duckdb

    from aumann.data.bluesky import ingest_sql as sql

    src = (f"read_json(?, columns={sql.COLUMNS}, format='newline_delimited', ignore_errors=true, "
           "maximum_object_size=16777216, compression='none')")
    fields = re.findall(r"'(\w+)': '", sql.COLUMNS)  # every top-level field, so none is pruned from the read
    steps = {
        "read the ingester's fields (no derived column, no table)":
            (f"SELECT {', '.join(f'count({f})' for f in fields)} FROM {src}", [str(path)]),
        "the same fields into a table": (f"CREATE OR REPLACE TEMP TABLE raw AS SELECT * FROM {src}", [str(path)]),
        "the ingester's scan (fields + derived columns -> per-line table)": (sql.SCAN, [str(path), "none"]),
    }
    # The same scan with every derived column computed and none stored: the floor of a one-pass design (every
    # count, link and candidate taken from the scan as it streams, no per-line table, no later statement).
    body = sql.SCAN.split(" AS\n", 1)[1]
    probe = duckdb.connect()
    cols = [d[0] for d in probe.execute(f"SELECT * FROM ({body}) LIMIT 0", [str(path), "none"]).description]
    probe.close()
    steps["the ingester's scan, every column computed, none stored (one-pass floor)"] = (
        f"SELECT {', '.join(f'count({c})' for c in cols)} FROM ({body})", [str(path), "none"])
    found: dict[str, int] = {}

    def locate() -> float:  # in a fresh process (its own allocator and threads), timed there after a warm-up
        proc = subprocess.run([sys.executable, str(Path(__file__).with_name("_json_locator.py")), str(path),
                               str(threads)], capture_output=True, text=True, check=True)
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        found.update(lines=got["lines"], valid=got["valid"])
        return float(got["seconds"])

    # a hand-written reader's floor: compiled validation + field spans, no strings built
    steps["a compiled JSON validator locating the same fields (no strings; _json_locator.py)"] = (locate, [])
    ratios: dict[str, list[float]] = {k: [] for k in steps}
    seconds: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(repeat):
        for name, (stmt, params) in steps.items():
            con = duckdb.connect()
            con.execute(f"SET threads = {threads}")
            con.execute("SET preserve_insertion_order = false")
            w = time.perf_counter()
            con.execute(_REFERENCE, [str(path)]).fetchall()
            ref = time.perf_counter() - w
            if callable(stmt):  # not DuckDB: the seconds it measured itself
                took = stmt()
            else:
                w = time.perf_counter()
                con.execute(stmt, params).fetchall()
                took = time.perf_counter() - w
            con.close()
            ratios[name].append(ref / took)
            seconds[name].append(took)
    print(f"floors of the design (median of {repeat} runs, each against the envelope scan just before it; "
          f"load {os.getloadavg()[0]:.2f}):")
    for name in steps:
        took, ratio = float(np.median(seconds[name])), float(np.median(ratios[name]))
        print(f"  {name:74s} {took:6.3f} s  reference / it {ratio:.2f}")
    print(f"  (the validator found {found['valid']:,} of {found['lines']:,} non-blank lines to be JSON objects)")
    print("  (the scan's ratio is the best the ingest could reach if everything after its scan took no time; the "
          "one-pass floor's, the best any design on DuckDB's reader with these columns could reach; the "
          "validator's, the most a hand-written reader could reach before building a single string)")


def build_panel(path: Path, out: Path, con, threads: int) -> None:
    """``aumann bluesky build-panel`` end to end (start-up subtracted) vs a DuckDB scan with distinct DIDs."""
    cli = [sys.executable, "-m", "aumann.cli"]
    w = time.perf_counter()
    con.execute("SELECT kind, count(*), count(DISTINCT did) FROM read_json(?, columns={'did': 'VARCHAR', "
                "'time_us': 'BIGINT', 'kind': 'VARCHAR'}, format='newline_delimited', ignore_errors=true) "
                "GROUP BY kind", [str(path)]).fetchall()
    ref = time.perf_counter() - w
    startup = min(_timed_run([*cli, "bluesky", "build-panel", "--help"]) for _ in range(2))
    bare = min(_timed_run([sys.executable, "-c", "pass"]) for _ in range(2))
    total = _timed_run([*cli, "bluesky", "build-panel", str(path), "--out", str(out), "--threads", str(threads),
                        "--quiet"])
    ours, net_bare = max(total - startup, 1e-9), max(total - bare, 1e-9)
    print(f"build-panel: {total:.2f} s, start-up {startup:.2f} s → {ours:.2f} s; DuckDB (did, time_us, kind) scan "
          f"with distinct DIDs per kind: {ref:.2f} s; ratio {ref / ours:.2f} (target ≥ 0.2)  "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"  less only the bare interpreter ({bare:.2f} s): {net_bare:.2f} s, ratio {ref / net_bare:.2f}")


class _StageLog(logging.Handler):
    """Keeps the stage seconds of the last ingest (logged by the ingester at DEBUG)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.stages: dict[str, list[float]] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.stages = getattr(record, "stages", None) or self.stages


def _timed_run(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t

if __name__ == "__main__":
    main()
