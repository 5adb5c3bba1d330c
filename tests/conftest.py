"""Shared fixtures. Seeds arrive through fixtures that yield Generators; nothing seeds global state.

Hypothesis: every property test draws the same examples run to run (``derandomize``), so a red
suite is a regression in the code, never a new random draw. ``AUMANN_HYPOTHESIS_EXPLORE=1`` draws
fresh examples instead (and remembers failures in ``.hypothesis/``): do that when hunting bugs.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("fixed", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile("explore" if os.environ.get("AUMANN_HYPOTHESIS_EXPLORE") else "fixed")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz", action="store", type=float, default=None, metavar="SECONDS",
                     help="run the fuzz tests (tests/fuzz) for about SECONDS in total, with fresh random inputs, "
                          "instead of their fixed, bounded CI examples")
