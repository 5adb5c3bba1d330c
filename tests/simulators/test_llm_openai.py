"""The OpenAI-compatible backend driven through the real ``openai`` client (mock transport and a
loopback server): success, malformed JSON, out-of-range values, 429, 5xx, timeouts, server down,
401, 404, the cost guard, dry runs, and the response cache (record → replay with zero requests)."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from pydantic import BaseModel, Field

from aumann.errors import ConfigError, LLMError
from aumann.simulators.llm import (
    BackendUnavailableError,
    BudgetExceededError,
    CacheMissError,
    DecisionBackend,
    LLMAuthenticationError,
    MalformedResponseError,
    ModelNotFoundError,
    OfflineBackend,
    OpenAIBackend,
    ResponseCache,
)
from tests.simulators.llm_fakes import SECRET, LoopbackServer, Script, client_for, closed_port, completion


class Work(BaseModel):
    work: float = Field(ge=0.0, le=1.0)
    consumption: float = Field(ge=0.0, le=1.0)


MSGS = [{"role": "system", "content": "You are a worker."}, {"role": "user", "content": "Decide."}]
GOOD = '{"work": 0.6, "consumption": 0.3}'


def backend(script, **kw) -> OpenAIBackend:
    kw.setdefault("max_retries", 2)
    return OpenAIBackend(model="m", client=client_for(script), sleep=lambda s: None, **kw)


def test_success_returns_a_validated_instance_and_counts_tokens():
    script = Script(GOOD)
    b = backend(script, temperature=0.7)
    out = b.decide(MSGS, Work, seed=5)
    assert isinstance(out, Work) and out == Work(work=0.6, consumption=0.3)
    assert isinstance(b, DecisionBackend)
    body = script.bodies[0]
    assert body["model"] == "m" and body["seed"] == 5 and body["temperature"] == 0.7
    assert body["messages"] == MSGS  # strict structured output: the schema travels in response_format
    rf = body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True and rf["json_schema"]["name"] == "Work"
    assert rf["json_schema"]["schema"]["required"] == ["work", "consumption"]
    assert rf["json_schema"]["schema"]["additionalProperties"] is False and b.structured_mode == "json_schema"
    u = b.usage
    assert (u.calls, u.prompt_tokens, u.completion_tokens, u.failures, u.decisions) == (1, 11, 7, 0, 1)
    assert u.as_dict()["total_tokens"] == 18 and u.as_dict()["cache_hits"] == 0


@pytest.mark.parametrize("reply", ['```json\n{"work": 0.6, "consumption": 0.3}\n```',
                                   'Sure! Here it is: {"work": 0.6, "consumption": 0.3} Hope it helps.'])
def test_fenced_or_wrapped_json_is_accepted(reply):
    assert backend(Script(reply)).decide(MSGS, Work) == Work(work=0.6, consumption=0.3)


def test_json_is_parsed_never_evaluated():
    script = Script('{"work": __import__("os").getpid(), "consumption": 0.1}')
    with pytest.raises(MalformedResponseError, match="not JSON"):
        backend(script, max_retries=0).decide(MSGS, Work)


def test_malformed_then_valid_is_retried_and_counted():
    script = Script("I think I'd work a lot", GOOD)
    b = backend(script)
    assert b.decide(MSGS, Work).work == 0.6
    assert (script.calls, b.usage.calls, b.usage.failures, b.usage.retries) == (2, 2, 1, 1)


def test_out_of_range_values_after_a_varied_retry_are_an_abstention_with_the_reply_kept():
    script = Script('{"work": 1.7, "consumption": 0.3}')
    b = backend(script, max_retries=2)
    with pytest.raises(MalformedResponseError,
                       match=r"stayed invalid after a varied retry.*work: Input should be less") as info:
        b.decide(MSGS, Work)
    assert info.value.reply == '{"work": 1.7, "consumption": 0.3}'
    assert (script.calls, b.usage.failures, b.usage.retries, b.usage.decisions) == (2, 2, 1, 0)
    assert b.usage.invalid_decisions == 1 and b.invalid_replies[0]["reply"] == info.value.reply
    first, second = script.bodies
    assert first["temperature"] == 0.0 and second["temperature"] >= 0.7  # the retry is varied ...
    assert "not usable" in second["messages"][-1]["content"]  # ... and names what was wrong
    with pytest.raises(MalformedResponseError):
        b.decide(MSGS, Work)  # remembered: not asked again
    assert script.calls == 2 and b.usage.invalid_decisions == 2


def test_out_of_range_falls_back_to_the_offline_policy_when_given():
    fallback = OfflineBackend(lambda ctx, schema, rng: {"work": ctx["w"], "consumption": 0.0})
    b = backend(Script('{"work": -1, "consumption": 0}'), max_retries=1, fallback=fallback)
    assert b.decide(MSGS, Work, context={"w": 0.25}) == Work(work=0.25, consumption=0.0)
    assert (b.usage.failures, b.usage.fallbacks, b.usage.decisions) == (2, 1, 1)


def test_429_then_success_backs_off_exponentially(caplog):
    caplog.set_level(logging.DEBUG)
    waits = []
    script = Script(429, 429, GOOD)
    b = OpenAIBackend(model="m", client=client_for(script), max_retries=3, backoff=0.1, jitter=0, sleep=waits.append)
    assert b.decide(MSGS, Work).consumption == 0.3
    assert waits == [0.1, 0.2] and (b.usage.calls, b.usage.failures, b.usage.retries) == (3, 2, 2)
    assert "rate limited (HTTP 429)" in caplog.text  # retries are logged ...
    assert SECRET not in caplog.text and SECRET[:8] not in caplog.text  # ... without the key


def test_persistent_5xx_raises_unavailable_after_retries():
    script = Script(503)
    b = backend(script, max_retries=2)
    with pytest.raises(BackendUnavailableError, match=r"server error \(HTTP 503\)") as info:
        b.decide(MSGS, Work)
    assert "after 3 attempt" in str(info.value) and script.calls == 3 and b.usage.failures == 3


def test_timeout_is_retried_then_raises():
    def slow(request):
        raise httpx.ReadTimeout("read timed out", request=request)

    script = Script(slow, GOOD)
    b = backend(script, timeout=0.5)
    assert b.decide(MSGS, Work).work == 0.6 and b.usage.failures == 1
    with pytest.raises(BackendUnavailableError, match=r"timed out after (0\.5|1)s"):
        backend(Script(slow), max_retries=1, timeout=0.5).decide(MSGS, Work)


def test_timeout_against_a_real_slow_loopback_server():
    with LoopbackServer(lambda body: GOOD, delay=0.6) as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, timeout=0.2, max_retries=1, sleep=lambda s: None)
        with pytest.raises(BackendUnavailableError, match="timed out"):
            b.decide(MSGS, Work)
        assert b.usage.calls == 2 and b.usage.failures == 2


def test_loopback_server_success_without_a_key():
    with LoopbackServer(lambda body: json.dumps({"work": 0.5, "consumption": body["seed"] / 100})) as srv:
        b = OpenAIBackend(model="local", base_url=srv.base_url)  # local servers need no key
        assert b.decide(MSGS, Work, seed=40) == Work(work=0.5, consumption=0.4)
        assert srv.calls == 1


def test_server_down_connection_refused():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    b = OpenAIBackend(model="m", base_url=url, max_retries=2, sleep=lambda s: None, timeout=2)
    with pytest.raises(BackendUnavailableError, match=f"cannot connect to {url}"):
        b.decide(MSGS, Work)
    assert (b.usage.calls, b.usage.failures, b.usage.retries) == (3, 3, 2)


@pytest.mark.parametrize(("status", "error", "match"), [
    (401, LLMAuthenticationError, r"http://llm.test/v1 rejected the API key \(HTTP 401\) for model 'm'"),
    (403, LLMAuthenticationError, r"denied access \(HTTP 403\)"),
    (404, ModelNotFoundError, r"HTTP 404.*model 'm' at http://llm.test/v1"),
    (400, LLMError, r"rejected \(HTTP 400\)"),
])
def test_client_errors_raise_once_without_retry_and_never_show_the_key(status, error, match, caplog):
    caplog.set_level(logging.DEBUG)
    script = Script(status)
    b = backend(script, max_retries=3)
    with pytest.raises(error, match=match) as info:
        b.decide(MSGS, Work)
    requests = [r for r in script.requests if r.url.path.endswith("/chat/completions")]
    assert len(requests) == 1 and b.usage.retries == 0 and b.usage.failures == 1
    assert SECRET not in str(info.value) and SECRET[:8] not in str(info.value)
    assert SECRET not in caplog.text


def test_404_lists_the_models_the_server_offers():
    def handler(request):
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [
                {"id": "llama3", "object": "model", "created": 0, "owned_by": "me"}]})
        return httpx.Response(404, json={"error": {"message": "model 'm' not found"}})

    with pytest.raises(ModelNotFoundError, match=r"models this server lists: \['llama3'\]"):
        backend(handler).decide(MSGS, Work)


def test_call_cap_and_token_cap():
    b = backend(Script(GOOD), max_calls=2)
    b.decide(MSGS, Work, seed=1)
    b.decide(MSGS, Work, seed=2)
    with pytest.raises(BudgetExceededError, match="max_calls=2"):
        b.decide(MSGS, Work, seed=3)
    # the token cap reserves each request's upper bound (prompt bytes + template + reply bound): a cap
    # just above one bound lets one request through (it reports 18 tokens), not the next
    t = backend(Script(GOOD), max_tokens=20)
    with pytest.raises(BudgetExceededError, match=r"may use up to \d+, max_tokens=20"):
        t.decide(MSGS, Work, seed=1)
    from aumann.simulators.llm.calls import Call
    from aumann.simulators.llm.tokens import upper_bound

    bound = sum(upper_bound(t.core, Call(t._prepare(0, MSGS, Work, seed=1))))
    t = backend(Script(GOOD), max_tokens=bound + 10)
    t.decide(MSGS, Work, seed=1)
    with pytest.raises(BudgetExceededError, match="18 token"):
        t.decide(MSGS, Work, seed=2)


def test_dry_run_estimates_calls_and_sends_nothing(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    backend(Script(GOOD), cache=cache).decide(MSGS, Work, seed=1)  # one recorded decision
    script = Script(GOOD)
    fallback = OfflineBackend(lambda ctx, schema, rng: {"work": 0.0, "consumption": 0.0})
    dry = backend(script, cache=cache, dry_run=True, fallback=fallback)
    for seed in range(4):
        dry.decide(MSGS, Work, seed=seed)
    est = dry.estimate()
    assert script.calls == 0 and (est.calls, est.cache_hits) == (3, 1) and est.prompt_tokens > 0
    with pytest.raises(LLMError, match=r"needs a fallback.*\['work', 'consumption'\]"):
        backend(script, dry_run=True).decide(MSGS, Work)


def test_cache_record_then_replay_is_bit_identical_with_zero_requests(tmp_path):
    path = tmp_path / "llm.sqlite"
    calls = iter(range(1000))
    recorder = Script(lambda r: httpx.Response(
        200, json=completion(json.dumps({"work": next(calls) / 1000, "consumption": 0.5}))))
    rec = backend(recorder, cache=ResponseCache(path, mode="record"))
    first = [rec.decide(MSGS, Work, seed=s) for s in range(5)]
    again = [rec.decide(MSGS, Work, seed=s) for s in range(5)]  # read-through hits
    assert recorder.calls == 5 and rec.usage.cache_hits == 5 and again == first

    replay_script = Script(500)
    rep = backend(replay_script, cache=ResponseCache(path, mode="replay"))
    replayed = [rep.decide(MSGS, Work, seed=s) for s in range(5)]
    assert replay_script.calls == 0 and rep.usage.calls == 0 and rep.usage.cache_hits == 5
    assert [r.model_dump_json() for r in replayed] == [r.model_dump_json() for r in first]
    with pytest.raises(CacheMissError, match=r"replay cache miss .*seed=99") as miss:
        rep.decide(MSGS, Work, seed=99)
    assert replay_script.calls == 0
    # `aumann run --cache-mode replay` printed only the library's remedy (ResponseCache(..., mode='record')): the
    # command line's is named too
    assert "--cache-mode record" in str(miss.value) and "mode='record'" in str(miss.value)

    off_script = Script(GOOD)
    off = backend(off_script, cache=ResponseCache(path, mode="off"))
    off.decide(MSGS, Work, seed=0)
    assert off_script.calls == 1  # "off" neither reads nor writes


def test_cache_key_depends_on_request_parameters_but_not_on_the_key(tmp_path):
    path = tmp_path / "k.sqlite"
    cache = ResponseCache(path)
    a = backend(Script(GOOD), cache=cache, temperature=0.0)
    b = backend(Script(GOOD), cache=cache, temperature=0.5)
    a.decide(MSGS, Work, seed=1)
    b.decide(MSGS, Work, seed=1)
    a.decide(MSGS, Work, seed=2)
    assert len(cache) == 3  # temperature and seed are part of the key
    import openai

    other_key = OpenAIBackend(model="m", cache=cache, client=openai.OpenAI(
        api_key="sk-another-key-123456", base_url="http://elsewhere.test/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(Script(500)))), max_retries=0)
    assert other_key.decide(MSGS, Work, seed=1) == Work(work=0.6, consumption=0.3)  # hit: no key/URL in key
    cache.close()
    raw = path.read_bytes()
    assert SECRET.encode() not in raw and b"sk-test" not in raw and b"sk-another" not in raw


def test_decide_many_keeps_order_under_concurrency():
    with LoopbackServer(lambda body: json.dumps({"work": body["seed"] / 10, "consumption": 0.0})) as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, concurrency=3)
        out = b.decide_many([{"messages": MSGS, "schema": Work, "seed": s} for s in range(8)])
    assert [o.work for o in out] == [s / 10 for s in range(8)] and b.usage.calls == 8


def test_bad_configuration():
    with pytest.raises(ConfigError, match=r"\['record', 'replay', 'off'\]"):
        ResponseCache(":memory:", mode="write")
    with pytest.raises(LLMError, match="max_retries must be an int >= 0"):
        OpenAIBackend(model="m", max_retries=-1)
    with pytest.raises(LLMError, match="model must be a non-empty string"):
        OpenAIBackend(model="")
    with pytest.raises(LLMError, match="pydantic BaseModel subclass"):
        backend(Script(GOOD)).decide(MSGS, dict)
    with pytest.raises(LLMError, match="non-empty list"):
        backend(Script(GOOD)).decide("hello", Work)


def test_backends_are_shared_not_copied_by_deepcopy():
    import copy

    b = backend(Script(GOOD), cache=ResponseCache(":memory:"))
    assert copy.deepcopy(b) is b and copy.deepcopy(b.cache) is b.cache


def test_concurrency_limit_holds_across_caller_threads():
    from concurrent.futures import ThreadPoolExecutor

    with LoopbackServer(lambda body: GOOD, delay=0.15) as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, concurrency=2)
        with ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(lambda s: b.decide(MSGS, Work, seed=s), range(6)))
    assert srv.calls == 6 and 1 <= srv.max_in_flight <= 2  # never more than `concurrency` in flight


def test_retry_after_is_honoured_up_to_the_stated_maximum():
    def limited(after):
        return lambda r: httpx.Response(429, headers={"retry-after": after}, json={"error": {"message": "slow"}})

    waits = []
    script = Script(limited("0.5"), limited("3"), GOOD)
    b = OpenAIBackend(model="m", client=client_for(script), max_retries=2, backoff=0.1, backoff_max=2.0,
                      sleep=waits.append)
    # the server's wait is honoured even beyond the backoff cap (never silently shortened) ...
    assert b.decide(MSGS, Work).work == 0.6 and waits == [0.5, 3.0]


def test_a_request_two_concurrent_batches_share_is_counted_once(tmp_path):
    """Forks run on threads, and two forks' batches may hold the same request: the second joins the first in flight
    (nothing more is sent), but both batches counted it in ``planned_calls`` -- the dry run's "requests after the
    cache" -- so `aumann run social-llm --dry-run --runs 1` printed 4,807, 4,931 or 4,845 requests from one config
    (4,461 at --concurrency 1, the number of distinct requests)."""
    import threading
    import time

    entered, release = threading.Event(), threading.Event()

    def slow(ctx, schema, rng):  # the stand-in answering in place of the model: held until both batches asked
        entered.set()
        assert release.wait(30)
        return {"work": 0.5, "consumption": 0.5}

    script = Script(GOOD)
    dry = backend(script, cache=ResponseCache(tmp_path / "c.sqlite"), dry_run=True, fallback=OfflineBackend(slow))
    req = {"messages": MSGS, "schema": Work, "seed": 7}
    out: list = []
    first = threading.Thread(target=lambda: out.append(dry.decide_many([req])))
    first.start()
    assert entered.wait(30)  # the first batch's request is in flight
    second = threading.Thread(target=lambda: out.append(dry.decide_many([req, {**req, "seed": 8}])))
    second.start()
    deadline = time.monotonic() + 30
    while dry.usage.planned_calls < 3 and time.monotonic() < deadline:  # the second batch has sent its two on
        time.sleep(0.01)
    release.set()
    first.join(30)
    second.join(30)
    assert len(out) == 2 and script.calls == 0
    est = dry.estimate()
    assert est.calls == 2, est  # seeds 7 and 8: two distinct requests, whatever the timing
    assert dry.usage.planned_calls == 2 and dry.usage.cache_hits == 1  # seed 7 once more: joined, not sent
