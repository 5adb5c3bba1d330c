"""The resume digest (:func:`aumann.studies.faithfulness.config_digest`) holds exactly what can change a run's outputs:
the LLM request settings count with an LLM backend and not under the offline policy, which sends no request."""

from __future__ import annotations

import pytest

from aumann.simulators.llm.settings import REQUEST_KEYS
from aumann.studies.faithfulness import config_digest
from tests.tiny import tiny_config

#: a value other than the default for each request key
GIVEN = {"temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "seed": 3, "system_prompt": "be brief"}
LLM = "openai:m@http://127.0.0.1:8000/v1"


def test_every_request_key_is_exercised():
    assert set(GIVEN) == set(REQUEST_KEYS)


@pytest.mark.parametrize("key", sorted(GIVEN))
def test_llm_request_settings_do_not_change_an_offline_digest(key):
    """`aumann run midscale-social --temperature 0.7` into a run directory of the same run without it computed every
    run afresh (and removed the finished ones): the digest hashed llm.temperature, which the offline policy never
    reads. Offline it is now hashed at its default; with an LLM backend (replay included: it is part of the cache
    key) it still counts."""
    sc, plain = tiny_config("midscale-social")
    _, given = tiny_config("midscale-social", llm={key: GIVEN[key]})
    assert getattr(given.llm, key) == GIVEN[key]
    assert config_digest(sc, given, "offline") == config_digest(sc, plain, "offline")
    assert config_digest(sc, given, LLM) != config_digest(sc, plain, LLM)


def test_what_an_offline_run_computes_still_counts():
    """Only the request settings are left out: llm.max_invalid_rate (read offline), the backend and the rest of the
    config still change the digest."""
    sc, plain = tiny_config("midscale-social")
    _, rate = tiny_config("midscale-social", llm={"max_invalid_rate": 0.5})
    _, steps = tiny_config("midscale-social", steps=5)
    base = config_digest(sc, plain, "offline")
    assert config_digest(sc, rate, "offline") != base and config_digest(sc, steps, "offline") != base
    assert config_digest(sc, plain, LLM) != base
