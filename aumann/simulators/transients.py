"""Agents no capture sees (born and removed within one step, or removed in the first step): counted instead.

A recorder captures the agents present after each step. An agent that the model creates and removes inside one
step (a lamb eaten by a wolf in the step it was born, an offspring that dies at once, a transient trader), or one
there from the start that the first step removes before any capture, is present at no capture: it has no row
and no end-of-step state, and without a count the panel would lose it silently.

While a recorded step runs, :func:`watch_step` routes the recorded model's own ``register_agent`` and
``deregister_agent`` (Mesa 3 sends every ``Agent.__init__`` and ``Agent.remove`` through them, in 3.3 and 3.5
alike) through a counter, by putting them into that one model instance's ``__dict__``; both are restored when
the step ends, raised or not, so nothing outside the step (captures, observers, forks, copies, pickles) sees the
hook and no class is changed. The counter holds weak references only: a removed agent dies with its last
reference, as unwatched. A model without these methods (not a Mesa model), or without an instance ``__dict__``,
is stepped unwatched.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_HOOKS = ("register_agent", "deregister_agent")
_MISSING = object()


class StepWatch:
    """The agents registered during one step that were deregistered again before it ended (with ``unseen=True``, a
    step before any capture, also the agents already there that it removed), by class name.

    Only weak references are held: a removed agent dies with its last reference as it would unwatched (Mesa's
    ``AgentSet.do``/``shuffle_do`` step every agent of their snapshot whose object is still alive, so holding one
    would make it act after its removal). ``keep(agent)`` says whether an agent of its class is counted (asked once
    per class and step: what a recorder records does not change within a step). Agents that take no weak reference
    (Mesa's all do) are not followed.
    """

    __slots__ = ("_born", "_counted", "_deregister", "_gone", "_keep", "_kept", "_register", "_unseen")

    def __init__(self, register: Callable[..., Any], deregister: Callable[..., Any], *,
                 keep: Callable[[Any], bool] = lambda agent: True, unseen: bool = False) -> None:
        self._register, self._deregister, self._keep, self._unseen = register, deregister, keep, unseen
        self._kept: dict[type, bool] = {}
        self._born: dict[int, weakref.ref] = {}  # id(agent) -> weak reference: registered in this step
        self._gone: dict[int, tuple[Callable[[], Any], type, bool]] = {}  # removed: (weak ref, class, born)
        self._counted: Counter[tuple[type, bool]] = Counter()  # removed agents collected since: (class, born)

    def register_agent(self, agent: Any, *args: Any, **kwargs: Any) -> Any:
        out = self._register(agent, *args, **kwargs)  # first: only an agent Mesa accepted is counted
        key = id(agent)
        try:
            self._born[key] = weakref.ref(agent)
        except TypeError:
            return out
        gone = self._gone.get(key)  # removed and registered again within the step: present at the capture
        if gone is not None and gone[0]() is agent:
            del self._gone[key]
        return out

    def deregister_agent(self, agent: Any, *args: Any, **kwargs: Any) -> Any:
        out = self._deregister(agent, *args, **kwargs)
        key, kind = id(agent), type(agent)
        ref = self._born.get(key)  # an id() is reused once its object is collected: check the object too
        born = ref is not None and ref() is agent
        if not born and not self._unseen:
            return out
        keep = self._kept.get(kind)
        if keep is None:
            keep = self._kept[kind] = bool(self._keep(agent))
        if not keep:
            return out
        if not born:
            try:
                ref = weakref.ref(agent)
            except TypeError:
                return out
        old = self._gone.get(key)
        if old is not None and old[0]() is not agent:  # a removed agent, collected, whose id() this one reuses
            self._counted[old[1:]] += 1
        self._gone[key] = (ref, kind, born)
        return out

    def _removed(self, born: bool) -> Counter[str]:
        out: Counter[str] = Counter()
        for (kind, b), n in self._counted.items():
            if b is born:
                out[kind.__name__] += n
        out.update(kind.__name__ for _, kind, b in self._gone.values() if b is born)
        return out

    def transient(self) -> Counter[str]:
        """The agents registered during the step and not registered at its end, by class name."""
        return self._removed(True)

    def removed_unseen(self) -> Counter[str]:
        """(``unseen=True``) the agents there before the step that it removed, by class name."""
        return self._removed(False)


@contextmanager
def watch_step(model: Any, *, keep: Callable[[Any], bool] = lambda agent: True,
               unseen: bool = False) -> Iterator[StepWatch | None]:
    """Count the agents born and removed while the ``with`` block steps ``model`` (``None``: it cannot be watched);
    ``unseen=True`` (a step before the first capture) counts the removed agents that were already there too.

    The hook is an attribute of ``model`` only for the block; what was there before (usually nothing: the class's
    method) is put back on exit.
    """
    own = getattr(model, "__dict__", None)
    originals = [getattr(model, name, None) for name in _HOOKS]
    if not isinstance(own, dict) or not all(callable(fn) for fn in originals):
        yield None  # no Mesa registration, or no instance dict to scope a hook to: stepped unwatched
        return
    saved = {name: own.get(name, _MISSING) for name in _HOOKS}
    watch = StepWatch(*originals, keep=keep, unseen=unseen)
    for name in _HOOKS:  # into the instance dict, as Mesa's own ``self.step = ...``: no __setattr__ of the model runs
        own[name] = getattr(watch, name)
    try:
        yield watch
    finally:
        _restore(own, saved)


def _restore(own: dict[str, Any], saved: dict[str, Any]) -> None:
    for name, before in saved.items():
        if before is _MISSING:
            own.pop(name, None)
        else:
            own[name] = before


Row = tuple[int, "int | None", Counter[str], Counter[str]]  # (panel step, model step, born and removed, unseen)


def transient_record(rows: list[Row]) -> dict[str, Any] | None:
    """The panel's ``meta["transient_agents"]`` from one :data:`Row` per watched step: ``{"total", "types": {class
    name: count}, "steps": [{"step", "model_step", "count"}]}``, and ``"removed_before_first_capture"`` (how many of
    the total were there before the first step and removed in it) when any were (JSON, no NaN); ``None`` when no
    step had one."""
    rows = [r for r in rows if r[2].total() + r[3].total()]
    if not rows:
        return None
    types: Counter[str] = Counter()
    for _, _, born, unseen in rows:
        types.update(born)
        types.update(unseen)
    out: dict[str, Any] = {
        "total": int(types.total()), "types": dict(sorted(types.items())),
        "steps": [{"step": int(t), "model_step": m, "count": int(b.total() + u.total())} for t, m, b, u in rows]}
    if before := sum(u.total() for *_, u in rows):
        out["removed_before_first_capture"] = int(before)
    return out


def transient_text(record: dict[str, Any], steps: int, *, shown: int = 8) -> str:
    """The record in words: how many, of which types, in which of the ``steps`` steps (the first ``shown``)."""
    rows = record["steps"]
    at = ", ".join(f"{s['count']} at panel step {s['step']}"
                   + ("" if s["model_step"] is None else f" (model step {s['model_step']})") for s in rows[:shown])
    more = f", and {len(rows) - shown} more step(s)" if len(rows) > shown else ""
    types = ", ".join(f"{v} {k}" for k, v in record["types"].items())
    before = record.get("removed_before_first_capture", 0)
    born = record["total"] - before
    how = ", ".join([*([f"{born} born and removed within one step"] if born else []),
                     *([f"{before} there before the first step and removed in it"] if before else [])])
    return (f"{record['total']} agent(s) ({types}) were present at no capture, so the panel has no row for them "
            f"({how}); in {len(rows)} of {steps} step(s): {at}{more}")


__all__ = ["StepWatch", "transient_record", "transient_text", "watch_step"]
