"""The fuzz harness: hypothesis targets that must end in "a typed error or a correct result, never a traceback,
never a hang, bounded memory".

* :func:`fuzz_target` turns ``fn(**drawn)`` into a pytest test. In CI (no ``--fuzz``) it runs a fixed number of
  examples, derandomized (the same inputs every run, deterministic, no example database); with
  ``pytest tests/fuzz --fuzz SECONDS`` each target gets an equal share of SECONDS and keeps drawing fresh random
  inputs (batches of examples) until its share is spent.
* :func:`guarded` runs one example under a wall-clock limit (a hang is a failure naming the limit, via the
  same SIGALRM/watchdog mechanism as ``--step-timeout``) and a memory limit (the peak of traced allocations;
  numpy reports its buffers to tracemalloc), so a decompression bomb or an unbounded loop fails the test
  instead of the machine.
* :func:`typed_or_result` calls the target: an :class:`aumann.errors.AumannError` with a message is the typed
  outcome; any other exception propagates (a traceback the user would have seen) and fails the example.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, given, settings

from aumann.errors import AumannError, StepExpired
from aumann.simulators.boundary import deadline

#: examples per target in CI (deterministic)
CI_EXAMPLES = 25


@contextmanager
def guarded(seconds: float = 30.0, memory_mib: float = 512.0) -> Iterator[None]:
    """One example: fails on a hang (longer than ``seconds``) or a traced-memory peak above ``memory_mib``."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        with deadline(seconds):
            yield
    except StepExpired:
        raise AssertionError(f"hang: the example ran longer than {seconds:g} s") from None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        if started:
            tracemalloc.stop()
    assert peak <= memory_mib * 2**20, f"memory: peak {peak / 2**20:.0f} MiB above the {memory_mib:g} MiB bound"


def typed_or_result(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, AumannError | None]:
    """``(result, None)`` or ``(None, the typed error)``; anything else propagates and fails the example."""
    try:
        return fn(*args, **kwargs), None
    except AumannError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        return None, exc


def fuzz_target(examples: int = CI_EXAMPLES, seconds: float = 30.0, memory_mib: float = 512.0,
                **strategies: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorate ``fn(**drawn)`` (drawn from ``strategies``) into a pytest fuzz test (see the module docstring)."""

    def deco(fn: Callable[..., None]) -> Callable[..., None]:
        def body(**drawn: Any) -> None:
            with guarded(seconds, memory_mib):
                fn(**drawn)

        common = {"deadline": None, "database": None, "suppress_health_check": list(HealthCheck),
                  "print_blob": True}

        def test(fuzz_budget: float | None) -> None:
            if fuzz_budget is None:
                settings(max_examples=examples, derandomize=True, **common)(given(**strategies)(body))()
                return
            stop = time.monotonic() + fuzz_budget
            rounds = 0
            while time.monotonic() < stop or rounds == 0:
                settings(max_examples=max(examples, 50), derandomize=False, **common)(given(**strategies)(body))()
                rounds += 1

        test.__name__, test.__qualname__, test.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        test.__module__ = fn.__module__
        test.fuzz = True
        return test

    return deco


def scratch_dir() -> Any:
    """A fresh temporary directory for one example (removed afterwards)."""
    import tempfile

    return tempfile.TemporaryDirectory(prefix="aumann-fuzz-", dir=os.environ.get("AUMANN_FUZZ_TMP"))


__all__ = ["CI_EXAMPLES", "fuzz_target", "guarded", "scratch_dir", "typed_or_result"]
