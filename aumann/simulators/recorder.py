"""Observer hook: capture named per-agent features after every step into a (T, N, D) buffer.

A recording fills ``values[t, i, d] = feature_d(agent_i)`` after step ``t`` (float64), with the
agent axis fixed by ``unique_id`` in ascending order, and returns the engine's
:class:`~aumann.attribution.Panel`. Nothing patches the user's model: the runner
(:func:`aumann.simulators.simulate`) or the user calls :meth:`Recording.capture` explicitly.

Agents that enter or leave mid-run keep one fixed row each. ``alive[t, i]`` is ``True`` when agent
``i`` was present at capture ``t``; absent rows hold ``0.0`` in ``values`` (and the attribution
engine holds them at the baseline, so they receive zero attribution). When every agent is present
at every step the panel's ``alive`` is ``None``.

Two paths:

* :class:`FeatureRecorder` -- per-agent extractors (attribute names or ``fn(agent) -> number``),
  like Mesa ``DataCollector`` agent reporters. One Python call per agent per feature per step.
* :class:`ArrayRecorder` (also ``FeatureRecorder.from_arrays``) -- for vectorised models that keep
  agent state in numpy arrays: ``fn(model) -> {name: array (N,)}`` is copied column-wise into the
  preallocated buffer, with no per-agent Python loop. The agent axis is fixed at the first capture.

World state that is not attributed (prices, rates) is recorded with ``context={name: fn(model)}``
into ``Panel.context`` (leading dimension T). With ``alive_context="alive"`` a recorder also puts
the presence mask into the context, ``context["alive"]`` (T, N) as 1.0/0.0 (all ones when nobody
enters or leaves), so an indicator can average over the living agents only — e.g.
``f(z, context) = Σ_i alive_i z_i / Σ_i alive_i`` — whatever value the engine holds dead rows at.
"""

from __future__ import annotations

import math
import operator
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aumann.checks import FLOAT32_MAX, FLOAT64_EXACT_INTEGERS, _shown, exact_integers, refuse_mixed_labels, user_code
from aumann.errors import (
    AgentIdChangedError,
    AumannError,
    FeatureValueError,
    MemoryBudgetError,
    NoAgentsRecordedError,
    PanelError,
    ReusedAgentIdError,
    ShapeError,
    UnknownAttributeError,
)
from aumann.io import memory_bytes
from aumann.labels import label_column, refuse_nul_twins
from aumann.panel import _alive_mask
from aumann.simulators.recording import (
    FeatureFn,
    Recording,
    Rounded,
    _as_float_column,
    _check_finite,
    _default_agents,
    _RecorderBase,
    note_rounded,
)

_REUSED_IDS = ("error", "new_agent", "same_agent")


@dataclass
class _RowBuffer:
    """A FeatureRecorder's capture buffer: one row per agent ever seen (grown by doubling)."""

    steps: int
    values: np.ndarray
    alive: np.ndarray
    ids: list[Any] = field(default_factory=list)
    col: dict[Any, int] = field(default_factory=dict)  # unique_id -> the row of its current agent
    # per row: a weak reference to the agent object last seen (None where the object takes none), its type name,
    # the first and last capture it was present at, and its incarnation (0, then 1, 2 for reused_ids="new_agent")
    refs: list[weakref.ref | None] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    first: list[int] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    gen: list[int] = field(default_factory=list)
    # per row (agents=fn): its object was the same at two captures in a row, so agents=fn returns the model's own
    # object for it (not a new proxy each capture), and another object under its id is a replacement
    held: list[bool] = field(default_factory=list)
    # id() of each agent object known to be the model's own (default agents: all; agents=fn: once ``held``) -> its
    # row (the row's weak reference in ``refs`` tells a live entry from a recycled id()): such an object back under
    # another unique_id changed its id. Fresh proxies (agents=fn) never enter: the map stays one entry per row at most
    rows_of: dict[int, int] = field(default_factory=dict)
    step_labels: list[Any] = field(default_factory=list)  # the model's ``steps`` at each capture (for messages)
    # per Python type of unique_id: the first id of that type, its agent's class name and the capture it appeared at
    id_types: dict[type, tuple[Any, str, int]] = field(default_factory=dict)
    rounded: Rounded = field(default_factory=dict)  # integers past ±2**53 float64 changed, per feature


@dataclass
class _ArrayBuffer:
    """An ArrayRecorder's capture buffer: fixed N rows, allocated at the first capture."""

    steps: int
    features: tuple[str, ...] = ()
    values: np.ndarray | None = None
    alive: np.ndarray | None = None
    n: int | None = None
    ids_value: Any = None
    rounded: Rounded = field(default_factory=dict)  # integers past ±2**53 float64 changed, per feature
    exact: int = FLOAT64_EXACT_INTEGERS  # the values' dtype holds every integer up to this (float32: 2**24)


def _grown_rows(rec: _RowBuffer, n: int, t: int) -> int:
    """The agent rows a FeatureRecorder's buffer grows to now that ``n`` agents were seen (twice the rows it has,
    or ``n`` where twice does not fit), checked against this machine's memory before anything is allocated.

    The buffer holds every step for every agent ever seen, so births grow it past what
    :meth:`~aumann.scenarios.Scenario.check_size` saw before the run (the population at the start): 20,000 births a
    step over 2,000 steps asked numpy for 2.4 GiB at the 8th capture, 19 GiB by the 60th, and a growth that the
    kernel grants but the machine cannot hold ends in the OOM killer, not in an error. Growing copies the buffer,
    so the old and the new one are held at once: that (a lower bound of what the run holds) is what is compared.

    Raises:
        MemoryBudgetError: even ``n`` rows (with the buffer held now) are more than this machine's memory.
    """
    rows, steps, d = rec.values.shape[1], rec.steps, rec.values.shape[2]
    per_row = steps * (8 * d + 1)  # float64 values and the bool alive mask
    have = memory_bytes()
    for cap in (max(n, 2 * rows), n):
        if (rows + cap) * per_row <= have:
            return cap
    born = n - sum(1 for f in rec.first if f == 0)
    raise MemoryBudgetError(
        f"the recorded panel outgrows this machine's memory at capture {t}: {n:,} agents seen so far ({born:,} of "
        f"them after the first capture), and {steps:,} steps × {n:,} agents × {d} feature(s) (float64) need "
        f"{n * per_row / 2**30:,.1f} GiB, {(rows + n) * per_row / 2**30:,.1f} GiB while the buffer grows, more than "
        f"this machine's {have / 2**30:,.1f} GiB: record fewer steps, or fewer agents (agents=fn), or have fewer "
        "agents born")


def _check_orderable(rec: _RowBuffer, uid: Any, agent: Any, t: int) -> None:
    """Refuse, at the capture it appears at, a unique_id that cannot be ordered with the ids seen before (a text id
    among numbers: a model that gives one agent class ids such as ``"fish-3"`` and leaves Mesa's integers on the
    others). Panel rows are ordered by unique_id, so such a recording could only fail once every step had run.

    Raises:
        FeatureValueError: naming both ids, their agent classes and the captures they appeared at.
    """
    for other, (seen, kind, first) in rec.id_types.items():
        try:
            _ = uid < seen  # only whether the two can be ordered
        except TypeError:
            plain = kind if isinstance(uid, str) else type(agent).__name__  # the class whose ids are not text
            raise FeatureValueError(
                f"agent unique_ids of different kinds cannot be ordered: a {type(agent).__name__} has unique_id "
                f"{_shown(uid)} ({type(uid).__name__}) at capture {t}, a {kind} has {_shown(seen)} "
                f"({other.__name__}, since capture {first}); panel rows are ordered by unique_id. Give every agent "
                f"class ids of one kind (e.g. text: self.unique_id = f\"{plain.lower()}-{{self.unique_id}}\" in "
                f"{plain}.__init__ after super().__init__), or record the agents of one kind only (agents=fn(model))"
            ) from None
    rec.id_types[type(uid)] = (uid, type(agent).__name__, t)


def _capture_label(rec: _RowBuffer, c: int) -> str:
    label = rec.step_labels[c] if c < len(rec.step_labels) else None
    return f"capture {c}" + ("" if label is None else f" (model step {_shown(label)})")


def _check_same_id(rec: _RowBuffer, j: int, uid: Any, agent: Any, t: int) -> None:
    """Refuse an agent object recorded before under another unique_id (a model that renumbers its agents, or sets
    ``unique_id`` on a later step than the one the agent was first recorded at): one row per id would make the one
    agent two, one leaving and one born at capture ``t``. Called only where ``uid``'s row does not hold ``agent``
    already (a new id, or an id whose row holds another object) and ``rec.rows_of`` maps ``id(agent)`` to row ``j``,
    so an unchanged population costs nothing.

    Raises:
        AgentIdChangedError: naming the agent's class, both ids and the captures.
    """
    ref = rec.refs[j]
    if ref is None or ref() is not agent or rec.ids[j] == uid:  # a recycled id(), or the id's own earlier row
        return
    kind = type(agent).__name__
    mesa = _renumbered_by_mesa(agent, rec.ids[j])
    raise AgentIdChangedError(
        f"agent unique_id changed during the recording: a {kind} had unique_id {_shown(rec.ids[j])} from "
        f"{_capture_label(rec, rec.first[j])} to {_capture_label(rec, rec.last[j])}, and the same {kind} object has "
        f"unique_id {_shown(uid)} at {_capture_label(rec, t)}; one row per id would record this one agent as two "
        f"(one leaving the model, one born). {mesa}{'Otherwise, keep' if mesa else 'Keep'} each agent's unique_id "
        f"for its whole life: set it once, in {kind}.__init__ right after super().__init__, and keep a number the "
        "model changes in another attribute (e.g. self.rank); or pass FeatureRecorder(..., reused_ids='same_agent') "
        "to record each id as one agent, whichever object has it")


def _renumbered_by_mesa(agent: Any, old: Any) -> str:
    """The sentence for a model whose ``register_agent`` numbers the agents it registers (Mesa >= 3.4.2 keeps the next
    id in ``model.agent_id_counter``; Mesa 3.3 set the id in ``Agent.__init__`` and registering again kept it), where
    the id may have changed without the model touching it: an agent registered again. Empty for other models."""
    model = getattr(agent, "model", None)
    if not isinstance(getattr(model, "agent_id_counter", None), int):
        return ""
    return ("If the model registered it again (model.register_agent(agent), e.g. to bring back an agent it removed): "
            "from Mesa 3.4.2 on, register_agent gives every agent it registers the next unique_id (Mesa 3.3 kept the "
            "agent's id), so restore it right after registering: uid = agent.unique_id; model.register_agent(agent); "
            f"agent.unique_id = uid (here {_shown(old)}). ")


def _check_buffer(steps: int, n: int, d: int, dtype: Any) -> None:
    """Refuse a recorder buffer of ``steps`` × ``n`` agents × ``d`` features (and its bool alive mask) larger than
    this machine's memory, before it is allocated: ``np.zeros`` is granted lazily, and the run ended in the OOM killer
    as the steps filled it.

    Raises:
        MemoryBudgetError: the buffer cannot fit, with its size and the machine's memory.
    """
    dt = np.dtype(dtype)
    need, have = steps * n * (dt.itemsize * d + 1), memory_bytes()
    if need > have:
        raise MemoryBudgetError(
            f"the recorded panel cannot fit this machine's memory: {steps:,} steps × {n:,} agents × {d} feature(s) "
            f"({dt.name}) need {need / 2**30:,.1f} GiB, more than its {have / 2**30:,.1f} GiB: record fewer steps or "
            "fewer agents")


def _check_alive_context(name: Any) -> str | None:
    if name is not None and (not isinstance(name, str) or not name):
        raise FeatureValueError(f"alive_context must be a context name (str) or None; got {name!r}")
    return name


def _alive_row(raw: Any, n: int, t: int) -> np.ndarray:
    """An ArrayRecorder's alive mask at capture ``t`` by the Panel's rule (bool, or integers 0/1: a float mask
    is ambiguous, ``astype(bool)`` would make NaN and 0.5 alive)."""
    try:
        return _alive_mask(raw, (1, n), first_step=t)[0]
    except ShapeError:
        raise FeatureValueError(f"alive mask has shape {np.shape(raw)} at capture {t}; expected ({n},)") from None
    except PanelError as exc:
        raise FeatureValueError(f"ArrayRecorder alive at capture {t}: {exc}") from None


#: what FeatureRecorder says of a unique_id that cannot key a row, and so ArrayRecorder of such an agent_ids entry
_ID_KINDS = "ids key the agent rows (use ints, strs or tuples of them)"


def _agent_ids(value: Any) -> np.ndarray:
    """An ArrayRecorder's ``agent_ids`` as an (N,) array, one id per row. A tuple ((x, y) grid coordinates) is one id,
    as a model's tuple unique_id is in :class:`FeatureRecorder` (the panel labels it by its text, ``"(0, 1)"``): numpy
    read ``[(0, 1), (0, 2)]`` as an (N, 2) array, refused as "agent_ids has shape (2, 2); expected (2,)", and tuples of
    different lengths as "must be N scalar ids (ints or strs)", where FeatureRecorder takes the same ids. An id that
    cannot key a row (a list, a row of a 2-D array) is refused in FeatureRecorder's words: which id, that it is not
    hashable, and the kinds that work."""
    items = list(value) if isinstance(value, list | tuple) else None
    if items is not None and any(isinstance(u, tuple | list | np.ndarray) for u in items):
        for k, u in enumerate(items):
            try:
                hash(u)
            except TypeError:  # a list, an array, a tuple holding one
                raise FeatureValueError(f"agent id {_shown(u)} ({type(u).__name__}) at agent_ids[{k}] is not "
                                        f"hashable; {_ID_KINDS}") from None
        ids = label_column(items)
    else:
        if items is not None:  # (numpy drops trailing NULs: 'a\x00' and 'a' were "repeated: ['a']")
            refuse_nul_twins(items)
        try:
            ids = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise FeatureValueError(f"agent_ids must be N ids, one per row; got {_shown(value)} "
                                    f"({type(exc).__name__}: {str(exc)[:120]})") from None
        if ids.ndim == 2:  # rows of a 2-D array: no row is one id
            raise FeatureValueError(f"agent id {_shown(ids[0].tolist())} (row 0 of agent_ids, a 2-D array of shape "
                                    f"{ids.shape}) is not hashable; {_ID_KINDS}: "
                                    "agent_ids=[tuple(row) for row in ids] keeps each row as one id")
    refuse_mixed_labels(value, ids, "agent_ids", error=FeatureValueError)
    return ids


def _mesa_attribute_name(reporter: Any) -> Any:
    """The attribute name behind a Mesa ``DataCollector`` attribute reporter, else the reporter itself.

    Mesa turns ``agent_reporters={"energy": "energy"}`` into ``getattr(agent, "energy", None)``: recorded as that
    function, an agent type without the attribute (grass patches among wolves and sheep, viruses among antibodies)
    gives ``None`` and fails the capture, where the attribute name skips the type as a recorder given names does."""
    code = getattr(reporter, "__code__", None)
    cells = getattr(reporter, "__closure__", None)
    if (code is not None and cells and "attribute_name" in code.co_freevars  # Mesa 3.5's also closes over "name"
            and getattr(reporter, "__name__", "") == "attr_reporter"):
        try:
            name = cells[code.co_freevars.index("attribute_name")].cell_contents
        except ValueError:  # an empty cell
            return reporter
        if isinstance(name, str):
            return name
    return reporter


class _TypeReporter:
    """One feature of a Mesa ``DataCollector``'s ``agenttype_reporters``: the reporter of the agent's own type (the
    most specific one in its class's MRO, so a ``Sheep`` reporter wins over an ``Animal`` one), else the
    ``agent_reporters`` one of the same name. An agent of no listed type and no fallback raises ``AttributeError``,
    so the recorder leaves its type out as it does a type without a named attribute."""

    __slots__ = ("by_type", "fallback", "name")

    def __init__(self, name: str, by_type: dict[type, Callable[[Any], Any]],
                 fallback: Callable[[Any], Any] | None) -> None:
        self.name, self.by_type, self.fallback = name, by_type, fallback

    def __call__(self, agent: Any) -> Any:
        for klass in type(agent).__mro__:
            fn = self.by_type.get(klass)
            if fn is not None:
                return fn(agent)
        if self.fallback is None:
            raise AttributeError(f"no reporter {self.name!r} for agent type {type(agent).__name__}")
        return self.fallback(agent)


def _reporter_getter(reporter: Any) -> Callable[[Any], Any]:
    spec = _mesa_attribute_name(reporter)
    return operator.attrgetter(spec) if isinstance(spec, str) else spec


def _raises(getter: Callable[[Any], Any], agent: Any, kind: type[Exception] = Exception) -> bool:
    """Whether ``getter(agent)`` raises ``kind`` (any other failure is not the one being looked for)."""
    try:
        getter(agent)
    except kind:
        return True
    except Exception:
        return False
    return False


class FeatureRecorder(_RecorderBase):
    """Per-agent feature extractors, captured after every step into a preallocated (T, N, D) buffer.

    Args:
        features: ordered mapping feature name → attribute name (``"wealth"``) or callable
            ``fn(agent) -> number``. The panel's features keep this order.
        agents: ``fn(model) -> iterable of agents``. Default: the agents of ``model.agents`` whose type has
            every requested feature (types without one are skipped, listed in ``skipped_types``, the panel's
            ``meta["skipped_agent_types"]`` and a :class:`~aumann.errors.RecorderWarning`); with ``agents=``
            every agent it returns must have them. Agents are keyed by ``agent.unique_id`` and sorted
            ascending in the panel.
        alive_context: also record the presence mask as ``Panel.context[alive_context]`` (T, N) floats.
        reused_ids: what to do when a ``unique_id`` comes back on a *different* agent object after its agent left
            the model (a newborn given a dead agent's id by hand), which one row per id would merge into one
            agent with a gap. ``"error"`` (default): a :class:`~aumann.errors.ReusedAgentIdError` naming the id
            and the captures. ``"new_agent"``: the newcomer gets its own row, and every panel id is the pair
            ``(unique_id, incarnation)`` (0 for an id's first agent, 1 for the next, ...), in this mode even
            when no id is reused. ``"same_agent"``: one row per id, as before the check (for ``agents=fn``
            returning fresh proxy objects for the same agents at each capture). The same object removed and
            re-added is one agent in every mode. A replacement within one step (an agent removed and a new one
            given its id before the next capture) is detected too: with the default agents always; with
            ``agents=fn`` once the id's object was the same at two captures in a row (the model's own agents;
            fresh proxy objects at every capture are not taken for replacements), and always for an id absent
            for at least one capture. Agents that take no weak reference (``__slots__`` without
            ``__weakref__``) are not checked. In the ``"error"`` and ``"new_agent"`` modes an agent
            object recorded under one ``unique_id`` and later under another (a model that renumbers its agents) is
            an :class:`~aumann.errors.AgentIdChangedError`, not two agents (with ``agents=fn``, for an object that
            was the same at two captures in a row).

    Raises:
        FeatureValueError: empty ``features`` or an extractor that is neither str nor callable.
        ReusedAgentIdError: at capture, a reused ``unique_id`` (with ``reused_ids="error"``).
        AgentIdChangedError: at capture, an agent object whose ``unique_id`` changed (unless
            ``reused_ids="same_agent"``).

    Example:
        >>> rec = FeatureRecorder({"wealth": "wealth", "deg": lambda a: len(a.neighbors)})  # doctest: +SKIP
        >>> panel = simulate(model, steps=50, recorder=rec)                                # doctest: +SKIP
    """

    _counts_transients = True  # Mesa agents one by one: those present at no capture are counted (Recording.stepping)

    def __init__(
        self,
        features: Mapping[str, str | FeatureFn],
        *,
        agents: Callable[[Any], Iterable[Any]] | None = None,
        alive_context: str | None = None,
        reused_ids: str = "error",
    ) -> None:
        self.alive_context = _check_alive_context(alive_context)
        if not isinstance(reused_ids, str) or reused_ids not in _REUSED_IDS:
            raise FeatureValueError(f"reused_ids must be one of {list(_REUSED_IDS)}; got {_shown(reused_ids)}")
        self.reused_ids = reused_ids
        if not isinstance(features, Mapping) or not features:
            raise FeatureValueError(
                f"features must be a non-empty mapping name -> attribute name or fn(agent); got {features!r}"
            )
        self.features = tuple(str(k) for k in features)
        self._specs = dict(features)
        self._getters: list[Callable[[Any], Any]] = []
        for name, spec in features.items():
            if isinstance(spec, str):
                self._getters.append(operator.attrgetter(spec))
            elif callable(spec):
                self._getters.append(spec)
            else:
                raise FeatureValueError(
                    f"feature {name!r} must be an attribute name (str) or a callable fn(agent); got {spec!r}"
                )
        self.agents = agents or self._agents_with_features
        self._model_agents = agents is None  # the model's own agent objects: an identity check at every capture
        self.skipped_types: dict[str, str] = {}  # agent types left out by default: type name → missing feature
        self._type_ok: dict[type, bool] = {}
        self._available: dict[str, list[str]] = {}  # what the skipped types do have (for the error message)
        self._only_types: tuple[type, ...] | None = None  # from_datacollector with agenttype_reporters only

    def _agents_with_features(self, model: Any) -> list[Any]:
        """The default agents: those of the types that have every requested feature (Mesa models mix types,
        e.g. wolves, sheep and grass patches; a recorder of ``energy`` skips the patches). Each type is
        checked once, on its first agent; types left out are listed in ``skipped_types`` and said once."""
        out = []
        only = self._only_types
        for a in _default_agents(model):
            if only is not None and not isinstance(a, only):
                continue
            cls = type(a)
            ok = self._type_ok.get(cls)
            if ok is None:
                ok = self._type_ok[cls] = self._has_features(a)
            if ok:
                out.append(a)
        return out

    def _records_agent(self, agent: Any) -> bool:
        """Whether ``agent`` (removed during a step, before any capture saw it) would have been recorded: with
        ``agents=fn`` every agent counts (the function cannot be asked about an agent no longer in the model); by
        default those of a type this recording records, or, for a type no capture has met, one that lacks none of
        the features given as attribute names. It runs inside the model's step, so no feature function is called
        (one that draws from the model's RNG would change the run)."""
        if not self._model_agents:
            return True
        if self._only_types is not None and not isinstance(agent, self._only_types):
            return False
        ok = self._type_ok.get(type(agent))
        if ok is not None:
            return ok
        for spec in self._specs.values():
            if isinstance(spec, _TypeReporter):
                if spec.fallback is None and not any(k in spec.by_type for k in type(agent).__mro__):
                    return False
            elif isinstance(spec, str):
                try:
                    operator.attrgetter(spec)(agent)
                except AttributeError:
                    return False
                except Exception:  # the attribute's own failure (a property): such an agent would be recorded
                    continue
        return True

    def _has_features(self, agent: Any) -> bool:
        for name, getter in zip(self.features, self._getters):
            try:
                getter(agent)
            except AttributeError:
                spec = self._specs[name]
                missing = (spec if isinstance(spec, str) else spec.name if isinstance(spec, _TypeReporter)
                           else f"{name} (its function raised AttributeError)")
                self.skipped_types[type(agent).__name__] = missing
                self._available[type(agent).__name__] = sorted(k for k in vars(agent) if not k.startswith("_"))
                import warnings

                from aumann.errors import RecorderWarning

                warnings.warn(RecorderWarning(
                    f"FeatureRecorder: agents of type {type(agent).__name__} have no {missing!r}; recording the "
                    f"agent types that have every feature {list(self.features)} and skipping "
                    f"{type(agent).__name__} (pass agents=fn(model) to choose the agents yourself)"), stacklevel=2)
                return False
            except Exception:  # anything else is a real error of the feature: recorded (and raised) at capture
                return True
        return True

    @classmethod
    def from_arrays(
        cls,
        fn: Callable[[Any], Mapping[str, Any]],
        *,
        features: Iterable[str] | None = None,
        alive: Callable[[Any], Any] | None = None,
        agent_ids: Callable[[Any], Any] | Any = None,
        dtype: Any = np.float64,
    ) -> ArrayRecorder:
        """The vectorised path: see :class:`ArrayRecorder` (same arguments)."""
        return ArrayRecorder(fn, features=features, alive=alive, agent_ids=agent_ids, dtype=dtype)

    @classmethod
    def from_datacollector(cls, datacollector: Any, *, agents: Callable[[Any], Iterable[Any]] | None = None,
                           reused_ids: str = "error"):
        """A recorder with the agent reporters of an existing Mesa ``DataCollector``.

        Reporter kinds Mesa accepts (attribute names, functions, methods, ``[fn, [params]]``) are
        all supported, as Mesa normalises them into callables. Reporters must return numbers.

        ``agenttype_reporters`` (``{Sheep: {"energy": ...}, Wolf: {"energy": ...}}``) are read too: each agent is
        recorded with the reporters of its own type (the most specific listed class it is an instance of), one
        panel for all types. The features are the reporter names, those of ``agent_reporters`` first; a
        per-type reporter takes the place of the ``agent_reporters`` one of the same name for its type. Every
        listed type must report every feature (else :class:`~aumann.errors.FeatureValueError` naming the type
        and what it lacks): a panel has one set of features for all its agents. With only
        ``agenttype_reporters`` the agents recorded are those of the listed types, as Mesa's own collection.
        """
        reporters = dict(getattr(datacollector, "agent_reporters", None) or {})
        by_type = getattr(datacollector, "agenttype_reporters", None) or {}
        if not reporters and not by_type:
            raise FeatureValueError(
                f"{type(datacollector).__name__} has no agent reporters; "
                f"give DataCollector(agent_reporters={{...}}) or DataCollector(agenttype_reporters={{AgentType: "
                f"{{...}}}})"
            )
        if not by_type:
            return cls({name: _mesa_attribute_name(rep) for name, rep in reporters.items()}, agents=agents,
                       reused_ids=reused_ids)
        if not isinstance(by_type, Mapping) or not all(
                isinstance(t, type) and isinstance(reps, Mapping) for t, reps in by_type.items()):
            raise FeatureValueError(f"agenttype_reporters must map agent classes to {{name: reporter}}; got "
                                    f"{_shown(by_type)}")
        names = list(dict.fromkeys([*reporters, *(n for reps in by_type.values() for n in reps)]))
        for t, reps in by_type.items():
            lacks = [n for n in names if n not in reps and n not in reporters]
            if lacks:
                raise FeatureValueError(
                    f"agenttype_reporters: agent type {t.__name__} reports no {lacks} (other types report them); "
                    f"a panel has one set of features for every agent: give {t.__name__} these reporters too, or "
                    "make them agent_reporters, or build FeatureRecorder({...}, agents=fn) for the types you want")
        features = {n: _TypeReporter(n, {t: _reporter_getter(reps[n]) for t, reps in by_type.items() if n in reps},
                                     _reporter_getter(reporters[n]) if n in reporters else None) for n in names}
        rec = cls(features, agents=agents, reused_ids=reused_ids)
        if not reporters:  # Mesa collects the listed types only: the others are not skipped, they were not asked for
            rec._only_types = tuple(by_type)
        return rec

    def __repr__(self) -> str:
        return f"FeatureRecorder(features={list(self.features)})"

    # ---------------------------------------------------------------- recording internals
    def _start(self, model: Any, steps: int) -> _RowBuffer:
        self.skipped_types = {}
        self._type_ok = {}
        self._available = {}
        cap = max(len(self._agent_list(model, None)), 1)
        _check_buffer(steps, cap, len(self.features), np.float64)
        return _RowBuffer(steps=steps, values=np.zeros((steps, cap, len(self.features)), dtype=np.float64),
                          alive=np.zeros((steps, cap), dtype=bool))

    def _agent_list(self, model: Any, t: int | None) -> list[Any]:
        """The agents to record now, as a list; ``agents=fn`` returning something that is not a collection of
        agents (``None``, a number: a forgotten ``return``) is a typed error naming what it returned."""
        when = "before the first capture" if t is None else f"at capture {t}"
        with user_code(f"agents=fn(model) {when}", error=FeatureValueError):
            got = self.agents(model)
        if isinstance(got, str | bytes | Mapping) or not isinstance(got, Iterable):
            raise FeatureValueError(f"agents=fn(model) must return an iterable of agents (a list, an AgentSet); "
                                    f"it returned {_shown(got)} ({type(got).__name__}) {when}")
        return list(got)

    @staticmethod
    def _new_row(rec: _RowBuffer, uid: Any, agent: Any, t: int, gen: int = 0, track: bool = False) -> int:
        if type(uid) not in rec.id_types:
            _check_orderable(rec, uid, agent, t)
        j = rec.col[uid] = len(rec.ids)
        rec.ids.append(uid)
        try:
            rec.refs.append(weakref.ref(agent))
        except TypeError:  # an object that takes no weak reference: its id cannot be checked for reuse
            rec.refs.append(None)
        else:
            if track:
                rec.rows_of[id(agent)] = j
        rec.kinds.append(type(agent).__name__)
        rec.first.append(t)
        rec.last.append(t)
        rec.gen.append(gen)
        rec.held.append(False)
        return j

    def _reuse_error(self, rec: _RowBuffer, j: int, agent: Any, t: int) -> ReusedAgentIdError:
        def step(c: int) -> str:
            return _capture_label(rec, c)
        old, new = rec.kinds[j], type(agent).__name__
        gone = "is gone" if rec.refs[j]() is None else "is another object"
        when = (f"was present from {step(rec.first[j])} to {step(rec.last[j])}, left the model" if rec.last[j] < t - 1
                else f"was present from {step(rec.first[j])} to {step(rec.last[j])}, was replaced within one step")
        return ReusedAgentIdError(
            f"agent unique_id {_shown(rec.ids[j])} was reused: a {old} with this id {when}, and a different {new} "
            f"object has it at {step(t)} (the {old} recorded before {gone}); one row per id would merge two agents "
            "into one. Give newborn agents fresh ids (Mesa 3 assigns them unless unique_id is set by hand), or pass "
            "FeatureRecorder(..., reused_ids='new_agent') to record the newcomer as a new agent (panel ids become "
            "(unique_id, incarnation) pairs), or reused_ids='same_agent' if agents=fn returns new proxy objects "
            "for the same agents")

    def _columns_for(self, rec: _RowBuffer, agents: list[Any], t: int) -> np.ndarray:
        col, refs, last, held, rows_of = rec.col, rec.refs, rec.last, rec.held, rec.rows_of
        out = np.empty(len(agents), dtype=np.int64)
        check = self.reused_ids != "same_agent"
        # agents=fn may build new proxies each capture: an id is checked after an absence, or once its object was
        # seen twice in a row (the model's own agent, whose replacement within one step is then caught too)
        every = self._model_agents
        for k, a in enumerate(agents):
            try:
                uid = a.unique_id
            except AttributeError:
                raise UnknownAttributeError(
                    f"agent {a!r} has no 'unique_id'; the recorder keys agent rows by unique_id"
                ) from None
            try:  # the lookup itself hashes: an unhashable id (a list) must not escape as a bare TypeError
                j = col.get(uid)
            except TypeError:
                raise FeatureValueError(f"agent unique_id {_shown(uid)} ({type(uid).__name__}) is not hashable; "
                                        "unique_ids key the agent rows (use ints, strs or tuples of them)") from None
            if j is None:
                if check and (seen := rows_of.get(id(a))) is not None:
                    _check_same_id(rec, seen, uid, a, t)
                j = self._new_row(rec, uid, a, t, track=every and check)
            elif check and last[j] < t:  # (last[j] == t: a duplicate, refused below)
                ref = refs[j]
                if ref is not None and ref() is not a:  # the id's recorded object is gone, or another one
                    if (seen := rows_of.get(id(a))) is not None:
                        _check_same_id(rec, seen, uid, a, t)
                    if every or held[j] or last[j] < t - 1:  # reused
                        if self.reused_ids == "error":
                            raise self._reuse_error(rec, j, a, t)
                        j = self._new_row(rec, uid, a, t, rec.gen[j] + 1, track=every)
                    else:  # agents=fn: a new proxy for the agent of the capture before (followed from now on)
                        refs[j] = weakref.ref(a)
                elif ref is not None and not every and not held[j]:  # the model's own object: tracked from now on
                    held[j] = True
                    rows_of[id(a)] = j
            last[j] = t
            out[k] = j
        n = len(rec.ids)
        if n > rec.values.shape[1]:  # grow the agent axis (amortised doubling)
            cap = _grown_rows(rec, n, t)
            grow = cap - rec.values.shape[1]
            rec.values = np.concatenate(
                [rec.values, np.zeros((rec.steps, grow, rec.values.shape[2]), np.float64)], axis=1
            )
            rec.alive = np.concatenate([rec.alive, np.zeros((rec.steps, grow), bool)], axis=1)
        if np.unique(out).size != out.size:
            seen, dup = set(), []
            for k, j in enumerate(out.tolist()):
                if j in seen:
                    dup.append(k)
                seen.add(j)
            a = agents[dup[0]]
            raise FeatureValueError(
                f"duplicate agent unique_id {_shown(rec.ids[out[dup[0]]])} at capture {t}: {len(dup)} agent(s) share "
                f"an id with another (e.g. a {type(a).__name__} with unique_id {_shown(a.unique_id)}; ids equal in "
                "Python, such as 1 and 1.0 or True, are one id, and an agent listed twice by agents= is a duplicate); "
                "ids must be unique")
        return out

    def _extract(self, name: str, getter: Callable[[Any], Any], agents: list[Any], t: int,
                 rounded: Rounded | None = None) -> np.ndarray:
        try:
            raw = [getter(a) for a in agents]
        except AttributeError as exc:
            spec = self._specs[name]
            bad = next((a for a in agents if _raises(getter, a, AttributeError)), agents[0] if agents else None)
            who = (f"agent {_shown(getattr(bad, 'unique_id', None))} ({type(bad).__name__})" if bad is not None
                   else "an agent")
            if isinstance(spec, str):
                have = sorted(k for k in getattr(bad, "__dict__", {}) if not k.startswith("_"))
                kind = type(bad).__name__
                some = any(type(a) is type(bad) and a is not bad and not _raises(getter, a, AttributeError)
                           for a in agents)
                if some:
                    raise UnknownAttributeError(
                        f"feature {name!r}: {who} has no attribute {spec!r} at capture {t}, which other {kind} agents "
                        f"have (it is set on some agents only); its attributes: {have}") from None
                raise UnknownAttributeError(
                    f"feature {name!r}: agents of type {kind} have no attribute {spec!r} ({who} at capture {t}); "
                    f"available attributes: {have}"
                ) from None
            raise FeatureValueError(f"feature {name!r} raised AttributeError for {who} at capture {t}: {exc}") from exc
        except AumannError:
            raise
        except Exception as exc:  # the feature's own function failed (1 / 0, a KeyError): named, not a bare traceback
            bad = next((a for a in agents if _raises(getter, a)), None)
            who = (f"agent {_shown(getattr(bad, 'unique_id', None))} ({type(bad).__name__})" if bad is not None
                   else "an agent")
            try:
                shown = str(exc)[:300]
            except Exception:  # an exception whose __str__ raises
                shown = "(its message cannot be shown)"
            raise FeatureValueError(f"feature {name!r} raised {type(exc).__name__} for {who} at capture {t}: "
                                    f"{shown}") from exc
        col = _as_float_column(name, raw, len(agents), t, agents)
        if rounded is not None:
            note_rounded(rounded, name, raw, col)
        with np.errstate(over="ignore"):
            total = float(col.sum())
        if not math.isfinite(total):  # fast path; the full check names the culprit
            _check_finite(name, col, [getattr(a, "unique_id", None) for a in agents], t)
        return col

    def _capture(self, rec: _RowBuffer, model: Any, t: int) -> None:
        rec.step_labels.append(getattr(model, "steps", None))
        agents = self._agent_list(model, t)
        cols = self._columns_for(rec, agents, t)
        if not agents:
            return
        for d, (name, getter) in enumerate(zip(self.features, self._getters)):
            rec.values[t, cols, d] = self._extract(name, getter, agents, t, rec.rounded)
        rec.alive[t, cols] = True

    def _rounded(self, buffer: _RowBuffer) -> Rounded:
        return buffer.rounded

    def _result(self, rec: _RowBuffer):
        n = len(rec.ids)
        if n == 0:
            why = ""
            if self.skipped_types:
                why = (" (every agent type was skipped for a missing feature: "
                       + "; ".join(f"{t} has no {m!r}, available attributes: {self._available.get(t, [])}"
                                   for t, m in self.skipped_types.items()) + ")")
                raise UnknownAttributeError(f"no agents have the requested features {list(self.features)}{why}")
            raise NoAgentsRecordedError("no agents were ever present during the recording; nothing to record")
        ids = rec.ids if self.reused_ids != "new_agent" else [(u, g) for u, g in zip(rec.ids, rec.gen)]
        try:
            order = sorted(range(n), key=lambda j: ids[j])
        except TypeError:
            raise FeatureValueError(
                f"agent unique_ids cannot be sorted (mixed types? e.g. {ids[:3]!r}); use comparable ids"
            ) from None
        pos = np.asarray(order, dtype=np.int64)
        values = rec.values[:, pos]
        alive = rec.alive[:, pos]
        return values, label_column([ids[j] for j in order]), alive, self.features


class ArrayRecorder(_RecorderBase):
    """Vectorised recorder: whole feature columns per step, no per-agent Python loop.

    Args:
        fn: ``fn(model) -> {feature name: array-like of shape (N,)}``. N must not change during a
            recording (keep a fixed row per agent and report presence with ``alive``).
        features: feature order (default: the keys of the first ``fn(model)`` call, in order).
            Keys of ``fn(model)`` that are not listed are ignored.
        alive: optional ``fn(model) -> bool array (N,)``; absent rows are stored as 0.0.
        alive_context: also record the presence mask as ``Panel.context[alive_context]`` (T, N) floats.
        agent_ids: an array of N ids, or ``fn(model) -> array (N,)`` read at the first capture
            (default ``0 … N-1``). Rows are reordered to ascending id.
        dtype: the panel's dtype, ``float64`` (default) or ``float32`` (half the memory for large N;
            the attribution engine and the indicators upcast one step at a time). float32 holds every integer only
            up to ±2**24: integers it changes are counted (``meta["rounded_values"]``, marked ``"dtype":
            "float32"``) and warned of; a value past float32's range (about ±3.4e38) is a ``FeatureValueError``.

    Example:
        >>> rec = ArrayRecorder(lambda m: {"wealth": m.wealth, "deg": m.degree})   # doctest: +SKIP
    """

    def __init__(
        self,
        fn: Callable[[Any], Mapping[str, Any]],
        *,
        features: Iterable[str] | None = None,
        alive: Callable[[Any], Any] | None = None,
        agent_ids: Callable[[Any], Any] | Any = None,
        dtype: Any = np.float64,
        alive_context: str | None = None,
    ) -> None:
        self.alive_context = _check_alive_context(alive_context)
        if not callable(fn):
            raise FeatureValueError(f"ArrayRecorder needs a callable fn(model) -> mapping; got {fn!r}")
        self.fn = fn
        self._given_features = None if features is None else tuple(str(f) for f in features)
        self.features = self._given_features or ()  # without given features, each recording reads them from fn
        self.alive_fn = alive
        self.agent_ids = agent_ids
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise FeatureValueError(f"ArrayRecorder dtype must be float32 or float64; got {self.dtype}")

    def __repr__(self) -> str:
        return f"ArrayRecorder(features={list(self.features) or 'from first capture'})"

    def _start(self, model: Any, steps: int) -> _ArrayBuffer:
        return _ArrayBuffer(steps=steps)

    def _capture(self, rec: _ArrayBuffer, model: Any, t: int) -> None:
        with user_code(f"ArrayRecorder fn(model) at capture {t}", error=FeatureValueError):
            cols = self.fn(model)
        if not isinstance(cols, Mapping):
            raise FeatureValueError(
                f"ArrayRecorder fn must return a mapping name -> array; got {type(cols).__name__}"
            )
        if rec.values is None:
            feats = self._given_features or tuple(str(k) for k in cols)
            if not feats:
                raise FeatureValueError("ArrayRecorder fn returned no feature columns")
            missing = [f for f in feats if f not in cols]
            if missing:
                raise UnknownAttributeError(
                    f"features {missing} not returned by the array function; it returned {list(cols)}"
                )
            rec.features = feats
            first = np.asarray(cols[feats[0]])
            if first.ndim != 1:
                raise FeatureValueError(f"feature {feats[0]!r} must be 1-D (N,); got shape {first.shape}")
            rec.n = first.shape[0]
            _check_buffer(rec.steps, rec.n, len(feats), self.dtype)
            rec.values = np.zeros((rec.steps, rec.n, len(feats)), dtype=self.dtype)
            rec.exact = exact_integers(rec.values.dtype)
            rec.alive = np.ones((rec.steps, rec.n), dtype=bool)
            ids_spec = self.agent_ids
            with user_code(f"ArrayRecorder agent_ids(model) at capture {t}", error=FeatureValueError):
                rec.ids_value = ids_spec(model) if callable(ids_spec) else ids_spec
        n = rec.n
        mask = None
        if self.alive_fn is not None:
            with user_code(f"ArrayRecorder alive(model) at capture {t}", error=FeatureValueError):
                got = self.alive_fn(model)
            mask = _alive_row(got, n, t)
            rec.alive[t] = mask
        for d, name in enumerate(rec.features):
            if name not in cols:
                raise UnknownAttributeError(
                    f"feature {name!r} missing from the array function's output at capture {t}; "
                    f"got {list(cols)}"
                )
            col = _as_float_column(name, cols[name], n, t)
            stored = col if mask is None else np.where(mask, col, 0.0)  # absent rows hold 0.0
            if stored.size:
                # one min/max read for both checks (as fast as isfinite().all() alone): a non-finite value, and a
                # value past 2**53 (float32: 2**24), where the integers the panel's dtype rounded are counted
                lo, hi = float(stored.min()), float(stored.max())  # (NaN propagates, without a warning)
                if not (math.isfinite(lo) and math.isfinite(hi)):
                    _check_finite(name, col, None, t, mask)
                top = max(hi, -lo)
                if top >= rec.exact:
                    if rec.exact == FLOAT64_EXACT_INTEGERS:
                        note_rounded(rec.rounded, name, cols[name], col, mask)
                    else:
                        self._note_float32(rec, name, cols[name], stored, mask, t, top)
            rec.values[t, :, d] = stored

    @staticmethod
    def _note_float32(rec: _ArrayBuffer, name: str, raw: Any, stored: np.ndarray, mask: np.ndarray | None,
                      t: int, top: float) -> None:
        """Count the integers that float32 changed (past ±2**24) in ``rec.rounded``; refuse a value past float32's
        range, which would be stored as inf. ``top``: the largest magnitude in ``stored``. A float array is only
        checked for the range (floats that float32 rounds are floats as given, not counted).

        Raises:
            FeatureValueError: a finite value past float32's largest (about 3.4e38), naming the feature, the row and
                the capture.
        """
        if top > FLOAT32_MAX:
            with np.errstate(over="ignore"):
                inf = np.isinf(stored.astype(np.float32))
            if inf.any():
                j = int(np.flatnonzero(inf)[0])
                raise FeatureValueError(
                    f"feature {name!r} returned {float(stored[j])!r} for agent row {j} at capture {t}, past float32's "
                    f"range (±{FLOAT32_MAX:.7g}); {int(inf.sum())} value(s) would be stored as inf by "
                    "ArrayRecorder(dtype=float32): record this feature as float64 (dtype=np.float64, the default), or "
                    "scale it (or record its logarithm)")
        kind = raw.dtype.kind if isinstance(raw, np.ndarray) else None
        if kind == "f":
            return
        # an integer array is judged from its own values; a list's items against the float32 values stored
        note_rounded(rec.rounded, name, raw, stored if kind in ("i", "u") else stored.astype(np.float32), mask,
                     np.float32)

    def _rounded(self, buffer: _ArrayBuffer) -> Rounded:
        return buffer.rounded

    def _stored_as(self, buffer: _ArrayBuffer) -> np.dtype:
        return np.dtype(np.float64) if buffer.values is None else buffer.values.dtype

    def _result(self, rec: _ArrayBuffer):
        if rec.values is None:
            raise FeatureValueError("nothing was captured")
        n = rec.n
        ids = np.arange(n) if rec.ids_value is None else _agent_ids(rec.ids_value)
        if ids.shape != (n,):
            raise FeatureValueError(f"agent_ids has shape {ids.shape}; expected ({n},)")
        try:
            order = np.argsort(ids, kind="stable")
        except TypeError:  # ids of kinds Python cannot compare (a tuple beside an int): FeatureRecorder's refusal too
            raise FeatureValueError(f"agent_ids of different kinds cannot be ordered (e.g. "
                                    f"{_shown(ids.tolist()[:3])}); panel rows are ordered by id: give ids of one "
                                    "kind") from None
        if np.all(order == np.arange(n)):
            return rec.values, ids, rec.alive, rec.features
        return rec.values[:, order], ids[order], rec.alive[:, order], rec.features


__all__ = ["ArrayRecorder", "FeatureRecorder", "Recording"]
