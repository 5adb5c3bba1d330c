"""Shared fixtures. Seeds arrive through fixtures that yield Generators; nothing seeds global state."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz", action="store", type=float, default=None, metavar="SECONDS",
                     help="run the fuzz tests (tests/fuzz) for about SECONDS in total, with fresh random inputs, "
                          "instead of their fixed, bounded CI examples")
