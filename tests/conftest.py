"""Shared fixtures. Seeds arrive through fixtures that yield Generators; nothing seeds global state."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)
