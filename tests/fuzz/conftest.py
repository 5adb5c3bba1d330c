"""Fuzz tests: bounded and deterministic in CI; ``pytest tests/fuzz --fuzz SECONDS`` runs them for SECONDS in total
with fresh random inputs (the option is registered in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: the budget is shared by the tests that run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    fuzz = [i for i in items if getattr(getattr(i, "function", None), "fuzz", False)]
    total = config.getoption("--fuzz")
    share = None if total is None else max(1.0, float(total) / max(1, len(fuzz)))
    for item in fuzz:
        item.fuzz_share = share
        if share is not None:  # a long run must not be cut short by the suite's per-test timeout
            item.add_marker(pytest.mark.timeout(share * 2 + 600))


@pytest.fixture
def fuzz_budget(request: pytest.FixtureRequest) -> float | None:
    """Seconds this fuzz test may spend (``None``: the CI examples only)."""
    return getattr(request.node, "fuzz_share", None)
