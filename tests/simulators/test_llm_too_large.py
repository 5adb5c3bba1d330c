"""A reply over ``max_response_bytes``: an abstention (``ResponseTooLargeError``) that is stored in the response
cache at once as an empty reply marked ``too large: ...`` -- the oversized text is never kept -- so forks, a resumed
run and ``--cache-mode replay`` serve the same abstention, and a recorded run replays offline."""

from __future__ import annotations

import json

from pydantic import BaseModel

from aumann.errors import BackendUnavailableError, ResponseTooLargeError
from aumann.simulators.llm import OpenAIBackend, ResponseCache
from tests.llm_loopback import LoopbackLLM, smart_reply


class Vote(BaseModel):
    yes: bool


MSGS = [{"role": "user", "content": "Vote?"}]
HUGE = "x" * 5000


def _req(seed: int) -> dict:
    return {"messages": MSGS, "schema": Vote, "seed": seed}


def _backend(url: str, cache: ResponseCache | None, **kw) -> OpenAIBackend:
    return OpenAIBackend(model="m", base_url=url, cache=cache, max_retries=3, max_response_bytes=2000,
                         sleep=lambda s: None, **kw)


def _answer(body: dict) -> str:
    return HUGE if body["seed"] == 2 else '{"yes": true}'


def test_a_too_large_reply_is_stored_at_once_and_replays_as_the_same_abstention(tmp_path, capsys):
    path = tmp_path / "llm-cache.sqlite"
    with LoopbackLLM(_answer) as srv:
        b = _backend(srv.base_url, ResponseCache(path))
        first = b.decide_many([_req(s) for s in (1, 2, 3)], return_exceptions=True)
        assert isinstance(first[1], ResponseTooLargeError) and first[0].yes and first[2].yes
        assert (b.usage.invalid_decisions, b.usage.decisions) == (1, 2)
        sent = srv.stats()["requests"]
        assert sent == 2 + 4  # the oversized decision: 1 + 3 retries
        assert len(ResponseCache(path, mode="replay")) == 3  # stored with its batch: no outage to wait for
        fork = b.decide_many([_req(s) for s in (2, 1, 2)], return_exceptions=True)  # a fork asks again
        assert srv.stats()["requests"] == sent and isinstance(fork[0], ResponseTooLargeError)
        b.close(keep_failed=False)  # even a run that stopped keeps it: it is no sign of an outage
    rows = list(ResponseCache(path, mode="replay").rows(invalid_only=True))
    assert len(rows) == 1 and rows[0]["reply"] == "" and rows[0]["invalid"].startswith("too large: 4 attempt(s)")
    assert "max_response_bytes = 2000" in rows[0]["invalid"] and len(rows[0]["invalid"]) <= 300
    assert "xxxxxxxx" not in json.dumps(rows)  # the oversized text is never stored
    from aumann.cli import main

    assert main(["llm", "show", str(tmp_path), "--invalid"]) == 0
    shown = capsys.readouterr().out
    assert "INVALID (too large: 4 attempt(s)" in shown and "→ no reply kept: the reply was over" in shown
    # the recorded cache replays offline: the same abstention, counted the same way (port 9: nothing listens)
    replay = _backend("http://127.0.0.1:9/v1", ResponseCache(path, mode="replay"))
    again = replay.decide_many([_req(s) for s in (1, 2, 3)], return_exceptions=True)
    assert again[0] == first[0] and again[2] == first[2]
    assert type(again[1]) is ResponseTooLargeError and "too large: 4 attempt(s)" in str(again[1])
    assert (replay.usage.invalid_decisions, replay.usage.decisions, replay.usage.total_calls) == (1, 2, 0)
    # a record-mode run on the same cache (a resume) does not ask it again either
    with LoopbackLLM(lambda body: '{"yes": true}') as srv2:
        resumed = _backend(srv2.base_url, ResponseCache(path))
        out = resumed.decide_many([_req(2)], return_exceptions=True)
        assert type(out[0]) is ResponseTooLargeError and srv2.stats()["requests"] == 0
        resumed.close()


def test_a_too_large_reply_ends_a_streak_of_failed_decisions_like_any_answer(tmp_path):
    """A reply over max_response_bytes arrived: the server is up. It ends the streak of failed decisions before it
    as any answer does -- they are confirmed (stored as abstentions, not held for an outage) and the count of
    decisions in a row that got no answer starts again. Before, it did neither: 7 failures, a too-large reply and
    1 more failure made 8 "in a row" and a ServerDownError, and the 7 stayed held (dropped by a stop)."""
    path = tmp_path / "c.sqlite"

    def status(body):
        return 500 if body["seed"] >= 100 else None

    with LoopbackLLM(_answer, status_of=status) as srv:
        b = _backend(srv.base_url, ResponseCache(path), concurrency=1)
        b.decide_many([_req(1)])
        for seed in range(100, 107):  # 7 failed decisions: one short of down_after = 8
            assert type(b.decide_many([_req(seed)], return_exceptions=True)[0]) is BackendUnavailableError
        stored = sorted(r["invalid"].split(":")[0] for r in ResponseCache(path, mode="replay").rows(invalid_only=True))
        assert stored == []  # held: the server has not answered since they failed
        assert isinstance(b.decide_many([_req(2)], return_exceptions=True)[0], ResponseTooLargeError)
        stored = sorted(r["invalid"].split(":")[0] for r in ResponseCache(path, mode="replay").rows(invalid_only=True))
        assert stored == ["failed"] * 7 + ["too large"]  # the server answered: the 7 were no outage
        # the streak starts again: one more failure is 1 in a row, not 8 (no ServerDownError)
        assert type(b.decide_many([_req(107)], return_exceptions=True)[0]) is BackendUnavailableError
        b.close(keep_failed=False)  # a stop forgets only the failure held since the server last answered
    stored = sorted(r["invalid"].split(":")[0] for r in ResponseCache(path, mode="replay").rows(invalid_only=True))
    assert stored == ["failed"] * 7 + ["too large"]


def test_the_served_cache_of_ray_workers_passes_the_too_large_mark_both_ways(tmp_path):
    from aumann.simulators.llm_service import LLMService, ServedCache

    svc = LLMService(str(tmp_path / "c.sqlite"), "record")
    a, b = ServedCache(svc, "record", tmp_path / "c.sqlite"), ServedCache(svc, "record", tmp_path / "c.sqlite")
    a.put("k", "", backend="openai", model="m", request={"invalid": "too large: 4 attempt(s)"})
    assert a.get("k").failed == "too large: 4 attempt(s)"  # its own pending write
    a.flush()
    assert b.get("k").failed == "too large: 4 attempt(s)"  # through the service
    svc.close()


def test_a_recorded_run_with_a_too_large_reply_replays_offline_and_a_resume_asks_nothing(tmp_path, monkeypatch):
    from aumann.simulators.llm import layers

    init = layers.Retry.__init__  # no backoff between the attempts: the test stays fast
    monkeypatch.setattr(layers.Retry, "__init__", lambda self, *a, **kw: init(self, *a, **{**kw, "sleep": _no}))
    target: dict[str, str] = {}

    def reply(body):  # the first request's decision gets a reply over the CLI's 1 MB bound, every time
        who = json.dumps([body["messages"][-1]["content"], body.get("seed")])
        target.setdefault("who", who)
        return "x" * 1_100_000 if who == target["who"] else smart_reply(body)

    def run(out, *extra):
        from aumann.cli import main

        return main(["run", "social-llm", "--agents", "2", "--steps", "2", "--runs", "1", "--permutations", "4",
                     "--no-ablations", "--no-plots", "--judge", "heuristic", "--set", "study.random_orderings=1",
                     "--set", "study.action_attribution=false", "--backend", "openai", "--model", "m",
                     "--base-url", srv.base_url, "--concurrency", "1", "--out", str(out), *extra])

    rec, cache = tmp_path / "rec", tmp_path / "rec" / "llm-cache.sqlite"
    with LoopbackLLM(reply) as srv:
        assert run(rec) == 0
        sent = srv.stats()["requests"]
        manifest = json.loads((rec / "manifest.json").read_text())
        assert manifest["llm_reliability"]["invalid_decisions"] == 1
        # the recorded cache replays (a miss would be a CacheMissError): exit 0, and nothing is sent
        assert run(tmp_path / "replay", "--cache", str(cache), "--cache-mode", "replay") == 0
        stored = ResponseCache(cache, mode="replay").rows(invalid_only=True)
        assert [(r["reply"], r["invalid"][:10]) for r in stored] == [("", "too large:")]
        # a second record run on the same cache (a resume) asks nothing again either
        assert run(tmp_path / "again", "--cache", str(cache)) == 0
        assert srv.stats()["requests"] == sent
    for name in ("replay", "again"):  # the same run files and the same reliability account
        for f in ("runs/run-000.json", "faithfulness.csv"):
            assert (tmp_path / name / f).read_bytes() == (rec / f).read_bytes(), (name, f)
        other = json.loads((tmp_path / name / "manifest.json").read_text())
        assert other["llm_reliability"] == manifest["llm_reliability"], name


def _no(seconds: float) -> None:
    pass


def test_a_too_large_reply_marks_its_endpoint_as_up():
    """With several endpoints, an endpoint is taken out after 3 failures in a row. A too-large reply is an answer,
    so it resets the count like any answer; before, 2 failures, a too-large reply and 1 more failure took the
    endpoint out although it had just answered."""
    def status(body):
        return 500 if body["seed"] >= 100 else None

    with LoopbackLLM(_answer, status_of=status) as a, LoopbackLLM(_answer) as other:
        b = OpenAIBackend(model="m", base_url=[a.base_url, other.base_url], max_retries=0, max_response_bytes=2000,
                          concurrency=1, sleep=lambda s: None)
        ep = b.endpoints.endpoints[0]
        b.endpoints.failure(ep)
        b.endpoints.failure(ep)
        assert ep.failures == 2
        b.endpoints.pick = lambda avoid=None: ep  # every request to the first endpoint
        assert isinstance(b.decide_many([_req(2)], return_exceptions=True)[0], ResponseTooLargeError)
        assert ep.failures == 0 and ep.down_until == 0.0
        b.decide_many([_req(100)], return_exceptions=True)  # one failure after the answer: 1 in a row, still in
        assert ep.failures == 1 and ep.trips == 0
        b.close(keep_failed=False)
