"""Regenerate the sample traces in this folder with the simulators' OWN writer code (a dev tool; not run by tests).

Each sample is written by the code the simulator itself uses to write its log, imported from a checkout
(only the modules named below are needed; nothing calls an LLM):

* OASIS (camel-ai/oasis @ 46cdc8d31496b93706ce3d95d7eddc637c0678e2): ``oasis.social_platform.platform.Platform``
  — its ``sign_up``, ``create_post``, ``like_post``, ``repost``, ``quote_post``, ``follow``, ``unfollow``,
  ``refresh`` and ``do_nothing`` write ``trace`` (via ``PlatformUtils._record_trace``), ``post``, ``follow``
  and ``user`` exactly as in a run; the step clock is advanced as ``OasisEnv.step`` does. The recsys module
  is replaced by a stub (the recommendation table is not needed for traces).
  ``OASIS_SRC=/path/with/oasis/package``.
* AgentSociety 2 (package agentsociety2 2.9.2 from PyPI): ``agentsociety2.trace.JsonlTraceWriter`` over a
  ``ShardedAppendSink`` (the run's ``trace/`` folder) and ``agentsociety2.storage.replay_sink.ReplaySink``
  (the run's ``replay/`` folder, table ``social_media_agent_state`` as ``SocialMediaSpace`` declares it).
  The spans follow ``PersonAgent.step`` / ``AgentBase`` (agent.init, agent.step with ``agent.tick``,
  react.loop / react.turn / llm.completion / react.tool inside the step's trace, an env-router
  llm.completion). ``AS2_SRC=/path/with/agentsociety2/package``.
* Concordia (google-deepmind/concordia @ 513c3d622d19cf99f1c2f63991b648ffd3d5fcb5):
  ``concordia.utils.structured_logging.SimulationLog.from_raw_log(raw_log).to_json()`` on a raw log shaped
  as ``SimultaneousEngine._log`` writes it (entity logs with ``__act__`` = ``{'Summary', 'Value',
  'Prompt'}`` as ``ConcatActComponent._log`` publishes). ``CONCORDIA_SRC=/path/with/concordia/package``.

The OpenTelemetry OTLP/JSON sample and the generic CSV are written here directly (their formats are
specifications, not a simulator's code). Every random choice comes from ``random.Random(7)``.

Usage: ``OASIS_SRC=... AS2_SRC=... CONCORDIA_SRC=... python tests/data/traces/make_samples.py``
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent


def oasis(db: Path, *, reddit: bool = False) -> None:
    sys.path.insert(0, os.environ["OASIS_SRC"])
    cwd = os.getcwd()
    os.chdir(os.environ["OASIS_SRC"])  # Platform writes ./log/
    try:
        from oasis.clock.clock import Clock
        from oasis.social_platform.platform import Platform

        db.unlink(missing_ok=True)
        rng = random.Random(7)
        start = datetime(2025, 3, 1, 9, 0, 0)
        clock = Clock(60)
        pf = Platform(str(db), sandbox_clock=clock, start_time=start, recsys_type="reddit" if reddit else "twitter")
        if reddit:  # the Reddit clock is wall time × k: pin it to one simulated hour per step, a few s apart
            tick = {"n": 0}

            def time_transfer(now, start_time, _t=tick):
                _t["n"] += 1
                return start_time + timedelta(hours=clock.time_step, seconds=_t["n"])

            clock.time_transfer = time_transfer

        async def run() -> None:
            n_agents, late = 12, {10: 2, 11: 3}
            posts: list[int] = []
            for a in range(n_agents):
                if a not in late:
                    await pf.sign_up(a, (f"user{a}", f"User {a}", f"bio of agent {a}"))
            for step in range(6):
                for a, at in late.items():
                    if at == step:
                        await pf.sign_up(a, (f"user{a}", f"User {a}", f"bio of agent {a}"))
                active = [a for a in range(n_agents) if a not in late or late[a] <= step]
                for a in active:
                    if a == 0 or (a == 1 and step >= 3):  # agent 0 broadcasts; agent 1 joins in later
                        r = await pf.create_post(a, f"post by {a} at step {step}")
                        posts.append(r["post_id"])
                        continue
                    roll = rng.random()
                    if roll < 0.15 or not posts:
                        r = await pf.create_post(a, f"post by {a} at step {step}")
                        posts.append(r["post_id"])
                    elif roll < 0.45:
                        await pf.like_post(a, rng.choice(posts[-5:]))
                    elif roll < 0.6:
                        r = await pf.repost(a, rng.choice(posts[-5:]))
                    elif roll < 0.68:
                        await pf.quote_post(a, (rng.choice(posts[-5:]), f"quote by {a}"))
                    elif roll < 0.8:
                        await pf.follow(a, rng.choice([0, 0, 1, 2]))
                    elif roll < 0.85:
                        await pf.unfollow(a, 0)
                    elif roll < 0.93:
                        await pf.refresh(a)
                    else:
                        await pf.do_nothing(a)
                clock.time_step += 1  # what OasisEnv.step does after every step
        asyncio.run(run())
        pf.db.commit()
        pf.db.close()
    finally:
        os.chdir(cwd)


def agentsociety2(run: Path) -> None:
    sys.path.insert(0, os.environ["AS2_SRC"])
    from agentsociety2.storage.replay_sink import ReplaySink
    from agentsociety2.storage.table_schema import ColumnDef, TableSchema
    from agentsociety2.trace import JsonlTraceWriter, ShardedAppendSink

    shutil.rmtree(run, ignore_errors=True)
    rng = random.Random(7)
    sink = ShardedAppendSink(run / "trace")
    n_agents, ticks = 8, 5
    writers = {a: JsonlTraceWriter(agent_id=a, sharded_writer=sink) for a in range(1, n_agents + 1)}
    for a, w in writers.items():
        with w.trace_span("agent.init", attributes={"operation.type": "agent", "event.type": "agent_init",
                                                    "agent.id": a}):
            pass
    replay = ReplaySink(run / "replay")
    cols = [ColumnDef("agent_id", "INTEGER", nullable=False), ColumnDef("step", "INTEGER", nullable=False),
            ColumnDef("t", "TIMESTAMP", nullable=False), ColumnDef("followers_count", "INTEGER"),
            ColumnDef("following_count", "INTEGER"), ColumnDef("posts_count", "INTEGER")]
    asyncio.run(replay.register_table(TableSchema(name="social_media_agent_state", columns=cols,
                                                  primary_key=["agent_id", "step"], indexes=[["step"], ["t"]])))
    followers = dict.fromkeys(writers, 0)
    posts = dict.fromkeys(writers, 0)
    t0 = datetime(2025, 3, 1, 8, 0, 0)
    for tick in range(ticks):
        for a, w in writers.items():
            if a == 8 and tick < 2:  # agent 8 joins at tick 2
                continue
            with w.trace_span("agent.step", attributes={"agent.tick": tick, "operation.type": "agent",
                                                        "event.type": "step",
                                                        "input.summary": {"time": (t0 + timedelta(hours=tick))
                                                                          .isoformat(), "tick": tick}}):
                with w.trace_span("react.tool", attributes={"operation.type": "react", "react.action": "observe"}):
                    pass
                turns = 3 if a == 1 else 1 + rng.randrange(2)
                with w.trace_span("react.loop", attributes={"agent.tick": tick, "operation.type": "react",
                                                            "react.max_turns": 8, "react.readonly": False,
                                                            "input.message_chars": 400}):
                    for turn in range(turns):
                        with w.trace_span("react.turn", attributes={"agent.tick": tick, "operation.type": "react",
                                                                    "react.turn": turn}):
                            with w.trace_span("llm.completion", attributes={"operation.type": "llm",
                                                                            "llm.model": "qwen2.5-7b",
                                                                            "input.message_count": 4 + turn}):
                                pass
                            action = "post" if (a == 1 or rng.random() < 0.3) else "like"
                            with w.trace_span("react.tool", attributes={"operation.type": "react",
                                                                        "react.action": action}):
                                pass
                            if action == "post":
                                posts[a] += 1
                                for b in writers:
                                    if b != a and rng.random() < (0.5 if a == 1 else 0.1):
                                        followers[a] += 1
                span = w.current_span  # the env router's LLM call in this trace (router_base._llm_completion_span)
                now = time.time_ns()
                sink.append_record({
                    "resource": {"service.name": "agentsociety2.env_router", "agent.id": a},
                    "scope": {"name": "agentsociety2.env.codegen", "version": "1"},
                    "trace_id": span.trace_id, "span_id": uuid.uuid4().hex[:16], "parent_span_id": span.span_id,
                    "name": "llm.completion", "kind": "internal", "start_time_unix_nano": now,
                    "end_time_unix_nano": time.time_ns(), "status": {"code": "ok", "message": ""},
                    "attributes": {"operation.type": "llm", "llm.model": "qwen2.5-7b", "llm.source": "env_router",
                                   "input.message_count": 3},
                    "events": []})
        for a in writers:
            if a == 8 and tick < 2:
                continue
            asyncio.run(replay.write("social_media_agent_state", {
                "agent_id": a, "step": tick, "t": t0 + timedelta(hours=tick), "followers_count": followers[a],
                "following_count": rng.randrange(4), "posts_count": posts[a]}))
    sink.close()
    # locks are an implementation detail of the sink; the replay reader ignores them
    for lock in (run / "replay").glob(".*.lock"):
        lock.unlink()


def otlp(path: Path) -> None:
    """OTLP/JSON lines (as the OpenTelemetry Collector's file exporter writes them): 3 agents × 3 steps."""
    rng = random.Random(7)
    lines = []
    base = 1_740_816_000_000_000_000
    for step in range(3):
        for agent in ("alice", "bob", "carol"):
            trace_id = f"{rng.getrandbits(128):032x}"
            spans = []
            n_calls = 3 if agent == "alice" else 1
            for k in range(n_calls):
                start = base + (step * 60 + k) * 1_000_000_000
                spans.append({"traceId": trace_id, "spanId": f"{rng.getrandbits(64):016x}", "parentSpanId": "",
                              "name": "gen_ai.chat", "kind": 1, "startTimeUnixNano": str(start),
                              "endTimeUnixNano": str(start + 250_000_000),
                              "attributes": [{"key": "sim.step", "value": {"intValue": str(step)}},
                                             {"key": "gen_ai.usage.output_tokens",
                                              "value": {"intValue": str(40 + 10 * k)}}],
                              "status": {}})
            lines.append({"resourceSpans": [{"resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "my-sim"}},
                {"key": "agent.name", "value": {"stringValue": agent}}]},
                "scopeSpans": [{"scope": {"name": "my-sim.agents", "version": "1"}, "spans": spans}]}]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def concordia(path: Path) -> None:
    sys.path.insert(0, os.environ["CONCORDIA_SRC"])
    from concordia.utils import structured_logging

    rng = random.Random(7)
    names = ["Alice", "Bob", "Charlie", "Dorothy"]
    raw_log = []
    for step in range(1, 6):
        entry = {"Step": step, "default rules": {"resolve": {"__resolution__": {
            "Key": "Event", "Value": f"The pot is shared at round {step}.", "Summary": "resolution"}}},
            "Summary": f"Step {step} default rules"}
        for name in names:
            if name == "Alice" or (name == "Bob" and step >= 3):
                act = f"{name} contributes all 10 coins to the common pot, hoping the others follow suit."
            elif rng.random() < 0.5:
                act = f"{name} keeps the coins and contributes nothing to the common pot this round."
            else:
                act = f"{name} contributes 3 coins to the common pot."
            prompt = [f"Instructions: you are {name}, a villager.", "", "Round {step}: how many coins do you give?"]
            entry[f"Entity [{name}]"] = {"__act__": {"Summary": f"Action: {act}", "Value": act, "Prompt": prompt},
                                          "__observation__": {"Key": "Observation", "Value": [
                                              f"[observation] round {step} begins"]}}
        raw_log.append(entry)
    log = structured_logging.SimulationLog.from_raw_log(raw_log)
    log.attach_memories(entity_memories={n: [f"{n} lives in the village."] for n in names},
                        game_master_memories=["The village shares a common pot."])
    path.write_text(log.to_json())


def table(path: Path) -> None:
    rng = random.Random(7)
    rows = ["agent,tick,action,amount"]
    for tick in range(4):
        for agent in ("a1", "a2", "a3", "a4", "a5"):
            for _ in range(3 if agent == "a1" else rng.randrange(1, 3)):
                action = rng.choice(["buy", "sell"]) if agent != "a1" else "buy"
                rows.append(f"{agent},{tick},{action},{rng.randrange(1, 20) * (5 if agent == 'a1' else 1)}")
    path.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    if "OASIS_SRC" in os.environ:
        oasis(HERE / "oasis_twitter.db")
        oasis(HERE / "oasis_reddit.db", reddit=True)
    if "AS2_SRC" in os.environ:
        agentsociety2(HERE / "agentsociety2_run")
    if "CONCORDIA_SRC" in os.environ:
        concordia(HERE / "concordia_log.json")
    otlp(HERE / "otlp_spans.jsonl")
    table(HERE / "events.csv")
