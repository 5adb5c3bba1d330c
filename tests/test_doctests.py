"""The examples in aumann's docstrings run and give what they show.

The README's test command collects ``tests/`` only, so three docstring examples had gone wrong unseen (a
non-raw docstring that turned ``\\'`` into ``'``, a smooth max whose example rounded to the max itself, a
``+SKIP`` meant for three lines written on one). Each module's examples run here, as ``pytest
--doctest-modules`` would run them.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import aumann

_OPTIONAL = ("ray",)  # modules of an optional extra: their examples run where the extra is installed


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(aumann.__path__, "aumann.")
                  if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", _modules())
def test_the_docstring_examples_of_each_module_run(name):
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        if any(opt in str(exc) for opt in _OPTIONAL):
            pytest.skip(f"{name} needs an optional extra: {exc}")
        raise
    tests = [t for t in doctest.DocTestFinder(exclude_empty=True).find(module, name) if t.examples]
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring example(s) of {name} failed"
