"""The offline policy backend: validated outputs, determinism without global state, typed errors."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from pydantic import BaseModel, Field

from aumann.simulators.llm import DecisionBackend, OfflineBackend, PolicyError, parse_json_object


class Post(BaseModel):
    post: bool
    intensity: float = Field(ge=0, le=1)


MSGS = [{"role": "user", "content": "Post?"}]


def noisy_policy(ctx, schema, rng):
    u = float(rng.random())
    return schema(post=u < ctx["p"], intensity=u)


def test_returns_schema_instances_and_counts():
    b = OfflineBackend(noisy_policy)
    out = b.decide(MSGS, Post, context={"p": 0.5}, seed=1)
    assert isinstance(out, Post) and isinstance(b, DecisionBackend)
    assert out.intensity == np.random.default_rng(1).random()
    assert b.usage.calls == 0 and b.usage.decisions == 1  # offline: decisions counted, nothing sent
    dict_out = OfflineBackend(lambda c, s, r: {"post": True, "intensity": 0.2}).decide(MSGS, Post)
    assert dict_out == Post(post=True, intensity=0.2)


def test_deterministic_without_seed_from_messages_and_context_not_global_state():
    b = OfflineBackend(noisy_policy)
    a1 = b.decide(MSGS, Post, context={"p": 0.5, "agent": 3})
    np.random.default_rng(0).random(100)  # unrelated draws change nothing
    a2 = OfflineBackend(noisy_policy).decide(MSGS, Post, context={"agent": 3, "p": 0.5})  # key order
    other = b.decide(MSGS, Post, context={"p": 0.5, "agent": 4})
    assert a1 == a2 and a1 != other
    with_numpy = b.decide(MSGS, Post, context={"p": np.float64(0.5), "agent": np.int64(3)})
    assert with_numpy == a1


def test_policy_output_that_fails_the_schema_is_a_typed_error():
    b = OfflineBackend(lambda c, s, r: {"post": True, "intensity": 3.0})
    with pytest.raises(PolicyError, match=r"not a valid Post.*fields: \['post', 'intensity'\]"):
        b.decide(MSGS, Post)
    assert b.usage.failures == 1
    with pytest.raises(PolicyError, match="callable policy"):
        OfflineBackend("always post")


def test_offline_backend_survives_deepcopy_and_pickle():
    b = OfflineBackend(noisy_policy)
    assert copy.deepcopy(b) is b
    clone = pickle.loads(pickle.dumps(b))
    ctx = {"p": 0.5}
    assert clone.decide(MSGS, Post, context=ctx, seed=3) == b.decide(MSGS, Post, context=ctx, seed=3)
    assert b.decide_many([{"messages": MSGS, "schema": Post, "context": ctx, "seed": s} for s in (1, 2)]) == [
        b.decide(MSGS, Post, context=ctx, seed=1), b.decide(MSGS, Post, context=ctx, seed=2)]


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": 1}', {"a": 1}), ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
    ('```\n{"a": 1}\n```', {"a": 1}), ('Answer: {"a": {"b": 2}} done', {"a": {"b": 2}}),
])
def test_parse_json_object(text, expected):
    assert parse_json_object(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "{'a': 1}", None, "{broken"])
def test_parse_json_object_rejects(text):
    with pytest.raises(ValueError):
        parse_json_object(text)


def test_request_seed_is_stable_and_distinct():
    from aumann.simulators.llm import request_seed

    seeds = {request_seed(7, agent, step) for agent in range(20) for step in range(20)}
    assert len(seeds) == 400 and all(0 <= s < 2**31 for s in seeds)
    assert request_seed(7, 3, 10) == request_seed(7, 3, 10) != request_seed(8, 3, 10)


def test_usage_reset_returns_the_counts():
    b = OfflineBackend(noisy_policy)
    b.decide(MSGS, Post, context={"p": 0.1})
    before = b.usage.reset()
    assert before["decisions"] == 1 and before["calls"] == 0 and b.usage.decisions == 0
