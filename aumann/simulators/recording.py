"""Scoped recordings: the (T, N, D) capture buffer machinery shared by every recorder.

A :class:`Recording` is made by ``recorder.recording(model, steps=T)``; it counts captures,
records per-step context (``fn(model)`` → number or array, stacked over T) and Mesa's step labels,
checks on exit that exactly T steps were captured, and builds the
:class:`~aumann.attribution.Panel`. Recorders implement ``_start(model, steps) -> buffer``,
``_capture(buffer, model, t)`` and ``_result(buffer) -> (values, ids, alive, features)``: the buffer is
the recorder's own object, held by the Recording and handed back to it; neither side touches the
other's attributes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from aumann.checks import _shown, float64_changed, user_code, warn_rounded
from aumann.errors import FeatureValueError, NoAgentsRecordedError, StepsMismatchError, UnknownAttributeError
from aumann.simulators.transients import Row, transient_record, transient_text, watch_step

_OK = object()
FeatureFn = Callable[[Any], float]
ContextFn = Callable[[Any], Any]
#: per feature (or context) name: [how many recorded values float64 changed (integers past ±2**53), the largest |v|]
Rounded = dict[str, list[int]]


def note_rounded(tally: Rounded, name: str, raw: Any, col: np.ndarray, keep: np.ndarray | None = None,
                 dtype: Any = np.float64) -> None:
    """Count into ``tally[name]`` the integers of ``raw`` (what a feature or context gave at one capture) that
    ``col``, their float64 values, changed: one min/max read of integer arrays (or of ``col`` for a list of
    numbers), nothing more unless a value is past 2**53 (:func:`~aumann.checks.float64_changed`). ``dtype=float32``:
    ``col`` holds the float32 values stored, and the integers float32 changed (past ±2**24) are counted."""
    n, big = float64_changed(raw, col, keep, dtype)
    if n:
        entry = tally.setdefault(name, [0, 0])
        entry[0] += n
        entry[1] = max(entry[1], big)


def rounded_record(features: Rounded, context: Rounded, features_dtype: Any = np.float64) -> dict[str, Any] | None:
    """The panel's ``meta["rounded_values"]``: ``{"features": {name: {"count", "largest"}}, "context": {...}}``
    (each part only when it has entries), or ``None`` when float64 changed no recorded integer. Features stored as
    float32 (``features_dtype``, ``ArrayRecorder(dtype=float32)``) say so: ``{"count", "largest", "dtype":
    "float32"}`` (their count is of the integers float32 changed, past ±2**24; context is always float64)."""
    single = {"dtype": "float32"} if np.dtype(features_dtype) == np.float32 else {}
    out = {part: {k: {"count": n, "largest": big, **(single if part == "features" else {})}
                  for k, (n, big) in tally.items()}
           for part, tally in (("features", features), ("context", context)) if tally}
    return out or None


def _check_steps(steps: Any) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or int(steps) < 1:
        raise StepsMismatchError(f"steps must be a positive integer; got {steps!r}")
    return int(steps)


def _default_agents(model: Any) -> Iterable[Any]:
    try:
        return model.agents
    except AttributeError:
        raise UnknownAttributeError(
            f"model {type(model).__name__} has no 'agents' attribute (Mesa >= 3 models do); "
            f"pass FeatureRecorder(..., agents=fn) with fn(model) -> iterable of agents"
        ) from None


def _not_a_number(v: Any) -> bool:
    """A value that a cast to float64 would change into another number (or NaN) instead of refusing: None, text,
    a complex (Python, numpy scalar, or a 0-d numpy array of complex or text: ``np.array(1+2j)`` cast to its real
    part, ``np.array("1.5")`` parsed)."""
    if v is None or isinstance(v, str | bytes | complex | np.complexfloating):
        return True
    return isinstance(v, np.ndarray) and v.dtype.kind not in "biuf"


def _whose(agents: list[Any] | None, items: Any, bad: Any) -> str:
    """" for agent 7 (Sheep)": the agent whose feature gave ``bad`` (when the recorder knows its agents)."""
    if agents is None or items is None:
        return ""
    k = next((k for k, v in enumerate(items) if v is bad), None)
    if k is None or k >= len(agents):
        return ""
    a = agents[k]
    return f" for agent {_shown(getattr(a, 'unique_id', None))} ({type(a).__name__})"


def _none_hint(agents: list[Any] | None, items: Any) -> str:
    """What to do about a ``None``: most often a Mesa reporter ``lambda a: getattr(a, "price", None)`` over agents of
    several types, only some of which have the attribute (stores and consumers); say which types gave it."""
    kinds = ""
    if agents is not None and items is not None and len(agents) == len(items):
        none = sorted({type(a).__name__ for a, v in zip(agents, items, strict=True) if v is None})
        some = sorted({type(a).__name__ for a, v in zip(agents, items, strict=True) if v is not None})
        kinds = (f" ({', '.join(none)} gave None" + (f", {', '.join(some)} a value" if some else "") + ")")
    return (f". A reporter such as getattr(a, '<attribute>', None) gives None for agents without the attribute{kinds}: "
            "make it return a number for every agent type (getattr(a, '<attribute>', 0.0), if 0 means something for "
            "them), or report each type with its own reporters, DataCollector(agenttype_reporters={AgentType: "
            "{...}}) (Mesa >= 3.1; FeatureRecorder.from_datacollector reads them), or record only the agents that "
            "have it (FeatureRecorder(..., agents=fn), or give the attribute's name as the reporter: types without "
            "it are then skipped)")


def _as_float_column(name: str, raw: Any, n: int, step: int, agents: list[Any] | None = None) -> np.ndarray:
    items = raw if isinstance(raw, list) else None
    if items is None:  # numpy arrays (and array-likes) are judged by their dtype
        try:
            arr = np.asarray(raw)
        except (TypeError, ValueError):
            arr = None
        if arr is not None and arr.dtype.kind == "c":  # a cast to float64 keeps the real part (a ComplexWarning)
            raise FeatureValueError(
                f"feature {name!r} returned a complex column (dtype {arr.dtype}) at capture {step}; features must "
                "return int, float or bool"
            )
        if arr is not None and arr.dtype == object:
            items = arr.ravel()
    if items is not None:  # numpy would turn None into nan, "1.5" into 1.5 and 1+5j into 1.0: reject them
        bad = next((v for v in items if _not_a_number(v)), _OK)
        if bad is not _OK:
            raise FeatureValueError(
                f"feature {name!r} returned a non-numeric value {bad!r} (type {type(bad).__name__})"
                f"{_whose(agents, items, bad)} at capture {step}; features must return int, float or bool"
                f"{_none_hint(agents, items) if bad is None else ''}"
            )
    try:
        col = np.asarray(raw, dtype=np.float64)
    except OverflowError:  # a Python int beyond float64 (10**400): typed, never a bare OverflowError
        big = next((v for v in (items if items is not None else [raw]) if _too_big(v)), raw)
        raise FeatureValueError(
            f"feature {name!r} returned {_shown(big)}, beyond float64's range (about 1.8e308),"
            f"{_whose(agents, items, big)} at capture {step}; "
            "features must be finite numbers (scale it, or record its logarithm)"
        ) from None
    except (TypeError, ValueError):
        arr = np.asarray(raw, dtype=object).ravel()
        bad = next((v for v in arr if not _is_number(v)), None)
        raise FeatureValueError(
            f"feature {name!r} returned a non-numeric value {bad!r} (type {type(bad).__name__})"
            f"{_whose(agents, items, bad)} at capture {step}; features must return int, float or bool"
        ) from None
    if col.shape != (n,):
        many = next((v for v in items if np.ndim(v) != 0), None) if items is not None and agents is not None else None
        if many is not None:  # a per-agent feature returned several numbers (a list, an array, a position)
            raise FeatureValueError(
                f"feature {name!r} returned {_shown(many)} ({type(many).__name__}){_whose(agents, items, many)} at "
                f"capture {step}; a feature is one number per agent (record each component as its own feature, "
                f"e.g. {{'x': lambda a: a.pos[0], 'y': lambda a: a.pos[1]}})")
        raise FeatureValueError(f"feature {name!r} gave shape {col.shape} at capture {step}; expected ({n},)")
    return col


def _is_number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    except OverflowError:  # a number, just too big for a float
        return True
    return not isinstance(v, str | bytes)


def _too_big(v: Any) -> bool:
    try:
        float(v)
    except OverflowError:
        return True
    except (TypeError, ValueError):
        return False
    return False


def _check_finite(name: str, col: np.ndarray, ids: Any, step: int, mask: np.ndarray | None = None) -> None:
    ok = np.isfinite(col)
    if mask is not None:
        ok |= ~mask
    if not ok.all():
        j = int(np.flatnonzero(~ok)[0])
        agent = ids[j] if ids is not None else j
        raise FeatureValueError(
            f"feature {name!r} returned {float(col[j])!r} for agent {agent!r} at capture {step}; "
            f"{int((~ok).sum())} non-finite value(s) -- features must be finite numbers"
        )


class _ContextBuffer:
    """Per-step world state: name -> fn(model) -> number or array, stacked over T."""

    def __init__(self, context: Mapping[str, ContextFn] | None, steps: int) -> None:
        self.fns = dict(context or {})
        for name, fn in self.fns.items():
            if not callable(fn):
                raise FeatureValueError(f"context {name!r} must be a callable fn(model); got {fn!r}")
        self.steps = steps
        self.data: dict[str, np.ndarray] = {}
        self.rounded: Rounded = {}  # integers past ±2**53 that float64 changed, per context name

    def capture(self, model: Any, t: int) -> None:
        for name, fn in self.fns.items():
            with user_code(f"context {name!r} fn(model) at capture {t}", error=FeatureValueError):
                raw = fn(model)
            try:
                if np.iscomplexobj(raw):  # numpy complex: the cast would keep the real part (a ComplexWarning)
                    raise TypeError("complex")
                val = np.asarray(raw, dtype=np.float64)
            except (TypeError, ValueError, OverflowError) as exc:
                what = "a number beyond float64's range" if isinstance(exc, OverflowError) else "a non-numeric value"
                raise FeatureValueError(f"context {name!r} returned {what} {_shown(raw)} at capture {t}") from None
            if not np.all(np.isfinite(val)):
                raise FeatureValueError(
                    f"context {name!r} returned a non-finite value {raw!r} at capture {t}"
                )
            note_rounded(self.rounded, name, raw, val)
            buf = self.data.get(name)
            if buf is None:
                buf = self.data[name] = np.zeros((self.steps, *val.shape), dtype=np.float64)
            if buf.shape[1:] != val.shape:
                raise FeatureValueError(
                    f"context {name!r} changed shape from {buf.shape[1:]} to {val.shape} at capture {t}"
                )
            buf[t] = val

    def result(self, n: int) -> dict[str, np.ndarray]:
        return {k: v[:n] for k, v in self.data.items()}


class Recording:
    """One scoped recording of ``steps`` captures (made by ``recorder.recording(...)``).

    Call :meth:`capture` once after every step, then :meth:`panel`.
    """

    def __init__(self, recorder: _RecorderBase, steps: int, context: Mapping[str, ContextFn] | None,
                 buffer: Any) -> None:
        self.recorder = recorder
        self.steps = steps
        self.captured = 0
        self._buffer = buffer
        self._context = _ContextBuffer(context, steps)
        self._step_labels: list[Any] = []
        self._transients: list[Row] = []  # per step with agents no capture saw
        self.warn_transients = True  # a TransientAgentsWarning when agents were born and removed within a step
        # a PrecisionLossWarning when recorded integers past ±2**53 (float32: ±2**24) were rounded
        self.warn_rounded = True
        self._panel: Any = None
        self._closed = False

    def capture(self, model: Any) -> None:
        """Record the model's current state as the next step."""
        if self._closed:
            raise StepsMismatchError("this recording is closed; start a new one with recorder.recording(...)")
        if self.captured >= self.steps:
            raise StepsMismatchError(
                f"capture {self.captured + 1} exceeds the declared steps={self.steps}; "
                f"declare more steps in recording(model, steps=...)"
            )
        t = self.captured
        self.recorder._capture(self._buffer, model, t)
        self._context.capture(model, t)
        self._step_labels.append(getattr(model, "steps", None))
        self.captured += 1

    @contextmanager
    def stepping(self, model: Any) -> Iterator[None]:
        """Scope one step of ``model`` (the one before the next :meth:`capture`): the agents it creates and removes
        within the step, which no capture can see, are counted into the panel's ``meta["transient_agents"]``.
        :func:`~aumann.simulators.simulate` and ``fork`` step inside it; by hand: ``with rec.stepping(model):
        model.step()``. Nothing is counted for a recorder that does not record Mesa agents one by one
        (:class:`ArrayRecorder`), a model without Mesa's agent registration, or a step that raises."""
        if not self.recorder._counts_transients:
            yield
            return
        with watch_step(model, keep=self.recorder._records_agent, unseen=self.captured == 0) as watch:
            yield
        if watch is not None:
            born, unseen = watch.transient(), watch.removed_unseen()
            if born or unseen:
                label = getattr(model, "steps", None)
                label = int(label) if isinstance(label, int | np.integer) and not isinstance(label, bool) else None
                self._transients.append((self.captured, label, born, unseen))

    def _steps_axis(self) -> np.ndarray:
        labels = self._step_labels
        if all(isinstance(s, int | np.integer) and not isinstance(s, bool) for s in labels):
            arr = np.asarray(labels, dtype=np.int64)
            if arr.size <= 1 or np.all(np.diff(arr) > 0):
                return arr
        return np.arange(len(labels), dtype=np.int64)

    def _finalise(self) -> None:
        if self.captured != self.steps:
            raise StepsMismatchError(
                f"recording declared steps={self.steps} but captured {self.captured} step(s); "
                f"call rec.capture(model) exactly once per step"
            )
        try:
            self._panel = self._build(self.captured)
        except NoAgentsRecordedError as exc:  # nobody to record: the world state still travels with the refusal
            exc.context = self._context.result(self.captured)
            raise
        self._buffer = None  # the panel owns the arrays now
        rounded = self._panel.meta.get("rounded_values")
        if rounded and self.warn_rounded:
            kind = type(self.recorder).__name__
            warn_rounded([(f"{'feature' if part == 'features' else part} {name!r} ({kind}"
                           f"{', float32' if e.get('dtype') == 'float32' else ''})", e["count"], e["largest"],
                           str(e.get("dtype", "float64"))) for part, d in rounded.items() for name, e in d.items()],
                         stacklevel=2)
        record = self._panel.meta.get("transient_agents")
        if record is not None and self.warn_transients:
            import warnings

            from aumann.errors import TransientAgentsWarning

            warnings.warn(TransientAgentsWarning(
                f"{type(self.recorder).__name__}: {transient_text(record, self.captured)}. They are counted in the "
                "panel's meta['transient_agents']; to keep what they did, record it as world state (context={name: "
                "fn(model)}, e.g. a count the model keeps), or let them live until the step ends"
                + ("; a capture before the first step (simulate(..., initial=True)) gives those there from the start "
                   "a row" if record.get("removed_before_first_capture") else "")), stacklevel=2)

    def partial(self) -> Any:
        """The :class:`~aumann.attribution.Panel` of the captures made so far, for a recording that cannot finish
        (the model's step raised): ``None`` when nothing, or nobody, was captured. The recording stays open."""
        if self._closed or self._buffer is None or self.captured == 0:
            return None
        try:
            return self._build(self.captured)
        except NoAgentsRecordedError:
            return None

    def _build(self, n: int) -> Any:
        """The panel of the first ``n`` captures."""
        from aumann.panel import Panel

        values, ids, alive, features = self.recorder._result(self._buffer)
        values = values[:n]
        alive = None if alive is None else alive[:n]
        if alive is not None and alive.all():
            alive = None
        context = self._context.result(n)
        name = getattr(self.recorder, "alive_context", None)
        if name is not None:
            if name in context:
                raise FeatureValueError(f"alive_context {name!r} clashes with a context of the same name")
            context[name] = np.ones(values.shape[:2]) if alive is None else alive.astype(np.float64)
        transient = transient_record([r for r in self._transients if r[0] < n])
        rounded = rounded_record(dict(self.recorder._rounded(self._buffer)), self._context.rounded,
                                 self.recorder._stored_as(self._buffer))
        return Panel(
            values, features=features, agent_ids=ids, steps=self._steps_axis(),
            alive=alive, context=context,
            meta={"recorder": type(self.recorder).__name__,
                  **({"skipped_agent_types": dict(skipped)} if (skipped := getattr(self.recorder, "skipped_types",
                                                                                  None)) else {}),
                  **({"transient_agents": transient} if transient is not None else {}),
                  **({"rounded_values": rounded} if rounded is not None else {})},
        )

    def discard(self) -> None:
        """Close a recording that failed; :meth:`panel` then raises."""
        self._closed = True
        self._buffer = None

    def panel(self):
        """The recorded :class:`~aumann.attribution.Panel` (after the ``with`` block has exited)."""
        if self._panel is None:
            if self._closed:
                raise StepsMismatchError("the recording failed or was discarded; no panel to return")
            self._finalise()
            self._closed = True
        return self._panel


class _RecorderBase(ABC):
    features: tuple[str, ...]
    alive_context: str | None = None
    _counts_transients: bool = False  # records Mesa agents one by one: agents born and removed in a step are counted

    def _records_agent(self, agent: Any) -> bool:
        """Whether this recorder would have recorded ``agent`` had it been present at a capture."""
        return False

    def _rounded(self, buffer: Any) -> Rounded:
        """Per feature, the recorded integers float64 changed so far (:func:`note_rounded`); none by default."""
        return {}

    def _stored_as(self, buffer: Any) -> np.dtype:
        """The dtype the features are stored as (what :meth:`_rounded` counted against): float64 by default."""
        return np.dtype(np.float64)

    @contextmanager
    def recording(
        self, model: Any, steps: int, *, context: Mapping[str, ContextFn] | None = None
    ) -> Iterator[Recording]:
        """Scope one recording of ``steps`` captures; validates the count and builds the panel on exit.

        Example:
            >>> with recorder.recording(model, steps=5) as rec:      # doctest: +SKIP
            ...     for _ in range(5):
            ...         model.step()
            ...         rec.capture(model)
            >>> panel = rec.panel()                                  # doctest: +SKIP
        """
        steps = _check_steps(steps)
        rec = Recording(self, steps, context, self._start(model, steps))
        try:
            yield rec
        except BaseException:
            rec.discard()
            raise
        rec.panel()

    @abstractmethod
    def _start(self, model: Any, steps: int) -> Any:
        """A fresh buffer for one recording of ``steps`` captures (first sight of the model)."""

    @abstractmethod
    def _capture(self, buffer: Any, model: Any, t: int) -> None:
        """Copy the model's state at step ``t`` into ``buffer``."""

    @abstractmethod
    def _result(self, buffer: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, tuple[str, ...]]:
        """(values (T, N, D), agent ids (N,), alive (T, N) or None, feature names) from ``buffer``."""




__all__ = ["ContextFn", "FeatureFn", "Recording", "Rounded", "note_rounded", "rounded_record"]
