"""The batched request path against a loopback OpenAI-compatible server (tests/llm_loopback.py):
order and bytes independent of concurrency, rate limits as the server counts them, a batch failing
half-way, usage equal to the server's own count, joined duplicates, structured-output fallback,
endpoint failover, and one cache file shared by several processes."""

from __future__ import annotations

import json
import multiprocessing as mp
import threading
import time

import pytest
from pydantic import BaseModel, Field

from aumann.simulators.llm import (
    MalformedResponseError,
    OpenAIBackend,
    ResponseCache,
    Usage,
)
from tests.llm_loopback import LoopbackLLM
from tests.simulators.llm_fakes import closed_port


class Work(BaseModel):
    work: float = Field(ge=0.0, le=1.0)
    consumption: float = Field(ge=0.0, le=1.0)


def _reply(body: dict) -> str:
    s = body.get("seed", 0)
    return json.dumps({"work": (s % 50) / 50, "consumption": ((3 * s) % 50) / 50})


def _reqs(n: int, offset: int = 0) -> list[dict]:
    return [{"messages": [{"role": "user", "content": f"Decide for household {i}."}], "schema": Work,
             "seed": offset + i} for i in range(n)]


def _backend(srv: LoopbackLLM, **kw) -> OpenAIBackend:
    kw.setdefault("sleep", lambda s: None)
    return OpenAIBackend(model="m", base_url=srv.base_url, **kw)


def test_results_and_usage_do_not_depend_on_concurrency(tmp_path):
    outs, usages = [], []
    for conc in (1, 32):
        with LoopbackLLM(_reply, latency=0.004, jitter=0.003) as srv:
            b = _backend(srv, concurrency=conc, cache=ResponseCache(tmp_path / f"c{conc}.sqlite"))
            res = b.decide_many(_reqs(48))
            outs.append([r.model_dump_json() for r in res])
            u = b.usage.manifest_dict()
            usages.append({k: v for k, v in u.items() if not k.startswith("latency")})
            assert srv.stats()["requests"] == 48
            if conc == 32:
                assert srv.stats()["max_in_flight"] > 1  # really concurrent
    assert outs[0] == outs[1] and usages[0] == usages[1]
    assert outs[0][5] == Work(work=0.1, consumption=0.3).model_dump_json()  # request order kept


def test_request_rate_limit_is_obeyed_as_counted_by_the_server():
    with LoopbackLLM(_reply, window=0.5) as srv:
        b = _backend(srv, concurrency=16, rpm=1800)  # 30 requests/s, paced
        t0 = time.perf_counter()
        b.decide_many(_reqs(30))
        wall = time.perf_counter() - t0
        per_window = [v[0] for v in srv.stats()["per_window"].values()]
    assert sum(per_window) == 30 and max(per_window) <= 1 + 15 + 1  # capacity + rate x window (+1: edges)
    assert wall >= 0.9  # 30 requests at 30/s, the first one free


def test_token_rate_limit_is_obeyed_as_counted_by_the_server():
    with LoopbackLLM(_reply, window=0.5) as srv:
        b = _backend(srv, concurrency=16, tpm=12_000)  # 200 tokens/s
        b.decide_many(_reqs(12))
        stats = srv.stats()
    tokens = [v[1] for v in stats["per_window"].values()]
    per_request = (stats["prompt_tokens"] + stats["completion_tokens"]) / stats["answered"]
    # at most the bucket (one second's worth) + the rate x window + one request's overshoot
    assert max(tokens) <= 200 + 100 + 2 * per_request
    assert b.usage.total_tokens == stats["prompt_tokens"] + stats["completion_tokens"]


def test_a_batch_failing_half_way_keeps_its_answers_and_a_rerun_sends_only_the_rest(tmp_path):
    broken = {"on": True}

    def flaky(body):
        if broken["on"] and body["seed"] % 2:
            return "I'd rather not answer in JSON."
        return _reply(body)

    path = tmp_path / "llm.sqlite"
    with LoopbackLLM(flaky) as srv:
        b = _backend(srv, concurrency=8, max_retries=1, cache=ResponseCache(path))
        with pytest.raises(MalformedResponseError, match="not JSON"):
            b.decide_many(_reqs(20))
        assert len(ResponseCache(path)) == 20  # the ten good answers and the ten invalid ones (marked) were committed
        assert b.usage.invalid_decisions == 10
        broken["on"] = False
        srv.reset()
        again = _backend(srv, concurrency=8, cache=ResponseCache(path)).decide_many(_reqs(20), return_exceptions=True)
        assert srv.stats()["requests"] == 0  # a rerun asks nothing: the abstentions are remembered too
    assert [r.work for r in again[::2]] == [(s % 50) / 50 for s in range(0, 20, 2)]
    assert all(isinstance(r, MalformedResponseError) for r in again[1::2])


def test_usage_sums_exactly_to_the_servers_count_with_injected_errors():
    with LoopbackLLM(_reply, error_rate=0.15, error_seed=3, retry_after=0.0) as srv:
        b = _backend(srv, concurrency=8, max_retries=6)
        b.decide_many(_reqs(60))
        stats = srv.stats()
    u = b.usage
    assert stats["injected_errors"] > 0 and u.retries == stats["injected_errors"] == u.failures
    assert u.total_calls == stats["requests"] and u.decisions == 60
    assert (u.prompt_tokens, u.completion_tokens) == (stats["prompt_tokens"], stats["completion_tokens"])
    assert u.latency.count == stats["answered"] and 0 < u.manifest_dict()["latency_p50_s"] < 1


def test_identical_requests_are_sent_once_even_from_concurrent_batches(tmp_path):
    with LoopbackLLM(_reply, latency=0.05) as srv:
        b = _backend(srv, concurrency=16, cache=ResponseCache(tmp_path / "c.sqlite"))
        reqs = _reqs(10) * 2  # every request twice in one batch
        results: list = []
        t = threading.Thread(target=lambda: results.append(b.decide_many(_reqs(10))))
        t.start()
        mine = b.decide_many(reqs)
        t.join()
        assert srv.stats()["requests"] == 10
    assert [r.model_dump() for r in mine[:10]] == [r.model_dump() for r in results[0]]
    assert b.usage.calls == 10 and b.usage.cache_hits == 20 and b.usage.decisions == 30


def test_structured_output_falls_back_to_json_object_and_records_the_mode():
    with LoopbackLLM(_reply, json_schema=False, record_bodies=True) as srv:
        b = _backend(srv, concurrency=8)
        out = b.decide_many(_reqs(12))
        stats = srv.stats()
        bodies = srv.bodies
    assert [o.work for o in out] == [(s % 50) / 50 for s in range(12)]
    assert b.structured_mode == "json_object" and stats["rejected"] == 1  # one probe, the rest waited for it
    assert stats["formats"] == {"json_schema": 1, "json_object": 12}
    assert bodies[-1]["response_format"]["schema"]["required"] == ["work", "consumption"]  # the server constrains
    assert "JSON schema" not in json.dumps(bodies[-1]["messages"])  # ... so none is pasted into the prompt
    assert bodies[-1]["max_tokens"] >= 32  # and every request has a reply bound
    assert b.usage.total_calls == stats["requests"] == 13 and b.usage.failures == 1
    assert b.describe()["structured_output"] == "json_object"


def test_strict_json_schema_mode_never_falls_back():
    from aumann.simulators.llm import LLMRequestError

    with LoopbackLLM(_reply, json_schema=False) as srv:
        with pytest.raises(LLMRequestError, match=r"HTTP 400.*response_format"):
            _backend(srv, structured_output="json_schema").decide_many(_reqs(2))


def test_several_endpoints_share_the_load_and_a_dead_one_is_taken_out():
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    with LoopbackLLM(_reply) as a, LoopbackLLM(_reply) as b2:
        b = OpenAIBackend(model="m", base_url=[a.base_url, dead, b2.base_url], concurrency=4, max_retries=3,
                          sleep=lambda s: None)
        out = b.decide_many(_reqs(40))
        served = (a.stats()["requests"], b2.stats()["requests"])
    assert len(out) == 40 and min(served) >= 10 and sum(served) == 40
    dead_ep = b.endpoints.endpoints[1]
    assert dead_ep.served <= 4 and dead_ep.trips >= 1  # refused once (per racing worker), then out
    assert b.usage.total_calls == 40 + b.usage.failures and b.base_urls[1] == dead


def _write_keys(args):
    path, worker = args
    from aumann.simulators.llm import ResponseCache

    cache = ResponseCache(path, flush_every=7)
    for k in range(worker * 100, worker * 100 + 300):  # overlaps the next two workers' ranges
        cache.put(f"key-{k}", f"answer-{k}", backend="openai", model="m", request={"k": k})
    cache.close()
    return worker


def test_one_cache_file_serves_several_processes_without_lost_or_duplicated_entries(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ResponseCache(path).close()
    # separate processes, each with its own connection. Spawned, not forked: a fork copies whatever locks the
    # worker's other threads hold at that moment (the loopback servers of earlier tests in this pytest-xdist
    # worker), and a child that needs one waits forever (CI: a 300 s timeout in pool.join, once in many runs)
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        done = pool.map_async(_write_keys, [(path, w) for w in range(4)]).get(timeout=120)
        assert sorted(done) == [0, 1, 2, 3]
    cache = ResponseCache(path)
    assert len(cache) == 600  # keys 0 … 599, each once
    got = cache.get_many(f"key-{k}" for k in range(600))
    assert all(got[f"key-{k}"].text == f"answer-{k}" for k in range(600))


def test_cache_writes_are_batched_and_reads_see_the_buffer(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path, flush_every=100, flush_seconds=60)
    for k in range(5):
        cache.put(f"k{k}", "{}", backend="openai", model="m", request={})
    assert cache.get("k3").text == "{}"  # pending, visible
    other = ResponseCache(path)
    assert other.get("k3") is None  # not committed yet
    assert cache.flush() == 5 and other.get("k3").text == "{}"


def test_usage_merge_copy_and_fork_scope():
    u = Usage()
    u.add(calls=2, decisions=2)
    with u.fork_scope():
        u.add(calls=3, decisions=4, planned_calls=3)
    u.add_latency(0.2)
    assert (u.calls, u.fork_calls, u.decisions, u.fork_decisions, u.fork_planned_calls) == (2, 3, 2, 4, 3)
    v = u.copy().merge(u)
    assert v.total_calls == 10 and v.latency.count == 2 and (v - u).calls == 2
    d = u.manifest_dict()
    assert list(d) == ["calls", "cache_hits", "retries", "failures", "prompt_tokens", "completion_tokens",
                       "decisions", "planned_calls", "latency_p50_s", "latency_p95_s", "cost_usd",
                       "fork_decisions", "fork_calls", "invalid_decisions", "bad_usage"]
    assert all(type(x) in (int, float) for x in d.values()) and abs(d["latency_p50_s"] - 0.2) < 0.003


def test_cost_cap_stops_before_spending_past_it_and_counts_earlier_spend():
    from aumann.simulators.llm import BudgetExceededError, Price

    price = Price(input=1000.0, output=1000.0)  # $0.001 per token: a request here costs ~$0.02
    with LoopbackLLM(_reply) as srv:
        b = _backend(srv, concurrency=1, price=price, max_cost=0.2)
        with pytest.raises(BudgetExceededError, match=r"cost cap reached.*max_cost=\$0\.2"):
            b.decide_many(_reqs(40))
        spent = b.usage.cost_usd
        sent = srv.stats()["requests"]
    assert 0 < spent <= 0.2 and sent == b.usage.calls and sent < 40
    assert b.describe()["price_usd_per_mtok"] == {"input": 1000.0, "output": 1000.0}
    with LoopbackLLM(_reply) as srv:  # a resumed run: its account starts with what was spent
        again = _backend(srv, price=price, max_cost=0.2)
        again.usage.merge(b.usage)
        with pytest.raises(BudgetExceededError):
            again.decide_many(_reqs(5, offset=100))
        assert again.usage.cost_usd <= 0.2 and srv.stats()["requests"] < 5  # the earlier spend counts


def test_a_backend_pickles_for_worker_processes_with_its_settings_and_secrets_intact(tmp_path):
    import pickle

    from aumann.studies.faithfulness import _share_budget

    b = OpenAIBackend(model="m", base_url=["http://a.test:1/v1", "http://u:k-123456@b.test:2/v1"], concurrency=32,
                      rpm=600, tpm=6000, max_calls=100, cache=ResponseCache(tmp_path / "c.sqlite"))
    b.usage.add(calls=40)
    share = _share_budget(b, parts=3, workers=2)
    c = pickle.loads(pickle.dumps(share))
    assert c.base_urls == ["http://a.test:1/v1", "http://***@b.test:2/v1"]
    assert c.endpoints.endpoints[1].api_key == "k-123456"
    assert (c.concurrency, c.limiter.rpm, c.limiter.tpm, c.max_calls) == (16, 300, 3000, 40 + 60 // 3)
    assert c.cache.path == b.cache.path and c.usage.calls == 40 and c.core.redact.secrets == ("k-123456",)
    assert (b.concurrency, b.limiter.rpm, b.max_calls) == (32, 600, 100)  # the parent's backend is untouched


@pytest.mark.parametrize("usage", [None, {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}],
                         ids=["no_usage", "zero_usage"])
def test_a_server_reporting_no_or_zero_usage_is_charged_the_upper_bound_and_the_cost_cap_holds(usage):
    """A reply without a usage object (or with 0 prompt tokens) was charged $0: --max-cost never stopped the run and
    the ledger said 0 tokens with bad_usage 0. Such a reply is now charged the request's upper bound and counted."""
    import httpx

    from aumann.simulators.llm import BudgetExceededError, Price
    from tests.simulators.llm_fakes import Script, client_for, completion

    body = completion(json.dumps({"work": 0.5, "consumption": 0.5}))
    if usage is None:
        del body["usage"]
    else:
        body["usage"] = usage
    script = Script(lambda r: httpx.Response(200, json=body))
    b = OpenAIBackend(model="m", client=client_for(script), price=Price(input=1000.0, output=1000.0), max_cost=0.2,
                      concurrency=1, sleep=lambda s: None)
    with pytest.raises(BudgetExceededError, match=r"cost cap reached"):
        b.decide_many(_reqs(40))
    assert 0 < b.usage.cost_usd <= 0.2 and script.calls < 40
    assert b.usage.bad_usage == b.usage.calls == script.calls and b.usage.prompt_tokens > 0


@pytest.mark.parametrize("cap", [1, 2, 5])
def test_max_calls_caps_the_structured_output_resends_too(cap):
    """A server refusing json_schema (llama.cpp) made the core re-send in json_object mode below the spend caps:
    --max-calls 1 sent 2 requests. Each resend now passes the caps' gate and is counted."""
    from aumann.simulators.llm import BudgetExceededError

    with LoopbackLLM(_reply, json_schema=False) as srv:
        b = _backend(srv, concurrency=1, max_calls=cap)
        with pytest.raises(BudgetExceededError, match=rf"call cap reached: {cap} request\(s\) sent"):
            b.decide_many(_reqs(10))
        assert srv.stats()["requests"] == b.usage.calls == cap
