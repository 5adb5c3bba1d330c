"""Fixtures of the scenario tests (small configs live in :mod:`tests.tiny`)."""

from __future__ import annotations

import pytest

from aumann import scenarios


@pytest.fixture(params=scenarios.names())
def scenario_name(request) -> str:
    return request.param
