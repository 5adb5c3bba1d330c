"""The one boundary through which aumann calls a scenario's own code.

A scenario is user code: ``build_model``, ``step``, its baseline action, its groups, its baselines, the
factory behind a ``module:attribute`` spec. Every call of it goes through :func:`call` (or a
:class:`UserStep`, the picklable step function the runner, forks and replays use), which

* turns an exception raised there into a :class:`~aumann.errors.ScenarioCodeError` naming the scenario,
  the function and the step (``scenario 'x': step() at step 4 of 10 (model.steps = 4) raised ZeroDivisionError:
  ...``), with the original chained (``aumann --debug`` shows its traceback); aumann's own errors (an LLM budget, a
  typed feature error) pass through unchanged, as do ``KeyboardInterrupt`` and ``MemoryError``;
* turns ``sys.exit()`` inside user code into the same typed error (``aumann run sys:exit`` exited 0
  with no output);
* bounds a call by a timeout when one is set (``--step-timeout SECONDS`` / the ``step_timeout`` config key):
  :class:`~aumann.errors.StepTimeoutError` names the scenario, the step and the limit.

How the timeout is enforced, and its limits:

* **in the main thread** (the CLI, a process-pool or Ray worker running a task) by ``SIGALRM``
  (``signal.setitimer``): the signal interrupts the step wherever Python code runs and also interrupts
  blocking system calls (``time.sleep``, socket reads); a step stuck inside one long C call that does
  not return to the interpreter (one huge numpy operation) is interrupted when that call returns.
  An alarm set by the caller is restored afterwards (minus the time spent).
* **in any other thread** (fork threads of an LLM backend) by a watchdog thread that raises the
  timeout asynchronously in the stepping thread (``PyThreadState_SetAsyncExc``): it takes effect at the
  next Python bytecode, so a step blocked in C (``time.sleep``, a socket read without a timeout) is
  interrupted only once that call returns.
* Platforms without ``SIGALRM`` (Windows) use the watchdog in every thread.

The timeout is raised as an exception the step's own ``except Exception:`` cannot swallow; the model
it interrupted is left mid-step and is never used again (the run fails with the typed error). A
timeout does not change results, so it is not part of a run's config digest.
"""

from __future__ import annotations

import ctypes
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from aumann.checks import exception_message
from aumann.errors import AumannError, ScenarioCodeError, StepExpired, StepTimeoutError, TerminatedBySignal
from aumann.simulators.branching import PlacedStep

#: longest step timeout accepted (seconds; about 11.6 days)
MAX_STEP_TIMEOUT = 1e6


def _where(scenario: str, what: str, step: int | str | None) -> str:
    return f"scenario {scenario!r}: {what}" + (f" at step {step}" if step is not None else "")


def call(scenario: str, what: str, fn: Callable[..., Any], *args: Any, step: Any = None,
         timeout: float | None = None, error: type[Exception] = ScenarioCodeError, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, a scenario's own code, through the boundary (see the module docstring).

    Args:
        scenario: the scenario's name (or the spec it was loaded from), for messages.
        what: the function, as the message should name it (``"step()"``, ``"build_model()"``).
        step: the step, or a callable returning it (asked only when something went wrong): the step being taken,
            counted from 1 as :class:`~aumann.errors.ModelStepError` counts it (``4`` or ``"4 of 10"``).
        timeout: seconds the call may take (``None``: no limit).
        error: the error class raised for an exception (default :class:`ScenarioCodeError`).
    """
    try:
        with deadline(timeout):
            return fn(*args, **kwargs)
    except (AumannError, KeyboardInterrupt, MemoryError, TerminatedBySignal):
        raise
    except StepExpired:
        raise StepTimeoutError(f"{_where(scenario, what, _index(step))} ran longer than the step timeout of "
                               f"{timeout:g} s (--step-timeout / step_timeout) and was stopped") from None
    except SystemExit as exc:
        raise error(f"{_where(scenario, what, _index(step))} called sys.exit({exc.code!r}); scenario code must "
                    "return or raise, not exit the process") from exc
    except Exception as exc:
        raise error(f"{_where(scenario, what, _index(step))} raised {type(exc).__name__}: "
                    f"{exception_message(exc)}") from exc


def _index(step: Any) -> int | str | None:
    if callable(step):
        try:
            return step()
        except Exception:
            return None
    return step


@dataclass(frozen=True)
class UserStep(PlacedStep):
    """A scenario's step function through the boundary: ``UserStep(name, fn, timeout)(model)`` advances
    ``model`` one step with ``fn`` (``None``: the default step, ``model.step()`` or its DEVS simulator)
    and names the step in any error. Picklable when ``fn`` is (process pools, Ray).

    Errors count steps from 1, as :class:`~aumann.errors.ModelStepError` does: ``step 4 of 10`` is the fourth step of
    a run of ten (``position``, set by the runner with :meth:`at`), followed by the model's own counter
    (``model.steps = 4``) where it has one; a replay (a fork by replay, a checkpoint rebuilt from the factory) tells
    it too, counting the steps it replays (``step 3 of 5``). Outside a run the step is the steps the model had taken
    before it, plus one (read before the call: Mesa counts a step before running it, a plain model after, so the count
    after a failure was 3 for one model and 4 for another)."""

    scenario: str
    fn: Callable[[Any], None] | None = None
    timeout: float | None = None
    position: tuple[int, int] | None = None  # (k, n): this call takes step k (from 1) of a run of n, for messages

    def at(self, k: int, n: int) -> UserStep:
        """This step function, taking step ``k`` (from 1) of a run of ``n`` (what its errors say)."""
        return replace(self, position=(k, n))

    def __call__(self, model: Any) -> None:
        from aumann.simulators.branching import default_step

        before = steps_taken(model) if self.position is None else None
        call(self.scenario, "step()", self.fn or default_step, model,
             step=lambda: _step_label(self.position, before, model), timeout=self.timeout)


def _step_label(position: tuple[int, int] | None, before: int | None, model: Any) -> str | None:
    """``4 of 10 (model.steps = 4)``: the step being taken, counted from 1, and the model's own counter."""
    s = getattr(model, "steps", None)
    label = f" (model.steps = {s})" if isinstance(s, int) and not isinstance(s, bool) else ""
    if position is not None:
        return f"{position[0]} of {position[1]}{label}"
    if before is not None:
        return f"{before + 1}{label}"
    return None


def steps_taken(model: Any) -> int | None:
    """How many steps ``model`` has taken (aumann's record of its history, else Mesa's ``model.steps``)."""
    from aumann.simulators.branching import lineage

    lin = lineage(model)
    if lin is not None:
        return lin.steps()
    s = getattr(model, "steps", None)
    return int(s) if isinstance(s, int) and not isinstance(s, bool) else None


# ---------------------------------------------------------------------------------------------- timeouts
def check_timeout(value: Any, name: str = "step_timeout") -> float | None:
    """A step timeout: ``None`` or a finite number of seconds in (0, :data:`MAX_STEP_TIMEOUT`]."""
    from aumann.checks import as_float
    from aumann.errors import ConfigError

    if value is None:
        return None
    out = as_float(value, name, minimum=0, exclusive_minimum=True, maximum=MAX_STEP_TIMEOUT, error=ConfigError)
    if out < 1e-3:
        raise ConfigError(f"{name} must be at least 0.001 s (one millisecond); got {value!r}")
    return out


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`StepExpired` in the block's thread if it runs longer than ``seconds`` (``None``: no limit)."""
    if seconds is None or not math.isfinite(seconds):
        yield
        return
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        with _alarm(seconds):
            yield
    else:
        with _watchdog(seconds):
            yield


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def expire(_signum: int, _frame: Any) -> None:
        raise StepExpired()

    try:
        previous = signal.signal(signal.SIGALRM, expire)
    except ValueError:  # not the main thread after all (an embedding interpreter)
        with _watchdog(seconds):
            yield
        return
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds if not outer_delay else min(seconds, outer_delay))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_delay:  # the caller's alarm, minus the time spent here
            left = max(1e-6, outer_delay - (time.monotonic() - started))
            signal.setitimer(signal.ITIMER_REAL, left, outer_interval)


@contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    target = threading.get_ident()
    lock = threading.Lock()
    state = {"running": True, "fired": False}

    def fire() -> None:
        with lock:
            if state["running"]:
                state["fired"] = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), ctypes.py_object(StepExpired))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["running"] = False
            fired = state["fired"]
        timer.cancel()
        if fired:  # the exception may still be pending (the block ended first): clear it, raise it here
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), None)
    if fired:
        raise StepExpired()


__all__ = ["MAX_STEP_TIMEOUT", "UserStep", "call", "check_timeout", "deadline", "steps_taken"]
