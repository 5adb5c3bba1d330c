"""Decisions whose requests all failed: an abstention that is remembered and stored (marked ``failed: ...``)
so forks and a replay of the cache serve the same abstention -- unless the failures were an outage
(``ServerDownError``): then they are forgotten and never stored, so a resumed run asks them again."""

from __future__ import annotations

import json

import httpx
import pytest
from pydantic import BaseModel

from aumann.errors import BackendUnavailableError, MalformedResponseError, ServerDownError
from aumann.simulators.llm import OpenAIBackend, ResponseCache
from tests.llm_loopback import LoopbackLLM
from tests.simulators.llm_fakes import SECRET, client_for, completion


class Vote(BaseModel):
    yes: bool


MSGS = [{"role": "user", "content": "Vote?"}]


def _req(seed: int) -> dict:
    return {"messages": MSGS, "schema": Vote, "seed": seed}


def _backend(url: str, cache: ResponseCache | None, **kw) -> OpenAIBackend:
    return OpenAIBackend(model="m", base_url=url, cache=cache, max_retries=3, sleep=lambda s: None, **kw)


def test_a_decision_whose_requests_all_failed_is_asked_once_and_replays_as_the_same_abstention(tmp_path, capsys):
    path = tmp_path / "llm-cache.sqlite"
    with LoopbackLLM(lambda body: '{"yes": true}', status_of=lambda body: 500 if body["seed"] == 2 else None) as srv:
        b = _backend(srv.base_url, ResponseCache(path))
        first = b.decide_many([_req(s) for s in (1, 2, 3)], return_exceptions=True)
        assert isinstance(first[1], BackendUnavailableError) and not isinstance(first[1], ServerDownError)
        assert first[0].yes and first[2].yes
        sent = srv.stats()["requests"]
        assert sent == 2 + 4  # the failing decision: 1 + 3 retries
        fork = b.decide_many([_req(s) for s in (2, 1, 2)], return_exceptions=True)  # a fork asks again
        assert srv.stats()["requests"] == sent  # ... and is served from memory
        assert isinstance(fork[0], BackendUnavailableError) and isinstance(fork[2], BackendUnavailableError)
        assert b.usage.invalid_decisions == 3
        b.close()
    rows = list(ResponseCache(path, mode="replay").rows(invalid_only=True))
    assert len(rows) == 1 and rows[0]["reply"] == "" and rows[0]["invalid"].startswith("failed: 4 attempt(s)")
    assert "500" in rows[0]["invalid"]
    from aumann.cli import main

    assert main(["llm", "show", str(tmp_path), "--invalid"]) == 0
    shown = capsys.readouterr().out
    assert "INVALID (failed: 4 attempt(s)" in shown and "→ no reply: every request of this decision failed" in shown
    # the recorded cache replays offline: the same abstention, no CacheMissError (port 9: nothing listens)
    replay = _backend("http://127.0.0.1:9/v1", ResponseCache(path, mode="replay"))
    again = replay.decide_many([_req(s) for s in (1, 2, 3)], return_exceptions=True)
    assert again[0] == first[0] and again[2] == first[2]
    assert isinstance(again[1], BackendUnavailableError) and "failed: 4 attempt(s)" in str(again[1])
    assert replay.usage.invalid_decisions == 1 and replay.usage.total_calls == 0
    # a record-mode run on the same cache (a resume) does not ask it again either
    with LoopbackLLM(lambda body: '{"yes": true}') as srv2:
        resumed = _backend(srv2.base_url, ResponseCache(path))
        out = resumed.decide_many([_req(2)], return_exceptions=True)
        assert isinstance(out[0], BackendUnavailableError) and srv2.stats()["requests"] == 0
        resumed.close()


def test_the_stored_reason_is_redacted():
    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["seed"] == 2:
            return httpx.Response(503, json={"error": {"message": f"overloaded; your key {SECRET} is fine"}})
        return httpx.Response(200, json=completion('{"yes": true}'))

    cache = ResponseCache(":memory:")
    b = OpenAIBackend(model="m", client=client_for(handler), cache=cache, max_retries=1, sleep=lambda s: None)
    out = b.decide_many([_req(1), _req(2), _req(3)], return_exceptions=True)
    assert isinstance(out[1], BackendUnavailableError)
    b.close()
    rows = list(cache.rows(invalid_only=True))
    assert len(rows) == 1 and rows[0]["invalid"].startswith("failed: 2 attempt(s)")
    assert SECRET not in json.dumps(rows) and SECRET[-10:] not in json.dumps(rows) and "***" in rows[0]["invalid"]


def test_failed_decisions_are_stored_once_the_server_answers_again_or_the_backend_closes(tmp_path):
    path = tmp_path / "c.sqlite"
    bad = {2, 3, 5}
    with LoopbackLLM(lambda body: '{"yes": true}', status_of=lambda body: 500 if body["seed"] in bad else None) as srv:
        b = _backend(srv.base_url, ResponseCache(path), concurrency=1)
        for s in (1, 2, 3):
            b.decide_many([_req(s)], return_exceptions=True)
        assert len(ResponseCache(path, mode="replay")) == 1  # 2 and 3 are held: the start of an outage?
        b.decide_many([_req(4)])  # the server answered: they were no outage
        assert len(ResponseCache(path, mode="replay")) == 4
        b.decide_many([_req(5)], return_exceptions=True)  # the last decision of the run failed ...
        b.close()  # ... and the run ended without an outage: stored
    assert {r["invalid"] is not None for r in ResponseCache(path, mode="replay").rows()} == {True, False}
    assert len(list(ResponseCache(path, mode="replay").rows(invalid_only=True))) == 3


def test_a_stopped_run_does_not_store_the_failures_no_answer_confirmed(tmp_path):
    path = tmp_path / "c.sqlite"
    with LoopbackLLM(lambda body: '{"yes": true}', status_of=lambda body: 500 if body["seed"] == 2 else None) as srv:
        b = _backend(srv.base_url, ResponseCache(path), concurrency=1)
        b.decide_many([_req(1)])
        b.decide_many([_req(2)], return_exceptions=True)
        b.close(keep_failed=False)  # the CLI closes so when the run stops (a cap, Ctrl-C, an error)
    assert [r["invalid"] for r in ResponseCache(path, mode="replay").rows()] == [None]


def test_an_outage_leaves_no_abstention_behind_and_a_resume_asks_again(tmp_path):
    path = tmp_path / "c.sqlite"
    down = {"on": True}
    with LoopbackLLM(lambda body: '{"yes": true}', status_of=lambda body: 503 if down["on"] else None) as srv:
        b = _backend(srv.base_url, ResponseCache(path), concurrency=1)
        got = [b.decide_many([_req(s)], return_exceptions=True)[0] for s in range(1, 9)]
        assert all(type(g) is BackendUnavailableError for g in got[:7]) and isinstance(got[7], ServerDownError)
        sent = srv.stats()["requests"]
        assert sent == 8 * 4
        b.close()  # even a clean close stores none of the outage's decisions
        assert len(ResponseCache(path, mode="replay")) == 0
        down["on"] = False  # the server is back: the same backend (memory) and a resumed one ask again
        assert b.decide_many([_req(1)])[0].yes
        resumed = _backend(srv.base_url, ResponseCache(path))
        assert all(v.yes for v in resumed.decide_many([_req(s) for s in range(1, 9)]))
        assert srv.stats()["requests"] == sent + 1 + 7
        resumed.close()
    assert len(list(ResponseCache(path, mode="replay").rows(invalid_only=True))) == 0


def test_a_fork_and_its_original_asking_together_share_the_one_failed_decision(tmp_path):
    with LoopbackLLM(lambda body: '{"yes": true}', status_of=lambda body: 500 if body["seed"] == 2 else None,
                     latency=0.01) as srv:
        b = _backend(srv.base_url, ResponseCache(tmp_path / "c.sqlite"), concurrency=4)
        out = b.decide_many([_req(2), _req(1), _req(2), _req(2)], return_exceptions=True)
        assert [type(o).__name__ for o in out] == ["BackendUnavailableError", "Vote", "BackendUnavailableError",
                                                   "BackendUnavailableError"]
        assert srv.stats()["requests"] == 1 + 4
        b.close()


@pytest.mark.parametrize("body", [b"<html><body>Welcome to nginx!</body></html>", b'{"choices": []}', b"[1, 2]",
                                  b'{"error": "upstream timed out"}', b'{"choices": [{"message": {"content": "{\\"yes'],
                         ids=["html", "no_choices", "list", "no_message", "cut_json"])
def test_a_200_that_is_no_chat_completion_is_a_failing_server_not_the_models_answer(tmp_path, body):
    """A wrong base URL (a web server's page for every path), a proxy's error page or a body of the wrong shape came
    back with HTTP 200 and counted as the *model's* invalid answer: one 'varied' retry, a MalformedResponseError,
    and a row stored in the cache as a permanent abstention -- the whole study ran to 100 % abstentions, never
    looked like an outage, and the re-run after fixing the URL replayed every abstention from the cache (0
    requests). Now it is a failed request: retried with backoff, an outage after 8 decisions (nothing stored) and a
    stored 'failed: ...' only once a later answer shows the server was up."""
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    b = OpenAIBackend(model="m", client=client_for(lambda r: httpx.Response(200, content=body)), cache=cache,
                      max_retries=1, sleep=lambda s: None, concurrency=1)
    got = [b.decide_many([_req(s)], return_exceptions=True)[0] for s in range(8)]
    assert all(type(g) is BackendUnavailableError for g in got[:7]) and isinstance(got[7], ServerDownError)
    assert "not a chat completion" in str(got[7]) and b.usage.invalid_decisions == 7
    b.close()
    assert len(ResponseCache(path, mode="replay")) == 0  # an outage: nothing stored, a re-run asks again

    def one_bad(request: httpx.Request) -> httpx.Response:
        seed = json.loads(request.content)["seed"]
        return httpx.Response(200, content=body) if seed == 2 else httpx.Response(200, json=completion('{"yes": 1}'))

    b = OpenAIBackend(model="m", client=client_for(one_bad), cache=ResponseCache(path), max_retries=1,
                      sleep=lambda s: None, concurrency=1)
    assert isinstance(b.decide_many([_req(2)], return_exceptions=True)[0], BackendUnavailableError)
    assert b.decide_many([_req(3)])[0].yes  # the server answers: the failed decision was no outage
    b.close()
    [row] = ResponseCache(path, mode="replay").rows(invalid_only=True)
    assert row["invalid"].startswith("failed: 2 attempt(s)") and row["reply"] == ""


def test_a_completion_without_content_is_still_the_models_answer(tmp_path):
    """A model that refused (``refusal``) or called a tool answered, with no content: an abstention of the model
    (MalformedResponseError after the varied retry), stored as its invalid answer."""
    refusal = {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't"}}],
               "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    cache = ResponseCache(tmp_path / "c.sqlite")
    b = OpenAIBackend(model="m", client=client_for(lambda r: httpx.Response(200, json=refusal)), cache=cache,
                      max_retries=1, sleep=lambda s: None)
    [out] = b.decide_many([_req(1)], return_exceptions=True)
    assert isinstance(out, MalformedResponseError) and "no choices[0].message.content" in str(out)
    b.close()
    [row] = ResponseCache(tmp_path / "c.sqlite", mode="replay").rows(invalid_only=True)
    assert "no choices[0].message.content" in row["invalid"]


def test_a_server_reporting_an_unsupported_response_format_with_http_200_is_negotiated_down():
    """Such a server's {"error": "... json_schema ..."} with HTTP 200 is negotiated like a 4xx naming the format (the
    structured-output mode falls back), not retried until the run stops."""
    def handler(request: httpx.Request) -> httpx.Response:
        fmt = (json.loads(request.content).get("response_format") or {}).get("type")
        if fmt == "json_schema":
            return httpx.Response(200, json={"error": {"message": "response_format json_schema is not supported"}})
        return httpx.Response(200, json=completion('{"yes": true}'))

    b = OpenAIBackend(model="m", client=client_for(handler), max_retries=0, sleep=lambda s: None)
    assert b.decide_many([_req(1)])[0].yes and b.structured_mode == "json_object"
