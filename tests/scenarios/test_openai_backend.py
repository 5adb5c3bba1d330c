"""SocialLLM through the OpenAI-compatible backend over an httpx MockTransport.

The mock server decides from the prompt text only (post preference, beliefs); an OfflineBackend
applies the same rule to the structured context. Identical panels show that the prompts carry the
information the decisions need and that replies are parsed and validated; a replay from the
response cache then reproduces the run with zero requests.
"""

from __future__ import annotations

import json
import re

import httpx

from aumann.simulators.llm import OfflineBackend, OpenAIBackend, ResponseCache
from tests.tiny import tiny_config


def _num(pattern: str, text: str) -> float:
    return float(re.search(pattern, text).group(1))


def _rule(post_pref: float | None, inter_pref: float | None, belief: float, post_belief: float | None) -> dict:
    if post_pref is not None:
        return {"post": post_pref >= 0.55}
    if inter_pref < 0.45:
        return {"interact": False, "action": None}
    return {"interact": True, "action": "like" if abs(belief - post_belief) < 0.3 else "dislike"}


def _server(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    belief = _num(r"Your current belief is (-?\d+\.\d+)", user)
    if "post preference" in user:
        reply = _rule(_num(r"post preference is (-?\d+\.\d+)", user), None, belief, None)
    else:
        reply = _rule(None, _num(r"interaction preference is (-?\d+\.\d+)", user), belief,
                      _num(r"expressing the belief (-?\d+\.\d+)", user))
    content = "```json\n" + json.dumps(reply) + "\n```"  # fenced, as chat models often reply
    return httpx.Response(200, json={
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


def _policy(ctx, schema, rng):
    r2 = lambda x: None if x is None else round(float(x), 2)  # noqa: E731 - the prompt shows 2 decimals
    if ctx["kind"] == "post":
        return _rule(r2(ctx["post_preference"]), None, r2(ctx["belief"]), None)
    return _rule(None, r2(ctx["interaction_preference"]), r2(ctx["belief"]), r2(ctx["post_belief"]))


def _client(handler):
    import openai

    return openai.OpenAI(api_key="sk-test", base_url="http://llm.test/v1",
                         http_client=httpx.Client(transport=httpx.MockTransport(handler)))


def test_openai_backend_makes_the_recorded_decisions(tmp_path):
    sc, cfg = tiny_config("social-llm", agents=6, steps=3)
    offline = sc.simulate(cfg, rng=4, backend=OfflineBackend(_policy)).panel
    calls = []

    def handler(req):
        calls.append(req)
        return _server(req)

    cache = ResponseCache(tmp_path / "llm.sqlite")
    llm = OpenAIBackend(model="m", client=_client(handler), cache=cache, sleep=lambda s: None)
    online = sc.simulate(cfg, rng=4, backend=llm).panel
    assert offline.equals(online)
    assert len(calls) > 0 and llm.usage.decisions == len(calls)
    assert offline.values[:, :, 1].sum() > 0  # somebody posted: the decisions were exercised

    def down(req):
        raise AssertionError("replay must not send requests")

    replay = OpenAIBackend(model="m", client=_client(down), cache=ResponseCache(tmp_path / "llm.sqlite", mode="replay"))
    assert sc.simulate(cfg, rng=4, backend=replay).panel.equals(online)
