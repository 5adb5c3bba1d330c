"""EconAgent's LLM interface: JSON parsing (never eval), 0.02-grid rounding, prompts, memory, fallback."""

from __future__ import annotations

import json

import httpx
import pytest

from aumann.scenarios.econagent.model import EconModel
from aumann.scenarios.econagent.prompts import (
    FALLBACK,
    DecisionParseError,
    EconDecision,
    grid_index,
    parse_decision,
    snap_to_grid,
)


def test_one_decision_parsed_from_json_and_rounded_not_truncated():
    d = parse_decision('{"work": 0.94, "consumption": 0.58, "investment": 0.3}')
    assert (d.work, d.consumption, d.investment) == (0.94, 0.58, 0.3)
    # the original: int(0.58 / 0.02) = 28 → 0.56 and int(0.94 / 0.02) = 46 → 0.92; we round
    assert int(0.58 / 0.02) == 28 and grid_index(d.consumption) == 29
    assert int(0.94 / 0.02) == 46 and grid_index(d.work) == 47
    assert snap_to_grid(0.581) == 0.58 and snap_to_grid(0.599) == 0.6 and snap_to_grid(1.0) == 1.0
    fenced = parse_decision('Sure!\n```json\n{"work": 1, "consumption": 0.333, "investment": 0}\n```')
    assert (fenced.work, fenced.consumption, fenced.investment) == (1.0, 0.34, 0.0)


def test_malformed_replies_rejected_without_eval(tmp_path):
    marker = tmp_path / "evaluated"
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    with pytest.raises(DecisionParseError, match="no JSON object"):
        parse_decision(payload)
    assert not marker.exists()
    # a Python dict literal is what the original's eval accepted; JSON does not
    with pytest.raises(DecisionParseError):
        parse_decision("{'work': 1, 'consumption': 0.5, 'investment': 0.2}")
    bad = ['{"work": 1.2, "consumption": 0.5, "investment": 0}', '{"work": 1, "consumption": 0.5}',
           '{"work": true, "consumption": 0.5, "investment": 0}', '{"work": NaN, "consumption": 0.5, "investment": 0}',
           '{"work": "0.5", "consumption": 0.5, "investment": 0}', "[0.5, 0.5]"]
    for text in bad:
        with pytest.raises(DecisionParseError):
            parse_decision(text)
    with pytest.raises(DecisionParseError, match="string"):
        parse_decision(None)  # type: ignore[arg-type]


class _Server:
    """An OpenAI-compatible mock: decisions as JSON, reflections as {"text": ...}; records requests."""

    def __init__(self, decision: str = '{"work": 0.5, "consumption": 0.58, "investment": 0.2}') -> None:
        self.decision = decision
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        last = body["messages"][-1]["content"]
        content = json.dumps({"text": "Prices fell; I keep working."}) if last.startswith("Given the previous") \
            else self.decision
        return httpx.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def _backend(server: _Server, **kw):
    import openai

    from aumann.simulators.llm import OpenAIBackend

    client = openai.OpenAI(api_key="test", base_url="http://llm.test/v1",
                           http_client=httpx.Client(transport=httpx.MockTransport(server)))
    return OpenAIBackend(model="m", client=client, sleep=lambda s: None, schema_in_prompt=False, **kw)


def test_llm_households_prompt_memory_and_reflection():
    server = _Server()
    model = EconModel(3, backend=_backend(server), rng=1)
    for _ in range(4):
        model.step()
    decisions = [b for b in server.bodies if not b["messages"][-1]["content"].startswith("Given the previous")]
    reflections = [b for b in server.bodies if b["messages"][-1]["content"].startswith("Given the previous")]
    assert len(decisions) == 4 * 3 and len(reflections) == 3  # one reflection per household after month 3
    first = decisions[0]["messages"][-1]["content"]
    for needle in ("New York City", "2001.01", "taxed", "redistributed evenly", "price of essential goods",
                   "savings account balance", "Interest rates", "'work'", "'consumption'", "'investment'",
                   "$0.00 – $808.33: 10%"):
        assert needle in first, needle
    # month 1: [u_1]; month 2: [u_1, a_1, u_2]; month 4 (t % 3 == 0): [u_3, a_3, refl_q, refl_a, u_4]
    assert len(decisions[0]["messages"]) == 1 and len(decisions[3]["messages"]) == 3
    month4 = decisions[9]["messages"]
    assert len(month4) == 5 and month4[3] == {"role": "assistant", "content": "Prices fell; I keep working."}
    assert month4[2]["content"].startswith("Given the previous quarter")
    assert month4[0]["content"].startswith("You're") and "2001.03" in month4[0]["content"]
    for a in model.households:
        assert a.consumption_rate == 0.58 and a.investment_rate == 0.2  # rounded by the schema, not truncated
    assert model.llm_errors == 0


def test_invalid_llm_reply_falls_back_and_is_counted():
    server = _Server(decision="I would rather not say.")
    model = EconModel(2, backend=_backend(server, max_retries=1), rng=2)
    model.step()
    assert model.llm_errors == 2
    assert all(a.decision == FALLBACK for a in model.households)
    assert all(a.consumption_rate == 0.5 and a.labor == 168.0 for a in model.households)  # work = 1


def test_schema_is_the_json_contract():
    schema = EconDecision.model_json_schema()
    assert set(schema["required"]) == {"work", "consumption", "investment"}
    for key in ("work", "consumption", "investment"):
        assert schema["properties"][key]["minimum"] == 0 and schema["properties"][key]["maximum"] == 1


def test_second_reflection_sees_the_first():
    server = _Server()
    model = EconModel(2, backend=_backend(server), rng=4)
    for _ in range(6):
        model.step()
    refl = [b["messages"] for b in server.bodies if b["messages"][-1]["content"].startswith("Given the previous")]
    assert len(refl) == 4  # after months 3 and 6, two households each
    assert len(refl[2]) == 8  # dialog4ref (maxlen 7) + the request
    assert any(m["content"] == "Prices fell; I keep working." for m in refl[2])
