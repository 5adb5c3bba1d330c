"""How a run is branched: a verified copy of the model, or a replay from its initial state.

Two ways to get a second model in the same state as a running one:

* **copy** — ``copy.deepcopy`` with two repairs for Mesa's own types, then a check that the copy
  really is an independent model in the same state. Mesa's cell spaces do not survive a plain
  ``deepcopy``: a grid cell is rebuilt through a ``copyreg`` reducer whose arguments (the cell's
  agents, whose ``cell`` points back at it) are copied *before* the new cell is memoised, so a cell
  holding an agent is copied twice — the agent keeps a duplicate that the space never reconnects,
  and its ``cell.neighborhood`` comes back empty (``IndexError`` one step later). The cells'
  cached neighbourhoods chain every cell to the next, so large grids also hit ``RecursionError``;
  each cell also gets its own dynamically created class, so property layers (``cell.sugar``) exist
  on one cell only; and DEVS events hold ``weakref.WeakMethod`` callbacks, which ``deepcopy``
  cannot copy at all. While :func:`copy_model` runs, Mesa cells are copied by a memo-first copier
  (each cell once, its connections re-linked to the copied cells afterwards, the cell class cloned
  once per copy with its property-layer accessors pointing at the copied layers), a
  ``WeakMethod`` is copied as a weak method of the copied object and a ``weakref.ref`` as a weak
  reference to the copied referent (plain ``deepcopy`` keeps it pointing into the original); a
  numpy view is copied as a view of its copied base (plain ``deepcopy`` splits them, e.g. Mesa's
  ``ContinuousSpace.agent_positions`` and the array behind it). The copy is then checked:
  same state digest (agents, their plain attributes, cells and their connections, property layers,
  random-number-generator states), and nothing shared with the original (agents, cells, RNGs,
  simulator, layer accessors). Any failure is a :class:`~aumann.errors.CheckpointError` naming it.
* **replay** — rebuild the model with a factory (a ``Scenario`` knows its config and seed, or
  ``factory=``: a callable returning the model in its initial state) and re-run its history: the
  steps it took (with the same step function) and the interventions applied to it. LLM decisions
  come back from the response cache, so a replay costs no calls. The replayed model is checked
  against the original's state digest; a mismatch (a factory without the seed, a step function
  that is not deterministic) raises :class:`~aumann.errors.ReplayDivergedError`.

The history of each model that went through :func:`~aumann.simulators.simulate`, ``fork`` or a
replay is kept in a weak registry (the model itself is never modified), so forks of forks replay
their interventions too.
"""

from __future__ import annotations

import abc
import copy
import copyreg
import enum
import functools
import hashlib
import inspect
import itertools
import math
import re
import sys
import threading
import types
import weakref
from collections.abc import Callable, Mapping, MutableMapping
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aumann.checks import exception_message
from aumann.errors import (
    AumannError,
    CheckpointError,
    ModelStepError,
    ReplayDivergedError,
    ReplayUnavailableError,
    SharedStateWarning,
    SimulationError,
)
from aumann.seeding import model_given_no_seed
from aumann.simulators.intervention import apply_intervention, model_step_label
from aumann.simulators.runaway import runaway_advice, runaway_function
from aumann.simulators.sharing import shared_state

StepFn = Callable[[Any], None]


class PlacedStep(abc.ABC):
    """A step function whose errors name its place in a run, ``step k of n`` (:class:`aumann.simulators.boundary.
    UserStep`, a scenario's step): :meth:`at` returns it told that the call takes step ``k`` (from 1) of ``n``.
    :func:`simulate` tells it, and so does a replay (:func:`run_plan`: step ``k`` of the ``n`` it replays)."""

    @abc.abstractmethod
    def at(self, k: int, n: int) -> StepFn:
        """This step function, taking step ``k`` (from 1) of ``n`` (what its errors say)."""


def _placed(step: StepFn | None, k: int, n: int) -> StepFn | None:
    return step.at(k, n) if isinstance(step, PlacedStep) else step

_LOCK = threading.RLock()
_MISSING = object()


# ---------------------------------------------------------------------------------------------- stepping
def default_step(model: Any) -> None:
    """Advance ``model`` by one step: ``model.simulator.run_for(1)`` when a Mesa DEVS simulator
    (``ABMSimulator``/``DEVSimulator``) drives the model, else ``model.step()``.

    Mesa 3.3's wolf–sheep regrows grass through events of its ``ABMSimulator``; calling
    ``model.step()`` alone would silently skip them.
    """
    sim = getattr(model, "simulator", None)
    if sim is not None and getattr(sim, "model", None) is model and callable(getattr(sim, "run_for", None)):
        sim.run_for(1)
    else:
        model.step()


def advance(model: Any, step: StepFn | None) -> None:
    """One step of ``model`` with ``step`` (``None``: :func:`default_step`); then undo the
    :func:`override_next_step` overrides made for this step. A step that draws from a process-wide
    random generator (``np.random.*``, the ``random`` module's functions) is noted in the model's lineage:
    a copy of such a model cannot be an independent one (:func:`copy_model` refuses it)."""
    before = _global_draws()
    try:
        (step or default_step)(model)
    finally:
        _restore_overrides(model)
    after = _global_draws()
    if after != before:
        lin = lineage(model, create=True)
        if lin is not None and lin.global_rng is None:
            lin.global_rng = global_draw_sources(before, after)


def _global_draws() -> tuple[Any, Any]:
    """Where the process-wide generators stand: numpy's legacy global one (position and a digest of its key) and
    the ``random`` module's (a digest of its state)."""
    import random

    st = np.random.get_state(legacy=True)  # noqa: NPY002 - reading the global generator is the point
    return ((int(st[2]), hashlib.blake2b(st[1].tobytes(), digest_size=8).digest(), int(st[3]), float(st[4])),
            hash(random.getstate()))


def global_draw_sources(before: tuple[Any, Any], after: tuple[Any, Any]) -> str | None:
    """The process-wide generators that moved between two :func:`_global_draws` (``None``: neither)."""
    moved = [name for name, a, b in zip(("numpy's np.random", "Python's random module"), before, after, strict=True)
             if a != b]
    return " and ".join(moved) or None


# model id -> (the model, weakly; per override: the agent -- weakly where it takes a weak reference --, the method,
# what the agent's own __dict__ held under that name; [what the model's own __dict__ held under "deregister_agent"
# before the removal watch], or [] when no watch is installed). Never a strong reference to an agent: Mesa's AgentSet
# steps every agent whose object is still alive, so holding one would keep an agent removed mid-step acting in the step
_OVERRIDES: dict[int, tuple[weakref.ref, list[tuple[Callable[[], Any], str, Any]], list[Any]]] = {}


def _noop(*_args: Any, **_kwargs: Any) -> None:
    return None


def _held(obj: Any) -> Callable[[], Any]:
    """A weak reference to ``obj``, or (an object that takes none) a function returning it."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _registered(agent: Any, model: Any) -> bool | None:
    """Whether ``agent`` is among ``model.agents`` now (``None``: the model keeps no set of agents to ask -- a list
    would cost O(N) a call, and a baseline action overrides every agent)."""
    try:
        agents = model.agents
        return agent in agents if isinstance(agents, AbstractSet) else None  # Mesa's AgentSet: a hashed lookup
    except Exception:  # no agents, or a set that cannot say: no removal to watch for
        return None


class _Override:
    """What an overridden method is for one step: the replacement, not called once the agent has left its model
    during the step (removed by another agent before its turn). Mesa steps a removed agent whose object is still
    alive, and a baseline action must not act for it. Holds the agent and the model weakly; the replacement itself
    is dropped (``fn`` becomes a no-op) as soon as the agent leaves the model (:class:`_RemovalWatch`), since a
    replacement closing over its agent would keep the removed object alive for Mesa to call its other methods."""

    __slots__ = ("agent", "fn", "model")

    def __init__(self, fn: Callable[..., Any], agent: Any, model: Any) -> None:
        self.fn = fn
        self.agent = _held(agent) if _registered(agent, model) else None  # None: not in model.agents, not watched
        self.model = _held(model)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.agent is not None:
            agent, model = self.agent(), self.model()
            if agent is None or model is None or _registered(agent, model) is False:
                return None
        return self.fn(*args, **kwargs)


class _RemovalWatch:
    """``model.deregister_agent`` for a step with overrides (an attribute on this one model, removed when the step
    ends). Mesa's ``Agent.remove()`` calls it; an overridden agent leaving the model has its replacements dropped at
    once, so the agent's object dies with its last reference as it does without the override. Otherwise a
    replacement holding its agent (``lambda a=agent: rest(a)``) kept a removed agent alive through the step, and
    Mesa's ``AgentSet.do``/``shuffle_do`` of *any* method -- ``"step"`` with the override on ``"breed"``,
    ``"move"`` or ``"eat"`` -- ran the agent's real method after its removal (drawing from the model's RNG, or
    failing in Mesa: its cell is ``None``)."""

    __slots__ = ("model", "original")

    def __init__(self, model: Any, original: Callable[..., Any]) -> None:
        self.model = weakref.ref(model)
        self.original = original

    def __call__(self, agent: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.original(agent, *args, **kwargs)
        finally:
            model = self.model()
            if model is not None and _registered(agent, model) is False:
                _drop_replacements(model, agent)


def _watch_removals(model: Any) -> list[Any]:
    """Install :class:`_RemovalWatch` on ``model`` (one with Mesa's ``deregister_agent``); what its ``__dict__`` held
    under the name, to put back (``[]``: nothing installed -- not a Mesa model, or no ``__dict__``)."""
    original = getattr(model, "deregister_agent", None)
    own = getattr(model, "__dict__", None)
    if not callable(original) or not isinstance(own, dict):
        return []
    saved = own.get("deregister_agent", _MISSING)
    own["deregister_agent"] = _RemovalWatch(model, original)
    return [saved]


def _drop_replacements(model: Any, agent: Any) -> None:
    """Drop the replacements of ``agent``'s overrides (it has left ``model``): they do nothing from now on, and no
    longer hold the agent."""
    entry = _OVERRIDES.get(id(model))
    if entry is None or entry[0]() is not model:
        return
    own = getattr(agent, "__dict__", {})
    for held, method, saved in entry[1]:
        if held() is agent:
            for ov in (own.get(method), saved):
                if isinstance(ov, _Override):
                    ov.fn = _noop


def override_next_step(agent: Any, method: str, replacement: Callable[..., Any] | None = None) -> None:
    """Replace ``agent.<method>`` by ``replacement`` (default: do nothing) for the model's next step.

    The override is an attribute on this one agent (its class is untouched) and is removed when
    the next step taken by aumann's runner (``simulate``, ``fork``, a replay) ends, whether or not
    the agent called it. Use it inside a scenario's baseline action, e.g. "this agent gives nothing
    this step": ``override_next_step(agent, "give_money")``.

    An agent removed during that step by another one (eaten, killed before its turn) is held weakly: the override
    does not keep it alive, and the replacement does nothing for it once it has left ``model.agents`` (Mesa's
    ``AgentSet`` steps every agent whose object is still alive, removed or not). On a Mesa model the replacement
    is dropped the moment the agent is removed (``model.deregister_agent`` is watched for the step), so a
    replacement closing over its agent does not keep it alive either: whatever method the model activates next
    (``shuffle_do("move")``, ``do("eat")``), the removed agent is not called, as without the override.

    Raises:
        SimulationError: the agent has no such method, or no ``model``.
    """
    if not callable(getattr(agent, method, None)):
        raise SimulationError(f"agent {getattr(agent, 'unique_id', agent)!r} ({type(agent).__name__}) has no method "
                              f"{method!r} to override")
    model = getattr(agent, "model", None)
    if model is None:
        raise SimulationError(f"agent {agent!r} has no model; override_next_step needs agent.model")
    if replacement is not None and not callable(replacement):
        raise SimulationError(f"replacement must be callable or None; got {replacement!r}")
    d = vars(agent)
    saved = d.get(method, _MISSING)
    entry = _OVERRIDES.get(id(model))
    if entry is None or entry[0]() is not model:
        entry = (weakref.ref(model), [], _watch_removals(model))
        _OVERRIDES[id(model)] = entry
    entry[1].append((_held(agent), method, saved))
    d[method] = _Override(replacement or _noop, agent, model)


def _restore_overrides(model: Any) -> None:
    entry = _OVERRIDES.pop(id(model), None)
    if entry is None or entry[0]() is not model:
        return
    for saved in entry[2]:  # the removal watch
        if isinstance(vars(model).get("deregister_agent"), _RemovalWatch):
            if saved is _MISSING:
                vars(model).pop("deregister_agent", None)
            else:
                vars(model)["deregister_agent"] = saved
    for held, method, saved in reversed(entry[1]):
        agent = held()
        if agent is None:  # gone (removed during the step and collected): nothing left to undo
            continue
        if saved is _MISSING:
            vars(agent).pop(method, None)
        else:
            vars(agent)[method] = saved


# ---------------------------------------------------------------------------------------------- lineage
@dataclass
class Lineage:
    """What happened to a model since it was built: ``segments`` are ``("step", n, fn)``,
    ``("apply", g)`` (an intervention applied once) and ``("repeat", g, n, fn)`` (g before each of n
    steps); ``factory`` rebuilds its initial state; ``copy_error`` caches why copying it failed."""

    factory: Callable[[], Any] | None = None
    segments: list[tuple] = field(default_factory=list)
    copy_error: str | None = None
    verified: tuple | None = None  # (steps, agents) at which a copy of this very model passed the check
    global_rng: str | None = None  # the process-wide generator(s) a step of this model was seen drawing from

    def steps(self) -> int:
        return sum(s[2] if s[0] == "repeat" else s[1] for s in self.segments if s[0] != "apply")

    def clone(self) -> Lineage:
        return Lineage(self.factory, list(self.segments), self.copy_error)


_LINEAGES: dict[int, tuple[weakref.ref, Lineage]] = {}


def lineage(model: Any, *, create: bool = False) -> Lineage | None:
    """The registered history of ``model`` (``create=True`` registers an empty one)."""
    entry = _LINEAGES.get(id(model))
    if entry is not None and entry[0]() is model:
        return entry[1]
    if not create:
        return None
    try:
        ref = weakref.ref(model)
    except TypeError:  # not weak-referenceable: no history is kept
        return None
    lin = Lineage()
    key = id(model)
    _LINEAGES[key] = (ref, lin)
    weakref.finalize(model, _forget, key, ref)
    return lin


def set_lineage(model: Any, lin: Lineage) -> None:
    mine = lineage(model, create=True)
    if mine is not None:
        mine.factory, mine.segments, mine.copy_error = lin.factory, list(lin.segments), lin.copy_error


def record(model: Any, segment: tuple) -> None:
    """Append one history segment to ``model``'s lineage (merging consecutive plain steps)."""
    lin = lineage(model, create=True)
    if lin is None:
        return
    if segment[0] == "step" and segment[1] == 0:
        return
    last = lin.segments[-1] if lin.segments else None
    if segment[0] == "step" and last is not None and last[0] == "step" and last[2] is segment[2]:
        lin.segments[-1] = ("step", last[1] + segment[1], segment[2])
    elif (segment[0] == "repeat" and last is not None and last[0] == "repeat" and last[1] is segment[1]
          and last[3] is segment[3]):
        lin.segments[-1] = ("repeat", segment[1], last[2] + segment[2], segment[3])
    else:
        lin.segments.append(segment)


def _forget(key: int, ref: weakref.ref) -> None:
    entry = _LINEAGES.get(key)
    if entry is not None and entry[0] is ref:
        del _LINEAGES[key]


# ---------------------------------------------------------------------------------------------- state digest
_PLAIN = (bool, int, float, str, bytes, complex, type(None))


def _plain(v: Any, depth: int = 0) -> Any:
    """A comparable summary of a value, or ``_MISSING`` for objects the digest does not look into."""
    if isinstance(v, float):
        return ("float", v.hex()) if not math.isnan(v) else ("float", "nan")
    if isinstance(v, _PLAIN):
        return v
    if isinstance(v, np.generic):
        return _plain(v.item(), depth)
    if isinstance(v, enum.Enum):
        return ("enum", type(v).__qualname__, v.name)
    if isinstance(v, np.ndarray):
        if v.dtype == object:
            return ("ndarray", v.shape, "object")
        return ("ndarray", v.shape, str(v.dtype), hashlib.blake2b(np.ascontiguousarray(v).tobytes(),
                                                                    digest_size=16).hexdigest())
    if hasattr(v, "coordinate") and hasattr(v, "connections"):  # a Mesa cell
        return ("cell", _plain(v.coordinate, depth + 1), len(v.connections))
    if hasattr(v, "unique_id") and hasattr(v, "model"):  # an agent
        return ("agent", _plain(v.unique_id, depth + 1))
    if depth < 2 and isinstance(v, list | tuple) and len(v) <= 256:
        out = tuple(_plain(x, depth + 1) for x in v)
        return out if _MISSING not in out else _MISSING
    return _MISSING


def _attrs(obj: Any) -> list[tuple[str, Any]]:
    d = getattr(obj, "__dict__", None)
    out = []
    if isinstance(d, Mapping):
        for k in sorted(d, key=str):
            if k in ("model", "random", "rng") or k.startswith("__"):
                continue
            p = _plain(d[k])
            if p is not _MISSING:
                out.append((k, p))
    return out


def _rng_states(obj: Any) -> list[tuple[str, Any]]:
    out = []
    d = getattr(obj, "__dict__", None)
    if not isinstance(d, Mapping):
        return out
    for k in sorted(d, key=str):
        v = d[k]
        if isinstance(v, np.random.Generator):
            out.append((f"rng {k}", repr(v.bit_generator.state)))
        elif isinstance(v, np.random.RandomState):
            out.append((f"rng {k}", repr(v.get_state(legacy=False))))
        elif type(v).__module__ == "random" and hasattr(v, "getstate"):
            out.append((f"rng {k}", hashlib.blake2b(repr(v.getstate()).encode(), digest_size=16).hexdigest()))
    return out


def _spaces(model: Any) -> list[tuple[str, Any]]:
    d = getattr(model, "__dict__", None)
    return [(k, v) for k, v in sorted(d.items(), key=lambda kv: str(kv[0]))
            if isinstance(getattr(v, "_cells", None), Mapping)] if isinstance(d, Mapping) else []


def _agents(model: Any) -> list[Any]:
    agents = getattr(model, "agents", None)
    if agents is None:
        return []
    try:
        agents = list(agents)
    except TypeError:
        return []
    try:
        return sorted(agents, key=lambda a: a.unique_id)
    except (AttributeError, TypeError):
        return agents


def state_digest(model: Any) -> list[tuple]:
    """A comparable description of the model's state: step counter, RNG states, plain model
    attributes, every agent (id, type, plain attributes, cell), every cell space (per cell: agents
    and number of connections; property layers), and a DEVS simulator's clock.

    Two models with equal digests are in the same state as far as anything a recorder or an
    indicator can read is concerned; objects the digest does not understand are not looked into.
    """
    out: list[tuple] = [("type", type(model).__qualname__)]
    out += [("model", k, v) for k, v in _attrs(model)]
    out += [("model", *s) for s in _rng_states(model)]
    for a in _agents(model):
        out.append(("agent", _plain(getattr(a, "unique_id", None)), type(a).__qualname__, tuple(_attrs(a))))
    for name, space in _spaces(model):
        cells = space._cells
        for coord, cell in cells.items():
            agents = getattr(cell, "_agents", ())
            ids = tuple(sorted((_plain(getattr(a, "unique_id", None)) for a in agents), key=repr))
            out.append(("cell", name, _plain(coord), len(getattr(cell, "connections", ())), ids))
        for lname, layer in sorted((getattr(space, "_mesa_property_layers", None) or {}).items()):
            out.append(("layer", name, lname, _plain(np.asarray(getattr(layer, "data", layer)))))
    sim = getattr(model, "simulator", None)
    if sim is not None and getattr(sim, "model", None) is model:
        out.append(("simulator", _plain(_simulator_clock(sim, model))))
    return out


def _simulator_clock(sim: Any, model: Any) -> Any:
    """A DEVS simulator's clock, read without Mesa's deprecated accessor: Mesa 3.3 keeps it in ``simulator.time``;
    newer Mesa (main, 3.4.0.dev) keeps it in ``model.time`` and makes ``simulator.time`` a property that warns
    (FutureWarning: "simulator.time is deprecated, use model.time instead") at every read. Told apart by what the
    objects hold, not by Mesa's version."""
    own = getattr(sim, "__dict__", None)
    if isinstance(own, dict) and "time" in own:  # Mesa 3.3: the simulator's own attribute
        return own["time"]
    if isinstance(getattr(type(sim), "time", None), property):  # Mesa >= 3.4: a deprecated view of model.time
        return getattr(model, "time", None)
    return getattr(sim, "time", None)


def digest_difference(a: list[tuple], b: list[tuple]) -> str | None:
    """``None`` when two digests agree, else a short description of the first difference."""
    if a == b:
        return None
    for x, y in itertools.zip_longest(a, b):
        if x != y:
            if x is None or y is None:
                return f"different number of digest entries (one more: {_short(x if y is None else y)})"
            if x[0] == "agent" and y[0] == "agent" and x[1] == y[1]:
                dx, dy = dict(x[3]), dict(y[3])
                keys = [k for k in sorted(set(dx) | set(dy)) if dx.get(k, _MISSING) != dy.get(k, _MISSING)]
                if keys:
                    k = keys[0]
                    return f"agent {x[1]!r} attribute {k!r}: {_pair(dx.get(k), dy.get(k))}"
            if (x[0] == "model" and y[0] == "model" and len(x) == len(y) == 3 and x[1] == y[1]
                    and not str(x[1]).startswith("rng ")):  # (the RNG entries are "rng <name>")
                return f"model attribute {x[1]!r}: {_pair(x[2], y[2])}"
            return f"{_short(x)} vs {_short(y)}"
    return "digests differ"


class _BytesText:
    """How a ``bytes`` value reads in a diff: its length and first bytes in hex. Its repr was the value's own, escape
    sequences (``b'\\x80\\x04\\x95...``) cut at 160 characters, the same on both sides for two pickles (mesa-replay's
    ``CacheableModel`` holds its cached states so)."""

    __slots__ = ("value",)

    def __init__(self, value: bytes) -> None:
        self.value = value

    def __repr__(self) -> str:
        head = " ".join(f"{b:02x}" for b in self.value[:8])
        n = len(self.value)
        return f"<{n:,} byte{'' if n == 1 else 's'}" + (f": {head}" if head else "") + (" …>" if n > 8 else ">")


def _readable(v: Any) -> Any:
    """``v`` with every ``bytes`` in it (tuples and lists at any depth) as a :class:`_BytesText`."""
    if isinstance(v, bytes):
        return _BytesText(v)
    if isinstance(v, tuple):
        return tuple(_readable(x) for x in v)
    if isinstance(v, list):
        return [_readable(x) for x in v]
    return v


def _pair(a: Any, b: Any) -> str:
    """Two differing values of one attribute; for two ``bytes``, also where they first differ."""
    said = f"{_short(a)} vs {_short(b)}"
    if isinstance(a, bytes) and isinstance(b, bytes):
        said += f" (first differing at byte {_first_difference(a, b):,})"
    return said


def _first_difference(a: bytes, b: bytes) -> int:
    """The first offset where ``a`` and ``b`` differ (the shorter one's length when one begins the other)."""
    n, i, block = min(len(a), len(b)), 0, 1 << 16
    while i < n and a[i:i + block] == b[i:i + block]:  # (C-speed comparison of blocks, then bytes in the one)
        i += block
    return next((j for j in range(i, min(i + block, n)) if a[j] != b[j]), n)


def _short(v: Any) -> str:
    s = repr(_readable(v))
    return s if len(s) <= 160 else s[:157] + "..."


# ---------------------------------------------------------------------------------------------- the copy
def _mesa_cell_class() -> type | None:
    try:
        from mesa.discrete_space import Cell
    except ImportError:  # pragma: no cover - Mesa < 3.1
        return None
    return Cell


def _slot_names(cls: type) -> list[str]:
    names: list[str] = []
    for k in cls.__mro__:
        slots = k.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        for s in slots:
            if s not in ("__dict__", "__weakref__") and s not in names:
                names.append(s)
    return names


def _is_layer_accessor(attr: Any) -> bool:
    if type(attr).__name__ == "PropertyDescriptor" and hasattr(attr, "layer"):  # Mesa 3.3
        return True
    fget = getattr(attr, "fget", None) if isinstance(attr, property) else None
    return bool(fget is not None and fget.__closure__ and "create_property_accessors" in fget.__qualname__)


def _rebind(fn: Any, memo: dict) -> Any:
    if fn is None or not getattr(fn, "__closure__", None):
        return fn
    cells = tuple(types.CellType(copy.deepcopy(c.cell_contents, memo)) for c in fn.__closure__)
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, cells)
    new.__qualname__ = fn.__qualname__
    return new


def _copy_accessor(attr: Any, memo: dict) -> Any:
    if isinstance(attr, property):
        return property(_rebind(attr.fget, memo), _rebind(attr.fset, memo), _rebind(attr.fdel, memo), attr.__doc__)
    return type(attr)(copy.deepcopy(attr.layer, memo))


class _CopyContext:
    """Per-copy state of the Mesa hooks: cloned cell classes and cells whose links wait."""

    def __init__(self) -> None:
        self.classes: dict[type, type] = {}
        self.pending: list[tuple[Any, Any]] = []
        self.cells: list[tuple[Any, Any]] = []
        self.memo: dict = {}  # the deepcopy memo: original object id -> its copy

    def cell_class(self, cls: type, memo: dict) -> type:
        if cls in self.classes:
            return self.classes[cls]
        accessors = {k: v for k, v in cls.__dict__.items() if _is_layer_accessor(v)}
        if not accessors:
            self.classes[cls] = cls
            return cls
        ns: dict[str, Any] = {"__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__}
        if "_mesa_properties" in cls.__dict__:
            ns["_mesa_properties"] = set(cls.__dict__["_mesa_properties"])
        ns.update({k: _copy_accessor(v, memo) for k, v in accessors.items()})
        new = type(cls.__name__, (cls,), ns)
        reducer = copyreg.dispatch_table.get(cls)
        if reducer is not None:  # keep the copy picklable the way Mesa pickles grid cells
            copyreg.pickle(new, reducer)
        self.classes[cls] = new
        return new

    def copy_cell(self, cell: Any, memo: dict) -> Any:
        cls = type(cell)
        new = object.__new__(self.cell_class(cls, memo))
        memo[id(cell)] = new  # memo first: agents pointing back at this cell find this copy
        for name in _slot_names(cls):
            try:
                value = getattr(cell, name)
            except AttributeError:
                continue
            if name == "connections":
                object.__setattr__(new, name, {})
                self.pending.append((cell, new))
            else:
                object.__setattr__(new, name, copy.deepcopy(value, memo))
        d = getattr(cell, "__dict__", None)
        if d:
            nd = new.__dict__
            for k, v in d.items():
                if isinstance(inspect.getattr_static(cls, k, None), functools.cached_property):
                    continue  # cached neighbourhoods: recomputed from the re-linked connections
                nd[k] = copy.deepcopy(v, memo)
        self.cells.append((cell, new))
        return new

    def finish(self, memo: dict) -> None:
        while self.pending:
            cell, new = self.pending.pop()
            new.connections = {k: memo[id(v)] if id(v) in memo else copy.deepcopy(v, memo)
                               for k, v in cell.connections.items()}


def _dead_weakref() -> weakref.ref:
    class _Gone:
        pass

    obj = _Gone()
    ref = weakref.ref(obj)
    del obj
    return ref


def _reduce_weakmethod(wm: weakref.WeakMethod) -> tuple:
    meth = wm()
    if meth is None:
        return _dead_weakref, ()
    return weakref.WeakMethod, (meth,)


def _copy_weakref(ref: weakref.ref, memo: dict) -> weakref.ref:
    """A weak reference to the copied referent. Plain ``deepcopy`` returns a ``weakref.ref`` as it is, so a
    copied agent keeping ``weakref.ref(other)`` (mesa-examples' virus_antibody: an antibody's target, and
    ``weakref.ref(self)`` for "knocked out") would point into the original model. A referent the copied model
    holds nowhere else lives only as long as the copy's memo: the copy's reference is then dead, as the
    original's would be without what keeps it alive outside the model."""
    obj = ref()
    if obj is None:
        return _dead_weakref()
    cb = ref.__callback__
    return weakref.ref(copy.deepcopy(obj, memo), None if cb is None else copy.deepcopy(cb, memo))


def _copy_ndarray(x: np.ndarray, memo: dict) -> np.ndarray:
    """Copy a numpy view as a view of its copied base (plain ``deepcopy`` copies a view and its base
    into two unrelated arrays, so writes through one no longer show in the other)."""
    base = x.base
    if type(base) is np.ndarray and x.dtype != object and base.dtype != object:
        bcopy = copy.deepcopy(base, memo)
        offset = x.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        try:
            y = np.ndarray(x.shape, x.dtype, buffer=bcopy, offset=offset, strides=x.strides)
        except (TypeError, ValueError, BufferError):
            return x.__deepcopy__(memo)
        if not x.flags.writeable:
            y.flags.writeable = False
        return y
    return x.__deepcopy__(memo)


def _mesa_grid_class() -> type | None:
    try:
        from mesa.discrete_space import Grid
    except ImportError:  # pragma: no cover - Mesa < 3.1
        return None
    return Grid


def _grid_setstate(original: Callable[[Any, dict], None]) -> Callable[[Any, dict], None]:
    """Mesa's ``Grid.__setstate__`` for grids of any dimension.

    Mesa 3.3 takes the grid's cell class from cell ``(0, 0)``, which only a 2-D grid has: a 1-D, 3-D (mesa-examples'
    warehouse: rows × columns × shelf levels) or 4-D grid failed every copy and every unpickling with ``KeyError:
    (0, 0)``. A grid with a cell (0, 0) goes through Mesa's own method; any other takes the class of its first cell
    and does the rest as Mesa does (re-link the cells, put the property-layer descriptors on that class)."""

    @functools.wraps(original)
    def setstate(self: Any, state: dict) -> None:
        cells = state.get("_cells") if isinstance(state, dict) else None
        if not isinstance(cells, Mapping) or not cells or (0, 0) in cells:
            return original(self, state)
        try:
            from mesa.discrete_space.property_layer import PropertyDescriptor
        except ImportError:  # pragma: no cover - a Mesa without it has its own __setstate__ rules
            return original(self, state)
        self.__dict__ = state
        self._connect_cells()
        self.cell_klass = type(next(iter(cells.values())))
        for layer in (getattr(self, "_mesa_property_layers", None) or {}).values():
            setattr(self.cell_klass, layer.name, PropertyDescriptor(layer))
        return None

    setstate.__aumann_any_dims__ = True  # type: ignore[attr-defined]
    return setstate


@contextmanager
def grid_setstate_any_dims():
    """While inside, Mesa grids of any dimension unpickle and copy (see :func:`_grid_setstate`)."""
    grid_cls = _mesa_grid_class()
    saved = grid_cls.__dict__.get("__setstate__", _MISSING) if grid_cls is not None else _MISSING
    if saved is _MISSING or getattr(saved, "__aumann_any_dims__", False):  # no grid, or already inside
        yield
        return
    with _LOCK:
        grid_cls.__setstate__ = _grid_setstate(saved)
        try:
            yield
        finally:
            grid_cls.__setstate__ = saved


@contextmanager
def _copy_hooks():
    ctx = _CopyContext()
    cell_cls = _mesa_cell_class()
    dispatch = getattr(copy, "_deepcopy_dispatch", None)
    with _LOCK:
        saved_cell = cell_cls.__dict__.get("__deepcopy__", _MISSING) if cell_cls is not None else _MISSING
        saved_wm = copyreg.dispatch_table.get(weakref.WeakMethod, _MISSING)
        saved_nd = dispatch.get(np.ndarray, _MISSING) if dispatch is not None else _MISSING
        saved_ref = dispatch.get(weakref.ref, _MISSING) if dispatch is not None else _MISSING
        if cell_cls is not None:
            cell_cls.__deepcopy__ = lambda self, memo: ctx.copy_cell(self, memo)
        copyreg.dispatch_table[weakref.WeakMethod] = _reduce_weakmethod
        if dispatch is not None:
            dispatch[np.ndarray] = _copy_ndarray
            dispatch[weakref.ref] = _copy_weakref
        try:
            yield ctx
        finally:
            if dispatch is not None:
                for key, saved in ((np.ndarray, saved_nd), (weakref.ref, saved_ref)):
                    if saved is _MISSING:
                        dispatch.pop(key, None)
                    else:
                        dispatch[key] = saved
            if cell_cls is not None:
                if saved_cell is _MISSING:
                    del cell_cls.__deepcopy__
                else:
                    cell_cls.__deepcopy__ = saved_cell
            if saved_wm is _MISSING:
                copyreg.dispatch_table.pop(weakref.WeakMethod, None)
            else:
                copyreg.dispatch_table[weakref.WeakMethod] = saved_wm


_COUNT = re.compile(r"count\((-?\d+)\)")


def _continue_id_counters(model: Any, branch: Any, memo: Mapping[int, Any] | None = None) -> None:
    """Give the copy the original's next ``unique_id``.

    Mesa 3.3 draws ids from a class-level ``Agent._ids[model]`` counter keyed by the model object,
    which ``deepcopy`` cannot see: without this, agents created in a fork restart at id 1 and
    collide with living agents. (Mesa ≥ 3.4 keeps the counter on the model, which copies.) The counter is
    keyed by each agent's own model: ``model`` itself, or the Mesa model inside a wrapper (an environment
    holding one), whose copy is found in the deepcopy ``memo``.
    """
    seen: set[tuple[int, int]] = set()
    for agent in getattr(model, "agents", ()):
        ids = getattr(type(agent), "_ids", None)
        if not isinstance(ids, MutableMapping):
            continue
        owner = getattr(agent, "model", model)
        target = branch if owner is model else (memo or {}).get(id(owner))
        if target is None or (id(ids), id(owner)) in seen:
            continue
        seen.add((id(ids), id(owner)))
        try:
            counter = ids.get(owner) if owner in ids else None
        except TypeError:  # an unhashable owner cannot key Mesa's counters
            continue
        m = _COUNT.fullmatch(repr(counter)) if counter is not None else None
        if m is not None:
            ids[target] = itertools.count(int(m.group(1)))


def _verify_key(model: Any) -> tuple:
    agents = getattr(model, "agents", None)
    try:
        n = len(agents) if agents is not None else -1
    except TypeError:
        n = -1
    return getattr(model, "steps", None), n


#: the recursion limit and thread stack of the second attempt at a copy that hit Python's recursion limit
DEEP_RECURSION_LIMIT = 200_000
DEEP_STACK_BYTES = 512 * 2**20
_DEEP: weakref.WeakSet[type] = weakref.WeakSet()  # model classes whose copies needed the deep stack


def _deepcopy(model: Any) -> tuple[Any, _CopyContext]:
    with grid_setstate_any_dims(), _copy_hooks() as ctx:
        memo: dict = {}
        branch = copy.deepcopy(model, memo)
        ctx.finish(memo)
        ctx.memo = memo
    return branch, ctx


def _deepcopy_on_deep_stack(model: Any) -> tuple[Any, _CopyContext]:
    """:func:`_deepcopy` in a thread with a large stack and a raised recursion limit (restored after).

    Models whose agents keep references to their neighbours chain every agent to the next, so
    ``deepcopy`` recurses once per agent; the default limit (1,000) is hit after a few steps of a
    civil-violence model, and a raised limit makes the copy bit-identical. The copy runs on its own
    thread so that the deep recursion has a stack sized for it (the main thread's is fixed)."""
    box: dict[str, Any] = {}

    def work() -> None:
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, DEEP_RECURSION_LIMIT))
        try:
            box["out"] = _deepcopy(model)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        finally:
            sys.setrecursionlimit(old)

    size = threading.stack_size()
    try:
        threading.stack_size(DEEP_STACK_BYTES)
        thread = threading.Thread(target=work, name="aumann-deep-copy")
        thread.start()
    finally:
        threading.stack_size(size)
    thread.join()
    if "error" in box:
        err = box.pop("error")
        if isinstance(err, RecursionError):
            _raise_if_runaway(err, type(model).__name__)
        err.__traceback__ = None  # thousands of identical frames: the message says it all
        raise err
    return box["out"]


def _raise_if_runaway(exc: RecursionError, name: str) -> None:
    """A :class:`CheckpointError` naming the function when ``exc`` is one calling itself without end (a wrapper's
    ``__getattr__``), which no stack is deep enough for, rather than a deep object graph."""
    where = runaway_function(exc)
    if where is not None:
        raise CheckpointError(f"cannot copy {name}: copy.deepcopy never finished because {where} calls itself "
                              f"without end (RecursionError). {runaway_advice(where)}") from None


def copy_model(model: Any) -> Any:
    """A deep copy of ``model``, repaired for Mesa's cell spaces and DEVS events, and checked.

    The check is skipped when a copy of this same model (same step, same number of agents) was
    checked before — a checkpoint forked many times (the deletion study) is checked once.

    Raises:
        CheckpointError: the copy failed (``RecursionError``, an object that cannot be copied) or
            is not a faithful, independent copy; the message names what went wrong.
    """
    name = type(model).__name__
    try:
        if type(model) in _DEEP:  # known to need the deep stack: do not pay for a failing first attempt
            branch, ctx = _deepcopy_on_deep_stack(model)
        else:
            try:
                branch, ctx = _deepcopy(model)
            except RecursionError:  # a deep object graph (agents keeping neighbourhoods): on a deep stack
                _DEEP.add(type(model))  # (a function that loops fails there too, and is named then)
                branch, ctx = _deepcopy_on_deep_stack(model)
    except RecursionError:
        # no chained traceback: it would repeat the same few frames thousands of times
        raise CheckpointError(f"cannot copy {name}: its object graph is deeper than {DEEP_RECURSION_LIMIT:,} "
                              "nested objects (RecursionError in copy.deepcopy even on a deep stack); fork by "
                              "replay (factory=...) or give the model a __deepcopy__") from None
    except CheckpointError:
        raise
    except Exception as exc:  # deepcopy failures surface as many types
        raise CheckpointError(f"cannot checkpoint {name} with copy.deepcopy: {type(exc).__name__}: "
                              f"{str(exc)[:300]}. Objects such as open files, sockets, locks or generators cannot "
                              f"be copied; keep them outside the model, implement __deepcopy__, or fork by replay "
                              f"(factory=...)") from None
    _continue_id_counters(model, branch, ctx.memo)
    lin = lineage(model, create=True)
    if lin is not None and lin.global_rng:
        raise CheckpointError(
            f"cannot checkpoint {name} by copying: its step draws from {lin.global_rng} (a generator of the whole "
            "process, outside the model): a copy would share it with the original, so a fork could not reproduce "
            "the run and would move the original's own future draws. Draw from model.rng / model.random instead, or "
            "fork by replay (factory=...) with the factory seeding that generator")
    key = _verify_key(model)
    if lin is None or lin.verified != key:
        problem = copy_problem(model, branch, ctx.cells)
        if problem is not None:
            raise CheckpointError(f"cannot checkpoint {name} by copying: the copy {problem}")
        if lin is not None:
            lin.verified = key
    return branch


def _reachable_models(branch: Any) -> set[int]:
    """The ids of the copy and of the models among its own attributes (a wrapper's inner Mesa model)."""
    out = {id(branch)}
    d = getattr(branch, "__dict__", None)
    if isinstance(d, Mapping):
        out.update(id(v) for v in d.values() if hasattr(v, "agents") and hasattr(v, "step"))
    return out


def copy_problem(model: Any, branch: Any, cells: list[tuple[Any, Any]] = ()) -> str | None:
    """Why ``branch`` is not a faithful, independent copy of ``model`` (``None`` when it is)."""
    diff = digest_difference(state_digest(model), state_digest(branch))
    if diff is not None:
        return f"is not in the same state as the original ({diff})"
    for attr in ("random", "rng"):
        a, b = getattr(model, attr, None), getattr(branch, attr, None)
        if a is not None and a is b:
            return f"shares the original's random-number generator model.{attr}"
    orig_agents = {id(a) for a in _agents(model)}
    orig_cells = {id(c) for c, _ in cells}
    for _name, space in _spaces(model):
        orig_cells.update(id(c) for c in space._cells.values())
    branch_cells: dict[int, Any] = {}
    for _name, space in _spaces(branch):
        branch_cells.update((id(c), c) for c in space._cells.values())
    # an agent's model is the copy, or (a wrapper -- an environment holding a Mesa model -- whose agents belong to
    # the inner model) the copy of its original's model: never the original's own model
    orig_models = {id(model)} | {id(a.model) for a in _agents(model) if hasattr(a, "model")}
    for b in _agents(branch):
        if id(b) in orig_agents:
            return f"shares agent {getattr(b, 'unique_id', b)!r} with the original"
        if hasattr(b, "model") and (id(b.model) in orig_models or
                                    (b.model is not branch and id(b.model) not in _reachable_models(branch))):
            return f"has agent {getattr(b, 'unique_id', b)!r} whose model is not the copy"
        cell = getattr(b, "cell", None)
        if cell is None or not hasattr(cell, "connections"):
            continue
        if id(cell) in orig_cells:
            return f"has agent {b.unique_id!r} standing in a cell of the original's space"
        if branch_cells and id(cell) not in branch_cells:
            return (f"has agent {b.unique_id!r} in a cell {getattr(cell, 'coordinate', '?')} that is not part of "
                    f"the copied space (its neighbourhood would be empty)")
        if any(id(n) in orig_cells for n in cell.connections.values()):
            return f"has cell {cell.coordinate} linked to cells of the original"
    for (name, _space), (_, bspace) in zip(_spaces(model), _spaces(branch)):
        layers = getattr(bspace, "_mesa_property_layers", None) or {}
        if not layers or not bspace._cells:
            continue
        cls = type(next(iter(bspace._cells.values())))
        for lname, layer in layers.items():
            acc = inspect.getattr_static(cls, lname, None)
            target = getattr(acc, "layer", None)
            if isinstance(acc, property) and acc.fget is not None and acc.fget.__closure__:
                target = acc.fget.__closure__[0].cell_contents
            if target is not None and target is not layer and target is not getattr(layer, "data", None):
                return f"reads property layer {name}.{lname} of the original through its cells"
    sim = getattr(model, "simulator", None)
    if sim is not None and getattr(sim, "model", None) is model:
        bsim = getattr(branch, "simulator", None)
        if bsim is sim or getattr(bsim, "model", None) is not branch:
            return "shares the original's simulator"
    # the check a replay gets (one implementation): a hand-written __deepcopy__ (or a container's) that copies an
    # object shallowly leaves the copy writing into the original's own state, which the digest does not look into
    shared = shared_state(model, branch)
    if shared:
        more = ", ..." if len(shared) > 5 else ""
        return (f"holds the original's own mutable objects ({', '.join(shared[:5])}{more}): a __deepcopy__ that "
                "copies shallowly shares them, so the fork's steps would write into the "
                "original's state; copy them in __deepcopy__ (copy.deepcopy(value, memo)) or fork by replay "
                "(factory=...)")
    return None


# ---------------------------------------------------------------------------------------------- replay
def replay_plan(model: Any, factory: Callable[[], Any] | None, step: StepFn | None) -> Lineage:
    """The history that rebuilds ``model``: its lineage, or ``model.steps`` plain steps with ``step``.

    Raises:
        ReplayUnavailableError: no factory is known, or the history cannot be told.
    """
    lin = lineage(model)
    fac = factory or (lin.factory if lin is not None else None)
    name = type(model).__name__
    if fac is None:
        raise ReplayUnavailableError(
            f"cannot fork {name} by replay: no factory is known. Pass factory=... (a callable returning a "
            f"fresh {name} in its initial state, with the same seed) or run it through a Scenario")
    if not callable(fac):
        raise ReplayUnavailableError(f"factory must be a callable returning a fresh model; got {fac!r}")
    actual = getattr(model, "steps", None)
    actual = int(actual) if isinstance(actual, int | np.integer) and not isinstance(actual, bool) else None
    if lin is not None and lin.segments:
        plan = Lineage(fac, list(lin.segments))
        recorded = plan.steps()
        if actual is None or actual == recorded:
            return plan
        fns = {s[2] if s[0] == "step" else s[3] for s in lin.segments if s[0] != "apply"}
        if any(s[0] != "step" for s in lin.segments) or len(fns) > 1 or actual < recorded:
            raise ReplayUnavailableError(
                f"cannot replay {name}: model.steps is {actual} but aumann saw {recorded} step(s) and "
                f"interventions; the model was stepped outside simulate()/fork(), so its history is unknown")
        return Lineage(fac, [("step", actual, next(iter(fns)))])
    if actual is None:
        raise ReplayUnavailableError(
            f"cannot replay {name}: it has no 'steps' counter and did not run through simulate(), so the "
            f"number of steps to replay is unknown")
    return Lineage(fac, [("step", actual, step)] if actual else [])


def run_plan(plan: Lineage) -> Any:
    """Rebuild a model with ``plan.factory`` and re-run ``plan.segments``; registers its lineage."""
    model = plan.factory()
    if model is None:
        raise ReplayUnavailableError("the factory returned None; it must return a fresh model")
    total, k = plan.steps(), 0  # a scenario's step failing here says "step k of total", as in simulate()
    for seg in plan.segments:
        if seg[0] == "step":
            for _ in range(seg[1]):
                k += 1
                _replay_step(model, seg[2], k, total)
        elif seg[0] == "apply":
            _replay_intervention(seg[1], model, k, total, "applied once")
        else:
            _, g, n, fn = seg
            for _ in range(n):
                _replay_intervention(g, model, k, total, "applied before every step")
                k += 1
                _replay_step(model, fn, k, total)
    set_lineage(model, plan)
    return model


def _replay_step(model: Any, step: StepFn | None, k: int, total: int) -> None:
    """Step ``k`` (from 1) of the ``total`` a replay re-runs. A scenario's step names itself (a
    :class:`~aumann.errors.ScenarioCodeError`, ``step k of total``); an exception of a plain step function (or of
    the model's own ``step()``) becomes a :class:`~aumann.errors.ModelStepError` saying the same, with the original
    chained, as :func:`~aumann.simulators.simulate` says it (it escaped bare from a fork by replay)."""
    try:
        advance(model, _placed(step, k, total))
    except (AumannError, MemoryError):
        raise
    except Exception as exc:
        s = getattr(model, "steps", None)
        label = f" (model.steps = {s})" if isinstance(s, int) and not isinstance(s, bool) else ""
        raise ModelStepError(
            f"{type(model).__name__}'s step raised {type(exc).__name__} at step {k} of {total} of a replay (the "
            f"model rebuilt from its factory and re-stepped to fork it){label}: {exception_message(exc)}; a step "
            "that ran in the original run and fails in its replay depends on something the factory does not "
            "rebuild (a global, a file, a generator not seeded from the model) (the original traceback is chained "
            "above)") from exc


def _replay_intervention(g: Callable[[Any], Any], model: Any, k: int, total: int, how: str) -> None:
    """An intervention a replay re-applies after ``k`` of its ``total`` steps: an exception of its own is an
    :class:`~aumann.errors.InterventionError` naming it, the replay and the step (as :func:`_replay_step` names a
    failing step)."""
    when = f"before replayed step {k + 1} of {total}" if k < total else f"after the last of the {total} replayed steps"
    apply_intervention(
        g, model, f"in a replay of {type(model).__name__} (the model rebuilt from its factory and re-run to fork it), "
        f"where it was re-applied {when} ({how}){model_step_label(model)}",
        hint="an intervention that ran in the original run and fails in its replay depends on something the factory "
             "does not rebuild (a global, a file, a generator not seeded from the model)")


def replay_model(model: Any, factory: Callable[[], Any] | None = None, step: StepFn | None = None) -> Any:
    """A new model in ``model``'s state, rebuilt by replaying its history; checked against it.

    Raises:
        ReplayUnavailableError: no factory, or no way to tell the history.
        ReplayDivergedError: the replayed model is not in ``model``'s state.

    Warns:
        SharedStateWarning: the replayed model holds mutable objects of ``model`` itself (four levels deep; see
            :func:`aumann.simulators.sharing.shared_state`), e.g. a module-level default graph.
    """
    plan = replay_plan(model, factory, step)
    branch = run_plan(plan)
    shared = shared_state(model, branch)
    why = ""
    if shared:
        name = type(model).__name__
        why = (f"the replayed {name} holds the original's own mutable objects ({', '.join(shared[:5])}"
               f"{', ...' if len(shared) > 5 else ''}): the factory gives every model the same object (a module-level "
               "default argument, a global), so the constructor and the replayed steps write into the original's "
               "state and the branch is not independent of it. Build a fresh object in the factory (e.g. "
               f"factory=lambda: {name}(graph=make_graph())) or fork by copy, which copies what the model holds")
    diff = digest_difference(state_digest(model), state_digest(branch))
    if diff is not None:
        name = type(model).__name__
        unseeded = ""
        if model_given_no_seed(model):  # Model() with no seed: entropy no factory can give again
            unseeded = (f". {name} was built with no seed: Mesa then seeds model.random and model.rng from the "
                        "operating system's entropy, so no factory rebuilds it; give the model a seed that reaches "
                        "mesa.Model.__init__ (super().__init__(rng=seed)) and the factory the same one, or fork by "
                        "copy")
        raise ReplayDivergedError(
            f"replaying {name} ({plan.steps()} step(s) from the factory) does not reproduce the "
            f"model: {diff}. The factory must rebuild the exact initial state (same seed and parameters) "
            f"and the step function and interventions must be deterministic{unseeded}"
            + (f"; also, {why}" if why else ""))
    if why:
        import warnings

        warnings.warn(SharedStateWarning(f"fork by replay: {why}"), stacklevel=3)
    lin = lineage(model)
    if lin is not None:
        lin.factory = lin.factory or plan.factory
    return branch


__all__ = ["Lineage", "PlacedStep", "advance", "copy_model", "copy_problem", "default_step", "digest_difference",
           "lineage", "override_next_step", "record", "replay_model", "replay_plan", "run_plan", "set_lineage",
           "state_digest"]
