"""Calling an intervention ``g(model)`` of a fork or a replay, and naming it when it raises.

An intervention is user code (a function forcing agents to a baseline action, a :func:`~aumann.simulators.for_agents`
object). An exception raised in it becomes an :class:`~aumann.errors.InterventionError` that names the
intervention, the fork or replay it was applied in and at which step, with the original chained; aumann's own
errors (an :class:`~aumann.errors.UnknownAgentError` of ``for_agents``, a scenario's
:class:`~aumann.errors.ScenarioCodeError`) and ``MemoryError`` pass through unchanged, as they do for a failing step.
``sys.exit()`` in an intervention is an :class:`~aumann.errors.InterventionError` too, as in every other user code
aumann calls (a signal's :class:`~aumann.errors.TerminatedBySignal` still ends the run), and so is one that returns a
generator, a coroutine or a lazy ``map``/``filter``: its body never ran.
"""

from __future__ import annotations

import functools
import inspect
import types
import warnings
from collections.abc import Callable
from typing import Any

from aumann.checks import exception_message
from aumann.errors import AumannError, AumannWarning, InterventionError, TerminatedBySignal


def intervention_name(g: Callable[..., Any]) -> str:
    """What a message calls ``g``: a function's qualified name (``freeze_top``, ``<lambda>``), the function of a
    ``functools.partial``, else the callable's class (``ForAgents object``). Never a repr with an address."""
    if isinstance(g, functools.partial):
        return intervention_name(g.func)
    name = getattr(g, "__qualname__", None)
    if isinstance(name, str) and name:
        return name
    return f"{type(g).__qualname__} object"


def model_step_label(model: Any) -> str:
    """`` (model.steps = 4)`` for a model that counts its steps, else ``""``."""
    s = getattr(model, "steps", None)
    return f" (model.steps = {s})" if isinstance(s, int) and not isinstance(s, bool) else ""


def apply_intervention(g: Callable[[Any], Any], model: Any, where: str, *, hint: str = "",
                       panel: Callable[[], Any] | None = None) -> None:
    """``g(model)``; an exception of ``g``'s own becomes an :class:`~aumann.errors.InterventionError`.

    Args:
        g: the intervention.
        model: the model it is applied to.
        where: the place, completing "intervention 'g' raised E ..." (``"when applied to a fork of Fragile ..."``).
        hint: a last sentence for the message (what to check).
        panel: returns the steps recorded before the failure (the error's ``panel``), asked only on failure.
    """
    try:
        made = g(model)
    except (AumannError, MemoryError, TerminatedBySignal):
        raise
    except (Exception, SystemExit) as exc:
        kept = panel() if panel is not None else None
        saved = ""
        if panel is not None:
            saved = (f"; the {kept.shape[0]} capture(s) recorded before it are in this error's .panel"
                     if kept is not None else "; nothing was recorded before it")
        # sys.exit() in user code ended the process with its status and no word of the intervention
        what = (f"called sys.exit({exc.code!r}) {where}: an intervention must return or raise, not end the process"
                if isinstance(exc, SystemExit) else
                f"raised {type(exc).__name__} {where}: {exception_message(exc)}")
        err = InterventionError(f"intervention {intervention_name(g)!r} {what}{saved}{'; ' + hint if hint else ''} "
                                "(the original traceback is chained above)")
        err.panel = kept
        raise err from exc
    if isinstance(made, _LAZY):
        _refuse_lazy(made, g, where, panel)


#: what calling a generator function, an ``async def`` or ``map``/``filter`` returns: nothing of it has run yet
_LAZY = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType, map, filter)


def _body_is_lazy(g: Callable[..., Any]) -> bool:
    """Whether calling ``g`` runs none of its body: a generator function or ``async def`` (through
    ``functools.partial``, ``functools.wraps`` wrappers and a callable object's ``__call__``)."""
    for f in (g, inspect.getattr_static(type(g), "__call__", None)):
        try:
            f = inspect.unwrap(f) if f is not None else None
        except ValueError:  # a __wrapped__ cycle
            pass
        if f is not None and (inspect.isgeneratorfunction(f) or inspect.iscoroutinefunction(f)
                              or inspect.isasyncgenfunction(f)):
            return True
    return False


def _refuse_lazy(made: Any, g: Callable[..., Any], where: str, panel: Callable[[], Any] | None) -> None:
    """An intervention that returned a generator, a coroutine or a lazy ``map``/``filter``: its body (or the function
    mapped) never ran, so the fork was the factual run, silently; an :class:`~aumann.errors.InterventionError`.
    A plain function that returned a generator or coroutine made elsewhere (``return (a.x for a in m.agents)`` after
    changing the model) did run: accepted before, with a right fork, it is warned of instead."""
    kind = {types.GeneratorType: "a generator", types.CoroutineType: "a coroutine",
            types.AsyncGeneratorType: "an async generator"}.get(type(made), f"a {type(made).__name__} object")
    if isinstance(made, types.GeneratorType | types.CoroutineType):
        made.close()  # (a coroutine never awaited warns when collected)
    if isinstance(made, types.GeneratorType | types.CoroutineType | types.AsyncGeneratorType) and not _body_is_lazy(g):
        warnings.warn(AumannWarning(
            f"intervention {intervention_name(g)!r} returned {kind} {where}: its own body ran, but nothing of the "
            f"generator itself runs (aumann does not iterate or await what an intervention returns); if it was meant "
            "to change the model, change the model in g itself and return None"), stacklevel=4)
        return
    kept = panel() if panel is not None else None
    err = InterventionError(
        f"intervention {intervention_name(g)!r} returned {kind} {where}: its body never ran, so it changed nothing "
        "(calling a function that holds yield, or an async def, only makes that object; map() and filter() call "
        "nothing until iterated); change the model in g itself, e.g. in a for loop, and return None")
    err.panel = kept
    raise err


__all__ = ["apply_intervention", "intervention_name", "model_step_label"]
