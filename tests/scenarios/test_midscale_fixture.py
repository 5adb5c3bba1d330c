"""MidScale-Social's fixture: the committed file is the offline generator's output, and a backend
(here an OfflineBackend standing in for an LLM) can supply the fixture instead."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aumann.errors import ConfigError
from aumann.scenarios.midscale_social.fixture import FIXTURE_PATH, generate_fixture, load_fixture
from aumann.simulators.llm import OfflineBackend
from tests.tiny import tiny_config


def test_committed_fixture_is_the_offline_generators_output():
    data = json.loads(FIXTURE_PATH.read_text())
    assert data == json.loads(json.dumps(generate_fixture(0)))
    assert "offline" in data["generator"] and "not recorded from an LLM" in data["generator"]


def test_bad_fixture_is_a_config_error(tmp_path):
    p = tmp_path / "f.json"
    p.write_text(json.dumps({"personas": [], "stances": [], "prototypes": []}))
    with pytest.raises(ConfigError, match="personas"):
        load_fixture(p)


def test_a_backend_supplies_the_fixture():
    sc, cfg = tiny_config("midscale-social", steps=3)
    seen = []

    def policy(ctx, schema, rng):
        seen.append((ctx["kind"], schema.__name__))
        return generate_fixture(1)

    model = sc.build_model(cfg, np.random.default_rng(0), OfflineBackend(policy))
    assert seen == [("fixture", "FixtureSpec")]
    assert model.fixture_generator.startswith("LLM backend")
    offline = sc.build_model(cfg, np.random.default_rng(0), None)
    assert not np.array_equal(model.table.post_logit, offline.table.post_logit)
