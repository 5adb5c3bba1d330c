"""The cluster's LLM service without Ray: one cache, one rate limiter and one spend account that any
number of workers' backends share (the Ray actor runs this same class; see test_ray_cluster.py)."""

from __future__ import annotations

import threading
import time

import pytest

from aumann.simulators.llm import BudgetExceededError, OpenAIBackend, ResponseCache
from aumann.simulators.llm_service import LLMService, ServedCache, ServedLimiter, serve_backend, service_args
from tests.llm_loopback import LoopbackLLM


def test_one_call_cap_for_all_workers():
    svc = LLMService(max_calls=10)
    granted = []

    def worker():
        for _ in range(8):
            if svc.reserve(0.0, 0) is None:
                granted.append(1)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 10 and svc.totals()["calls"] == 10  # 32 asked, the cap holds for the cluster
    assert "max_calls=10" in svc.reserve(0.0, 0)


def test_one_cost_cap_counts_what_is_in_flight_and_what_was_spent_before():
    svc = LLMService(max_cost=1.0, spent=(3, 100, 0.5))
    assert svc.reserve(0.3, 0) is None
    assert "max_cost" in svc.reserve(0.3, 0)  # 0.5 spent + 0.3 in flight + 0.3 > 1
    svc.release(0.3, 0)
    svc.charge(10, 5, 0.1)
    assert svc.reserve(0.3, 0) is None and svc.totals()["cost_usd"] == pytest.approx(0.6)
    assert svc.totals()["calls"] == 5


def test_the_rate_limit_is_one_bucket_and_never_blocks_the_service():
    svc = LLMService(rpm=600)  # 10 per second, burst 1
    waits = [svc.acquire(10) for _ in range(5)]
    assert waits[0] == 0 and waits[-1] == pytest.approx(0.4, abs=0.05)  # the 5th may go 0.4 s from now
    limiter = ServedLimiter(svc, 600, None)
    t0 = time.monotonic()
    limiter.acquire(10)  # the worker side sleeps what the service says
    assert time.monotonic() - t0 >= 0.4


def test_a_worker_waiting_for_its_served_rate_slot_raises_when_the_run_is_interrupted():
    import threading

    svc = LLMService(rpm=6)  # a slot every 10 s after the first
    limiter = ServedLimiter(svc, 6, None)
    limiter.acquire(10)
    threading.Timer(0.2, limiter.stop).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="not sent"):
        limiter.acquire(10)  # would sleep ~10 s
    assert time.monotonic() - t0 < 5.0
    limiter.resume()


def test_the_served_cache_reads_and_writes_the_run_cache_through_the_service(tmp_path):
    path = tmp_path / "c.sqlite"
    svc = LLMService(str(path), "record")
    a, b = ServedCache(svc, "record", path), ServedCache(svc, "record", path)
    a.put("k1", "hello", backend="openai", model="m", request={"x": 1}, prompt_tokens=3, completion_tokens=2)
    assert a.get("k1").text == "hello"  # its own pending write
    a.flush()
    assert b.get_many(["k1", "nope"])["k1"].prompt_tokens == 3 and "nope" not in b.get_many(["nope"])
    svc.close()
    assert ResponseCache(path).get("k1").text == "hello"  # in the run's cache file, written by the service only


def test_a_served_backend_spends_from_the_cluster_account(tmp_path):
    with LoopbackLLM() as srv:
        backend = OpenAIBackend(model="m", base_url=srv.base_url, cache=ResponseCache(tmp_path / "c.sqlite"),
                                max_calls=3, rpm=6000)
        args = service_args(backend)
        assert args["max_calls"] == 3 and args["cache_path"].endswith("c.sqlite") and args["rpm"] == 6000
        svc = LLMService(**args)
        served = serve_backend(backend, svc)
        assert served.max_calls is None and isinstance(served.cache, ServedCache)
        assert isinstance(served.limiter, ServedLimiter)
        from pydantic import BaseModel

        class Reply(BaseModel):
            value: int

        msgs = [[{"role": "user", "content": f"question {i}"}] for i in range(5)]
        with pytest.raises(BudgetExceededError, match="max_calls=3"):
            for m in msgs:
                served.decide(m, Reply, seed=1)
        assert srv.stats()["requests"] == 3 and svc.totals()["calls"] == 3
        assert svc.totals()["tokens"] == srv.stats()["prompt_tokens"] + srv.stats()["completion_tokens"]
        assert svc.totals()["reserved_usd"] == 0  # every reservation released
        served.close()
        svc.close()
        assert len(ResponseCache(tmp_path / "c.sqlite")) == 3


def test_service_args_of_an_offline_run_is_none():
    assert service_args(None) is None
