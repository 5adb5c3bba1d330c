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


@pytest.fixture(autouse=True)
def _secrets_registered_by_one_test_stay_in_it():
    """The LLM backends register their keys process-wide (what every manifest, message and log line is redacted
    of): a key one test's backend registered redacted the manifest of a later test on the same worker (a recorded
    reason 'indicator …' read 'i*** …' in one CI run). Each test starts with the registry it found."""
    from aumann.simulators.llm import redaction

    before = set(redaction._registered)
    yield
    redaction._registered.intersection_update(before)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz", action="store", type=float, default=None, metavar="SECONDS",
                     help="run the fuzz tests (tests/fuzz) for about SECONDS in total, with fresh random inputs, "
                          "instead of their fixed, bounded CI examples")


def _shares_a_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses one of this suite's module-, class- or session-scoped fixtures (set up once per
    worker that runs a test of it: a module's study run, a Ray cluster, a built wheel)."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        d = defs[-1]
        if d.scope != "function" and str(getattr(d.func, "__module__", "")).startswith("tests"):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n``, ``--dist loadgroup``: the ``addopts`` of pyproject.toml), keep the tests that
    share one expensive thing on one worker: every test of the real LLM server (a session fixture: one llama.cpp
    process, not one per worker), and a module's tests that share a module-scoped fixture or are Ray tests (a
    module's study run or cluster is set up once, not on each worker). Everything else is spread test by test."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if "real_llm_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("real-llm"))
        elif item.get_closest_marker("ray") is not None or _shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.fixture(autouse=True)
def _output_folders_a_test_locked_are_free_after_it():
    """Tests that drive a command in-process (``args.func(args)``, as tests/cli_run.py does) skip
    :func:`aumann.cli.main`, which lets go of the output folders the command locked (:mod:`aumann.io.lock`):
    without this the worker kept each lock, and its ``.aumann-lock`` file in the folder, until it exited."""
    yield
    import sys

    lock = sys.modules.get("aumann.io.lock")
    if lock is not None:
        lock.release_output_locks()
