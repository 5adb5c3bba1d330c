"""The LLM backend's layers and registry, one behaviour each, on fakes (fault injection only)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from aumann.errors import LLMRequestError, UnknownBackendError
from aumann.simulators.llm import LLMBackend, OpenAIBackend, ResponseCache, Usage, backend_names, make_backend
from aumann.simulators.llm.calls import Answer
from aumann.simulators.llm.layers import Coalesce, RateLimit, Retry, Throttle, compose
from tests.llm_loopback import LoopbackLLM

ROOT = Path(__file__).resolve().parents[2]


class Vote(BaseModel):
    yes: bool


MSGS = [{"role": "user", "content": "Vote?"}]


class SerialServer:
    """A core that answers one call at a time (like llama.cpp's server): queued calls wait their turn."""

    def __init__(self, service: float = 0.01) -> None:
        self.service = service
        self.lock = threading.Lock()
        self.calls = 0

    def handle(self, call):
        t0 = time.perf_counter()
        with self.lock:
            time.sleep(self.service)
            self.calls += 1
        return Answer('{"yes": true}', 5, 2, latency=time.perf_counter() - t0)


def _backend(core, *, concurrency=16, usage=None):
    usage = usage or Usage()
    stack = compose(core, lambda i: Throttle(i, concurrency), lambda i: Retry(i, usage), Coalesce)
    return LLMBackend(stack, name="fake", model="m", usage=usage, concurrency=concurrency)


def test_the_in_flight_window_shrinks_for_a_server_that_answers_one_at_a_time():
    core = SerialServer(0.01)
    b = _backend(core, concurrency=16)
    out = b.decide_many([{"messages": MSGS, "schema": Vote, "seed": s} for s in range(64)])
    assert all(v.yes for v in out) and core.calls == 64
    assert b.stack.find(Throttle).window < 16  # queueing seen: fewer requests in flight


def test_a_timeout_halves_the_window_and_the_retry_waits_longer():
    seen = []

    class SlowOnce:
        def handle(self, call):
            from aumann.errors import Retryable

            seen.append(call.timeout_scale)
            if len(seen) == 1:
                raise Retryable("timeout", "timed out after 1s")
            return Answer('{"yes": true}')

    b = _backend(SlowOnce(), concurrency=8)
    b.stack.find(Retry).sleep = lambda s: None
    assert b.decide(MSGS, Vote).yes and seen == [1.0, 2.0]
    assert b.stack.find(Throttle).window == 4


def test_a_request_too_long_for_the_context_is_an_abstention_not_a_crash():
    class Short:
        def handle(self, call):
            raise LLMRequestError("request rejected (HTTP 400): This model's maximum context length is 2048 tokens")

    b = _backend(Short())
    out = b.decide_many([{"messages": MSGS, "schema": Vote, "seed": 1}], return_exceptions=True)
    assert "too long" in str(out[0]) and b.usage.invalid_decisions == 1
    with pytest.raises(LLMRequestError, match="bad parameter"):  # any other 400 still stops the run

        class Bad:
            def handle(self, call):
                raise LLMRequestError("request rejected (HTTP 400): bad parameter")

        _backend(Bad()).decide(MSGS, Vote)


def test_a_tpm_below_one_request_is_refused_at_once():
    rl = RateLimit(SerialServer(), rpm=None, tpm=10, tokens_of=lambda c: 500)
    b = _backend(rl)
    t0 = time.perf_counter()
    with pytest.raises(LLMRequestError, match=r"more than tpm=10"):
        b.decide(MSGS, Vote)
    assert time.perf_counter() - t0 < 5


def test_the_registry_lists_and_builds_backends_by_name():
    assert {"offline", "openai", "local"} <= set(backend_names())
    assert make_backend("offline") is None
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'nope'; registered: offline, openai, local"):
        make_backend("nope")
    from aumann.cli import build_parser

    run = build_parser()._subparsers._group_actions[0].choices["run"]
    backend = next(a for a in run._actions if a.dest == "backend")
    assert set(backend.choices) == set(backend_names())


def test_schema_echoes_and_empty_objects_are_never_decisions():
    from aumann.scenarios.social_llm.prompts import PostDecision

    echo = json.dumps({"description": "Whether to post", "properties": {"post": {"type": "boolean"}},
                       "title": "PostDecision", "type": "object"})
    with LoopbackLLM(lambda body: echo) as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, max_retries=0)
        out = b.decide_many([{"messages": MSGS, "schema": PostDecision, "seed": 1}], return_exceptions=True)
    assert "repeats the JSON schema" in str(out[0]) and b.usage.invalid_decisions == 1
    with LoopbackLLM(lambda body: "{}") as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, max_retries=0)
        out = b.decide_many([{"messages": MSGS, "schema": PostDecision, "seed": 1}], return_exceptions=True)
    assert "post: Field required" in str(out[0])


def test_llm_show_prints_valid_and_invalid_replies(tmp_path, capsys):
    from aumann.cli import main

    cache = ResponseCache(tmp_path / "llm-cache.sqlite")
    with LoopbackLLM(lambda body: '{"yes": true}' if body["seed"] == 1 else "no idea") as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, cache=cache, max_retries=0)
        b.decide_many([{"messages": MSGS, "schema": Vote, "seed": s} for s in (1, 2)], return_exceptions=True)
        b.close()
    capsys.readouterr()
    assert main(["llm", "show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "INVALID" in out and "user: Vote?" in out and "→ reply: no idea" in out
    assert main(["llm", "show", str(tmp_path), "--invalid", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 1 and rows[0]["reply"] == "no idea" and "not JSON" in rows[0]["invalid"]
    assert main(["llm", "show", str(tmp_path / "missing")]) == 2


def test_llm_show_and_replay_never_write_into_an_empty_file(tmp_path, capsys):
    from aumann.cli import main

    empty = tmp_path / "notes.txt"
    empty.touch()  # before: `llm show` created the cache's table in it (12 KiB, an SQLite database)
    assert main(["llm", "show", str(tmp_path), "--cache", str(empty)]) == 0
    assert "0 request(s) shown" in capsys.readouterr().err
    cache = ResponseCache(empty, mode="replay")
    assert cache.get(cache.key(model="m")) is None and len(cache) == 0
    cache.close()
    assert empty.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_llm_show_names_what_is_damaged_in_a_row(tmp_path, capsys):
    import sqlite3

    from aumann.cli import main

    cache = ResponseCache(tmp_path / "llm-cache.sqlite")
    cache.put("k", "{}", backend="openai", model="m", request={"messages": []}, prompt_tokens=3)
    cache.close()
    with sqlite3.connect(tmp_path / "llm-cache.sqlite") as con:
        con.execute("UPDATE responses SET prompt_tokens = -5, completion_tokens = 'many'")
    capsys.readouterr()
    assert main(["llm", "show", str(tmp_path), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    # before: "1 validation error for CacheRow" (pydantic's first line), naming neither field nor problem
    assert row["damaged"].startswith("prompt_tokens: Input should be greater than or equal to 0")
    assert "completion_tokens: Input should be a valid integer" in row["damaged"]


def test_progress_lines_appear_when_stderr_is_not_a_terminal():
    import io

    from aumann.cli.llm_usage import ProgressLines

    buf = io.StringIO()
    with ProgressLines("social-llm: 1 run(s)", None, interval=0.05, stream=buf) as lines:
        lines.update("run 1/1: simulate", 1, 7)
        until = time.monotonic() + 60  # a line every 0.05 s: waited for, not a fixed 0.3 s a loaded machine can miss
        while "simulate" not in buf.getvalue() and time.monotonic() < until:
            time.sleep(0.01)
    text = buf.getvalue()
    assert "social-llm: 1 run(s): run 1/1: simulate · 1/7 stage(s)" in text and "finished" in text


def test_the_progress_line_counts_requests_so_far_and_does_not_read_as_a_total():
    """The requests that missed the cache are counted as they are sent, so the number grows with the run: the line
    read 'LLM 3 call(s) / 3 planned' after a batch of 3 and 'LLM 8 call(s) / 8 planned' after 5 more, a fraction
    whose denominator looked like the run's total. It says what it counts now."""
    from aumann.cli.llm_usage import ProgressLines

    seen = []
    with LoopbackLLM(lambda body: '{"yes": true}') as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, max_retries=0)
        lines = ProgressLines("social-llm: 1 run(s)", b, stream=io.StringIO())
        for seeds in (range(3), range(3, 8)):
            b.decide_many([{"messages": MSGS, "schema": Vote, "seed": s} for s in seeds])
            seen.append(lines.line())
    assert "LLM 3 call(s) sent for 3 request(s) so far, 0 cached" in seen[0]
    assert "LLM 8 call(s) sent for 8 request(s) so far, 0 cached" in seen[1]
    assert not any("planned" in line or " / " in line for line in seen)


def test_an_unreliable_run_is_marked_in_the_manifest_both_reports_and_the_console(tmp_path, capsys):
    from aumann.cli import main  # the command line's own entry point, in this process (exit code, console)

    out = tmp_path / "run"
    capsys.readouterr()
    with LoopbackLLM(lambda body: '{"thinking": "hmm"}') as srv:
        code = main(["run", "social-llm", "--agents", "3", "--steps", "2", "--runs", "1",
                     "--permutations", "4", "--no-ablations", "--no-plots", "--set", "study.random_orderings=1",
                     "--set", "study.action_attribution=false", "--backend", "openai", "--model", "m",
                     "--base-url", srv.base_url, "--out", str(out)])
    stderr = capsys.readouterr().err
    assert code == 0, stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    rel = manifest["llm_reliability"]
    assert rel["unreliable"] and rel["invalid_rate"] == 1.0 and rel["invalid_decisions"] > 0
    assert sum(rel["invalid_decisions_per_run"]) > 0
    assert "UNRELIABLE RUN" in (out / "report.md").read_text() and "UNRELIABLE" in (out / "report.html").read_text()
    assert "UNRELIABLE" in stderr
    # the judge (the LLM: study.judge = auto) had no usable answer either: its row is a recorded failure
    assert "row llm_judge" in json.dumps(manifest) and "llm_judge" not in (out / "faithfulness.csv").read_text()
    assert "row llm_judge" in (out / "report.md").read_text()
    ledger = json.loads((out / "llm-usage.json").read_text())
    assert ledger["invalid_rate"] == 1.0 and ledger["invalid_replies"][0]["reply"] == '{"thinking": "hmm"}'


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM")
def test_sigterm_writes_the_usage_ledger(tmp_path):
    out = tmp_path / "run"
    with LoopbackLLM(latency=0.3) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "aumann.cli", "run", "social-llm", "--agents", "20", "--steps", "5", "--runs", "1",
             "--backend", "openai", "--model", "m", "--base-url", srv.base_url, "--out", str(out),
             "--concurrency", "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while srv.stats()["answered"] < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    ledger = json.loads((out / "llm-usage.json").read_text())
    assert ledger["usage"]["calls"] >= 3


def test_two_gguf_files_of_one_name_are_two_models_to_the_cache(tmp_path):
    """The local backend named its model by the file's stem alone, and the cache key held nothing else of it: a
    cache recorded with a/ggml-model-Q4_K_M.gguf (the name llama.cpp's quantize writes for every model) was replayed
    for b/ggml-model-Q4_K_M.gguf, another model's weights. A fingerprint of the weights is now part of the key."""
    from pydantic import BaseModel

    from aumann.simulators.llm.local import gguf_fingerprint, local_backend
    from aumann.simulators.llm.offline import OfflineBackend
    from aumann.simulators.llm.options import BackendOptions

    class Pick(BaseModel):
        x: int

    files = {}
    for name, weights in (("a", b"\x01" * 3_000_000), ("b", b"\x02" * 3_000_000), ("c", b"\x01" * 3_000_000)):
        (tmp_path / name).mkdir()
        files[name] = tmp_path / name / "ggml-model-Q4_K_M.gguf"
        files[name].write_bytes(b"GGUF" + weights)
    stand_in = OfflineBackend(lambda ctx, schema, rng: {"x": 1})
    msgs = [{"role": "user", "content": "Pick."}]
    keys = {n: local_backend(BackendOptions(model=str(f), dry_run=stand_in)).cache_key(msgs, Pick, seed=1)
            for n, f in files.items()}
    assert keys["a"] != keys["b"] and keys["a"] == keys["c"]  # the weights decide, not the name or the folder
    assert gguf_fingerprint(files["a"]) == gguf_fingerprint(files["c"]) != gguf_fingerprint(files["b"])
    b = local_backend(BackendOptions(model=str(files["b"]), dry_run=stand_in))
    assert b.describe()["model_identity"] == {"gguf_sha256_16": gguf_fingerprint(files["b"])}


def test_the_per_run_abstentions_of_the_manifest_add_up_to_its_total(tmp_path, capsys):
    """``llm_reliability.invalid_decisions`` counts every abstention of a run, its forks' included (the rate is over
    every decision asked), but ``invalid_decisions_per_run`` held only those of the run's own model: on SmolLM2-135M
    with ``--structured-output none`` (social-llm, 3 agents, 2 steps, 1 run) the manifest said 5 abstentions and
    ``invalid_decisions_per_run: [2]``, while the ledger's ``run_counts`` of that one run said 5. The per-run list is
    now the split of the total (the ledger's counts); the panel's own abstentions are kept beside it."""
    from aumann.cli import main

    out = tmp_path / "run"
    capsys.readouterr()
    with LoopbackLLM(lambda body: '{"thinking": "hmm"}') as srv:
        code = main(["run", "social-llm", "--agents", "3", "--steps", "2", "--runs", "1",
                     "--permutations", "4", "--no-ablations", "--no-plots", "--judge", "off",
                     "--set", "study.random_orderings=1", "--backend", "openai", "--model", "m",
                     "--base-url", srv.base_url, "--out", str(out)])
    assert code == 0, capsys.readouterr().err[-2000:]
    rel = json.loads((out / "manifest.json").read_text())["llm_reliability"]
    ledger = json.loads((out / "llm-usage.json").read_text())
    # every reply is invalid: the run's model abstains 6 times, its forks (deletion, re-simulation) 13 more
    assert rel["invalid_decisions"] == ledger["run_counts"]["0"]["invalid_decisions"]
    assert rel["invalid_decisions_per_run"] == [rel["invalid_decisions"]]
    assert 0 < rel["invalid_decisions_in_panel_per_run"][0] < rel["invalid_decisions"]
