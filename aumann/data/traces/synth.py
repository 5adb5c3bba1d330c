"""SYNTHETIC event logs in the simulators' schemas, of any size (benchmarks and tests; not real runs).

* :func:`write_oasis` — an SQLite database with OASIS's ``user``, ``post``, ``follow`` and ``trace`` tables
  (the DDL of camel-ai/oasis ``oasis/social_platform/schema/*.sql`` at 46cdc8d, Apache-2.0), integer
  time steps in ``trace.created_at`` as OASIS's Twitter clock writes them;
* :func:`write_otel` — AgentSociety 2 style spans sharded over ``trace_<trace_id[:2]>.jsonl``;
* :func:`write_otlp` — the same spans in the OpenTelemetry protocol's JSON encoding (one ``resourceSpans``
  envelope per trace and line, attributes as ``{"key", "value"}`` lists), as the Collector's file exporter writes;
* :func:`write_concordia` — a Concordia structured log of entity actions (texts by reference);
* :func:`write_table` — the same events as a long CSV or Parquet table (``agent, step, action``).

Events are drawn with heavy-tailed agent activity from ``seed`` (same arguments → same bytes).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np

OASIS_DDL = """
CREATE TABLE user (user_id INTEGER PRIMARY KEY AUTOINCREMENT, agent_id INTEGER, user_name TEXT, name TEXT, bio TEXT,
    created_at DATETIME, num_followings INTEGER DEFAULT 0, num_followers INTEGER DEFAULT 0);
CREATE TABLE post (post_id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER, original_post_id INTEGER,
    content TEXT DEFAULT '', quote_content TEXT, created_at DATETIME, num_likes INTEGER DEFAULT 0,
    num_dislikes INTEGER DEFAULT 0, num_shares INTEGER DEFAULT 0, num_reports INTEGER DEFAULT 0,
    FOREIGN KEY(user_id) REFERENCES user(user_id), FOREIGN KEY(original_post_id) REFERENCES post(post_id));
CREATE TABLE follow (follow_id INTEGER PRIMARY KEY AUTOINCREMENT, follower_id INTEGER, followee_id INTEGER,
    created_at DATETIME, FOREIGN KEY(follower_id) REFERENCES user(user_id),
    FOREIGN KEY(followee_id) REFERENCES user(user_id));
CREATE TABLE trace (user_id INTEGER, created_at DATETIME, action TEXT, info TEXT,
    PRIMARY KEY(user_id, created_at, action, info), FOREIGN KEY(user_id) REFERENCES user(user_id));
"""

ACTIONS = ("create_post", "like_post", "repost", "quote_post", "follow", "refresh", "do_nothing")
_P = np.array([0.2, 0.35, 0.1, 0.05, 0.05, 0.15, 0.1])


def events(n: int, agents: int, steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(agent, step, action code) of n events, steps non-decreasing (a log is written in time order)."""
    rng = np.random.default_rng(seed)
    w = rng.pareto(1.5, agents) + 1.0
    a = rng.choice(agents, size=n, p=w / w.sum())
    s = np.sort(rng.integers(0, steps, size=n))
    act = rng.choice(len(ACTIONS), size=n, p=_P)
    return a, s, act


def write_oasis(path: str | Path, n: int, agents: int, steps: int, seed: int = 0, chunk: int = 200_000) -> Path:
    """An OASIS-schema database with ``n`` trace rows (plus one sign_up per agent at step 0)."""
    p = Path(path)
    p.unlink(missing_ok=True)
    con = sqlite3.connect(p)
    con.executescript(OASIS_DDL)
    con.executemany("INSERT INTO user (user_id, agent_id, user_name, name, bio, created_at) VALUES (?, ?, ?, ?, ?, 0)",
                    ((i, i, f"user{i}", f"User {i}", "") for i in range(agents)))
    con.executemany("INSERT INTO trace VALUES (?, 0, 'sign_up', ?)",
                    ((i, json.dumps({"name": f"User {i}", "user_name": f"user{i}", "bio": ""})) for i in range(agents)))
    a, s, act = events(n, agents, steps, seed)
    names = np.array(ACTIONS, dtype=object)
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        rows = zip(a[lo:hi].tolist(), s[lo:hi].tolist(), names[act[lo:hi]].tolist(),
                   (f'{{"post_id": {k}}}' for k in range(lo, hi)))
        con.executemany("INSERT INTO trace VALUES (?, ?, ?, ?)", rows)
    rng = np.random.default_rng(seed + 1)
    m = min(10 * agents, 5_000_000)
    con.executemany("INSERT INTO follow (follower_id, followee_id, created_at) VALUES (?, ?, ?)",
                    zip(rng.integers(0, agents, m).tolist(), rng.integers(0, max(1, agents // 100), m).tolist(),
                        rng.integers(0, steps, m).tolist()))
    con.commit()
    con.close()
    return p


def write_otel(folder: str | Path, n: int, agents: int, steps: int, seed: int = 0, spans_per_trace: int = 5) -> Path:
    """AgentSociety 2 style span shards: per (agent, step) one trace of ``spans_per_trace`` spans, the last one
    the ``agent.step`` span carrying ``agent.tick`` (the children carry none, as in AgentSociety 2)."""
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    for f in d.glob("trace_*.jsonl"):
        f.unlink()
    a, s, act = events(max(1, n // spans_per_trace), agents, steps, seed)
    rng = np.random.default_rng(seed + 2)
    tids = rng.integers(0, 2**63, size=(a.size, 2))
    files: dict[str, list[str]] = {}
    names = ("llm.completion", "react.tool", "react.turn", "react.loop")
    for j in range(a.size):
        tid = f"{tids[j, 0]:016x}{tids[j, 1]:016x}"
        head = ('{"resource": {"service.name": "agentsociety2.person_agent", "agent.id": %d}, "scope": {"name": '
                '"agentsociety2.agent.runtime", "version": "1"}, "trace_id": "%s", "span_id": "%016x", '
                '"parent_span_id": null, "name": "%s", "kind": "internal", "start_time_unix_nano": %d, '
                '"end_time_unix_nano": %d, "status": {"code": "ok", "message": ""}, "attributes": %s, "events": []}')
        lines = files.setdefault(tid[:2], [])
        t0 = 1_740_000_000_000_000_000 + int(s[j]) * 3_600_000_000_000
        for k in range(spans_per_trace - 1):
            lines.append(head % (a[j], tid, k, names[(k + int(act[j])) % 4], t0 + k, t0 + k + 1,
                                 '{"operation.type": "react"}'))
        lines.append(head % (a[j], tid, 99, "agent.step", t0, t0 + 10,
                             f'{{"agent.tick": {int(s[j])}, "operation.type": "agent"}}'))
        if len(lines) > 50_000:
            with open(d / f"trace_{tid[:2]}.jsonl", "a") as fh:
                fh.write("\n".join(lines) + "\n")
            lines.clear()
    for key, lines in files.items():
        if lines:
            with open(d / f"trace_{key}.jsonl", "a") as fh:
                fh.write("\n".join(lines) + "\n")
    return d


def write_otlp(path: str | Path, n: int, agents: int, steps: int, seed: int = 0, spans_per_trace: int = 5) -> Path:
    """The spans of :func:`write_otel` (the same events, ids and attributes) as OTLP/JSON lines in one file: per
    (agent, step) one line ``{"resourceSpans": [{"resource": {"attributes": [...]}, "scopeSpans": [{"scope",
    "spans": [...]}]}]}`` holding that trace's ``spans_per_trace`` spans, ids in hex, times as decimal strings."""
    p = Path(path)
    a, s, act = events(max(1, n // spans_per_trace), agents, steps, seed)
    rng = np.random.default_rng(seed + 2)
    tids = rng.integers(0, 2**63, size=(a.size, 2))
    names = ("llm.completion", "react.tool", "react.turn", "react.loop")
    span = ('{"traceId": "%s", "spanId": "%016x", "parentSpanId": "", "name": "%s", "kind": 1, "startTimeUnixNano": '
            '"%d", "endTimeUnixNano": "%d", "attributes": [%s], "status": {"code": 1}}')
    op = '{"key": "operation.type", "value": {"stringValue": "%s"}}'
    with open(p, "w") as fh:
        for j in range(a.size):
            tid = f"{tids[j, 0]:016x}{tids[j, 1]:016x}"
            t0 = 1_740_000_000_000_000_000 + int(s[j]) * 3_600_000_000_000
            spans = [span % (tid, k, names[(k + int(act[j])) % 4], t0 + k, t0 + k + 1, op % "react")
                     for k in range(spans_per_trace - 1)]
            spans.append(span % (tid, 99, "agent.step", t0, t0 + 10, '{"key": "agent.tick", "value": {"intValue": '
                                 f'"{int(s[j])}"}}}}, ' + op % "agent"))
            fh.write('{"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": '
                     '{"stringValue": "agentsociety2.person_agent"}}, {"key": "agent.id", "value": {"intValue": '
                     f'"{int(a[j])}"}}}}]}}, "scopeSpans": [{{"scope": {{"name": "agentsociety2.agent.runtime", '
                     f'"version": "1"}}, "spans": [{", ".join(spans)}]}}]}}]}}\n')
    return p


def write_concordia(path: str | Path, n: int, agents: int, steps: int, seed: int = 0, chunk: int = 100_000,
                    jsonl: str | Path | None = None) -> Path:
    """A Concordia structured log (``SimulationLog.to_json`` layout) with ``n`` entity_action entries; the
    action texts (one per action type, ≥ 50 characters) live in ``content_store`` as Concordia stores them.
    ``jsonl``: also write the entries as JSON lines (for a DuckDB reference on the same data)."""
    import hashlib

    p = Path(path)
    a, s, act = events(n, agents, steps, seed)
    texts = [f"The villager decides to {name.replace('_', ' ')} after thinking it over carefully this round."
             for name in ACTIONS]
    ids = [hashlib.sha256(t.encode()).hexdigest()[:16] for t in texts]
    side = open(jsonl, "w") if jsonl is not None else None
    with open(p, "w") as fh:
        fh.write('{"content_store": ' + json.dumps(dict(zip(ids, texts))) + ', "entries": [')
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            rows = []
            for j in range(lo, hi):
                k = int(act[j])
                rows.append(f'{{"step": {int(s[j])}, "timestamp": "", "entity_name": "agent{int(a[j])}", '
                            f'"component_name": "entity_action", "entry_type": "entity", "summary": "", '
                            f'"deduplicated_data": {{"key": "Entity [agent{int(a[j])}]", "value": {{"__act__": '
                            f'{{"Value": {{"_ref": "{ids[k]}"}}}}}}}}}}')
                if side is not None:
                    side.write(f'{{"step": {int(s[j])}, "entity_name": "agent{int(a[j])}", "action": "{ids[k]}"}}\n')
            fh.write(("," if lo else "") + ",".join(rows))
        fh.write('], "entity_memories": {}, "game_master_memories": []}')
    if side is not None:
        side.close()
    return p


def write_table(path: str | Path, n: int, agents: int, steps: int, seed: int = 0) -> Path:
    """The events as a long table (CSV or Parquet by the suffix): ``agent, step, action``."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    p = Path(path)
    a, s, act = events(n, agents, steps, seed)
    tab = pa.table({"agent": a, "step": s, "action": pa.array(np.array(ACTIONS, dtype=object)[act])})
    if p.suffix == ".parquet":
        pq.write_table(tab, p)
    else:
        pacsv.write_csv(tab, p)
    return p


__all__ = ["ACTIONS", "OASIS_DDL", "events", "write_concordia", "write_oasis", "write_otel", "write_otlp",
           "write_table"]
