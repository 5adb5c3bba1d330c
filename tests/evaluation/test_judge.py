"""The LLM-as-judge row: trace, candidates and shortlist, the heuristic stand-in, reply cleaning, the
OpenAI-compatible path with its response cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aumann.errors import MethodError
from aumann.evaluation.judge import (
    JudgeVerdict,
    ask_judge,
    heuristic_backend,
    heuristic_judge,
    judge_messages,
    judge_trace,
)
from aumann.simulators.llm import OfflineBackend, OpenAIBackend, ResponseCache
from tests.simulators.llm_fakes import Script, client_for

FEATS = ("belief", "posting")


def _trace(n=6, k=3, max_candidates=50, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.uniform(0, 1, (n, 2))
    z0 = np.zeros((n, 2))
    return judge_trace(FEATS, z * 0.5, z, z0, [0.1, 0.3, 0.2], 2, k, max_candidates=max_candidates,
                       agent_ids=np.arange(100, 100 + n), indicator="risk"), z, z0


def test_small_populations_show_every_agent_and_the_prompt_carries_the_trace():
    trace, z, _ = _trace()
    assert [r["id"] for r in trace["candidates"]] == list(range(100, 106)) and not trace["shortlist"]
    assert trace["rule"] == "all 6 agents"
    msgs = judge_messages(trace)
    user = msgs[-1]["content"]
    assert "t=1: 0.3" in user and "id 103:" in user and '"agents"' in user and "exactly 3" in user
    assert json.dumps(round(float(z[3, 0]), 6)) in user


def test_large_populations_get_the_stated_shortlist_of_largest_footprints():
    trace, z, z0 = _trace(n=80, k=5, max_candidates=20)
    assert trace["shortlist"] and len(trace["candidates"]) == 20 and "shortlist of the 20 of 80" in trace["rule"]
    spread = z.std(axis=0)
    foot = (np.abs(z - z0) / spread).sum(axis=1)
    assert {r["position"] for r in trace["candidates"]} == set(np.argsort(-foot)[:20].tolist())


def test_the_heuristic_stand_in_is_deterministic_and_ranks_by_normalised_footprint():
    trace, z, z0 = _trace()
    out = heuristic_judge(trace)
    d = z - z0
    expected = np.argsort(-(d / np.abs(d).max(axis=0)).sum(axis=1), kind="stable")[:3] + 100
    assert out["agents"] == expected.tolist()
    res = ask_judge(trace)  # default judge: the stand-in, as an OfflineBackend named "heuristic"
    assert res.judge == "heuristic" and res.invalid == 0 and res.filled == 0
    assert (res.ranking + 100).tolist() == out["agents"]
    assert ask_judge(trace).ranking.tolist() == res.ranking.tolist()
    assert isinstance(heuristic_backend(), OfflineBackend)


def test_a_bad_reply_is_cleaned_counted_and_completed_never_trusted():
    trace, _, _ = _trace()
    liar = OfflineBackend(lambda ctx, schema, rng: {"agents": [104, 104, 999, "x", 101]})
    res = ask_judge(trace, liar)
    assert res.ranking.tolist() == [4, 1, 0]  # 104, 101, then completed from the candidate order
    assert (res.invalid, res.filled) == (2, 1)  # the repeat and the unknown id; "x" is not an id at all
    assert res.summary()["ranking"] == [4, 1, 0]


def test_bad_k_is_a_typed_error():
    with pytest.raises(MethodError):
        judge_trace(FEATS, None, np.ones((3, 2)), np.zeros((3, 2)), [1.0], 0, 4)
    with pytest.raises(MethodError):
        judge_trace(FEATS, None, np.ones((30, 2)), np.zeros((30, 2)), [1.0], 0, 5, max_candidates=3)


def test_the_llm_judge_goes_through_the_openai_backend_and_its_cache(tmp_path):
    trace, _, _ = _trace()
    script = Script('{"agents": [105, 100, 102]}')
    cache = ResponseCache(tmp_path / "judge.sqlite")
    llm = OpenAIBackend(model="judge-model", client=client_for(script), cache=cache, sleep=lambda s: None)
    first = ask_judge(trace, llm, seed=7)
    assert first.ranking.tolist() == [5, 0, 2] and first.judge == "openai:judge-model"
    body = script.bodies[0]
    assert body["seed"] == 7 and "most responsible" in body["messages"][1]["content"]
    again = ask_judge(trace, llm, seed=7)  # served from the response cache: no second request
    assert again.ranking.tolist() == [5, 0, 2] and script.calls == 1 and llm.usage.cache_hits == 1


def test_verdict_schema_drops_unusable_entries():
    from pydantic import ValidationError

    assert JudgeVerdict.model_validate({"agents": [1, "2", None, "x"]}).agents == [1, 2]
    # int() made agent 3 of 3.7, agent 1 of true and a 309-digit id of 1e308: garbage turned into a ranking
    assert JudgeVerdict.model_validate({"agents": [3.7, True, 1e308, "2.5", " 4 ", 6.0, 5]}).agents == [4, 6, 5]
    for non_answer in ({"agents": "3"}, {}, {"agents": []}, {"properties": {"agents": {}}}):
        with pytest.raises(ValidationError):  # a non-answer is not a verdict (no default it could satisfy)
            JudgeVerdict.model_validate(non_answer)


def test_integer_ids_past_2_53_are_named_exactly():
    """A JSON integer (or its digits) is an exact id up to uint64: every id past 2**53 was dropped, so a judge's reply
    naming only such agents was refused, and none of them could ever be named. Floats stay capped at 2**53."""
    b = 2**53
    got = JudgeVerdict.model_validate({"agents": [b + 1, f" {b + 3} ", 2**64 - 1, -(2**63), 2**64, float(b + 2),
                                                  "1" * 21]}).agents
    assert got == [b + 1, b + 3, 2**64 - 1, -(2**63)]  # 2**64, a float past 2**53 and 21 digits name no panel id
    ids = np.array([b + 1, b + 3, b + 5, b + 7], dtype=np.int64)
    trace = judge_trace(FEATS, None, np.eye(4)[:, :2], np.zeros((4, 2)), [0.0, 1.0], 1, 2, agent_ids=ids)
    res = ask_judge(trace, OfflineBackend(lambda ctx, schema, rng: {"agents": [b + 7, b + 5]}, name="fixed"))
    assert res.ranking.tolist() == [3, 2] and res.invalid == 0 and res.filled == 0
    assert res.reply == [b + 7, b + 5]


def _seven(ctx, schema, rng):
    return {"agents": [7]}


def test_a_dry_runs_fallback_answers_the_judge_with_the_stand_in_and_everything_else_as_before():
    import pickle

    from aumann.evaluation.judge import JudgeFallback, with_judge_fallback

    class Decision(JudgeVerdict):
        pass

    inner = OfflineBackend(_seven, name="scenario-policy")
    backend = OpenAIBackend(model="m", api_key="k", dry_run=True, fallback=inner)
    assert with_judge_fallback(with_judge_fallback(backend)) is backend
    assert isinstance(backend.fallback, JudgeFallback) and backend.fallback.inner is inner  # wrapped once
    trace, _, _ = _trace(k=2)
    res = ask_judge(trace, backend, seed=3)
    assert res.reply == heuristic_judge(trace)["agents"] and res.filled == 0  # the stand-in answered
    assert backend.estimate().calls == 1  # and the judge request is counted as planned
    other = backend.fallback.decide([{"role": "user", "content": "x"}], Decision, context={})
    assert other.agents == [7]  # other schemas: the scenario's policy
    again = pickle.loads(pickle.dumps(backend.fallback))  # worker processes get it too
    assert again.decide([{"role": "user", "content": "x"}], JudgeVerdict, context=trace).agents == res.reply
    assert again.decide([{"role": "user", "content": "x"}], Decision, context={}).agents == [7]


@pytest.mark.parametrize("ids", [["fish-1", "fish-11", "fish-2", "plankton-7", "plankton-8", "plankton-9"],
                                 ["(3, 0)", "(3, 1)", "(4, 0)", "(5, 0)", "(6, 0)", "(7, 0)"]])
def test_a_judge_names_agents_with_text_ids(ids):
    # A Mesa model's own text ids (or reused_ids="new_agent" pairs, labelled "(3, 0)"): the verdict schema kept
    # integers only, so every id the judge named was dropped, the empty list failed validation and `aumann run`
    # skipped the llm_judge row ("PolicyError: offline policy 'heuristic_judge' returned {'agents': ['plankton-12',
    # ...]} which is not a valid JudgeVerdict: List should have at least 1 item after validation, not 0")
    rng = np.random.default_rng(0)
    z = rng.uniform(0, 1, (6, 2))
    trace = judge_trace(FEATS, None, z, np.zeros((6, 2)), [0.1, 0.3], 1, 3, agent_ids=np.asarray(ids))
    res = ask_judge(trace)
    assert res.invalid == 0 and res.filled == 0
    assert [ids[p] for p in res.ranking] == heuristic_judge(trace)["agents"] == res.reply

    from aumann.evaluation.judge import JudgeTextVerdict, verdict_schema

    assert verdict_schema(ids) is JudgeTextVerdict and verdict_schema(np.arange(3)) is JudgeVerdict
    # text, and integer-looking text as integers, as JudgeVerdict reads them; blank or overlong text is dropped
    got = JudgeTextVerdict.model_validate({"agents": [" fish-2 ", "3", None, "", "x" * 65, 4.0, True]}).agents
    assert got == ["fish-2", 3, 4]
