"""The row type and the registry of rows, and the two stages that run them.

A :class:`Row` is one row of the faithfulness table; :func:`register_row` puts it into the table (in
table order, ``random`` last). :func:`compute_rows` (the study's ``rows`` stage) computes every enabled
row's φ at t*; :func:`score_rows` (the ``deletion`` stage) forks every deleted set at once, then scores
each row and lets it ``finish``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from aumann.checks import as_real_array, user_code
from aumann.errors import ConfigError, StudyError
from aumann.scenarios.base import Scenario, ScenarioConfig
from aumann.studies.context import RunContext
from aumann.studies.named import NamedList
from aumann.studies.rows.scoring import REFERENCE, reference_row, score_values


@dataclass
class RowOutput:
    """What a row computed for one run.

    Attributes:
        phi: φ at t* on the panel's agent axis (N,); ``None`` for a row that ranks without values (the
            judge gives ``order``) or has nothing to compute (random).
        stderr: its standard error (N,), when the method has one.
        cost: what it cost (``rec["cost"][name]``: e.g. ``{"game", "evaluations", "seconds"}``; seconds are
            moved to ``timings/``).
        attributions: :class:`~aumann.attribution.Attribution` objects to save as
            ``attributions/run-NNN-<label>.npz``, by label.
        ceiling: a second estimate with an independent seed (the noise ceiling of a sampled row).
        order: a ranking of panel positions (rows without values).
        record: the row's own record section (``rec[row.record_key]``).
        info: anything else the row's later steps (``score``, ``finish``) need.
    """

    phi: np.ndarray | None
    stderr: np.ndarray | None = None
    cost: dict[str, Any] | None = None
    attributions: dict[str, Any] = field(default_factory=dict)
    ceiling: np.ndarray | None = None
    order: np.ndarray | None = None
    record: dict[str, Any] | None = None
    info: Any = None


class Row:
    """One row of the faithfulness table (see the module docstring)."""

    name: ClassVar[str] = ""
    game: ClassVar[str] = "masking"  # the game its φ explains: "masking", "resimulation" (or "-": no game)
    needs: ClassVar[tuple[str, ...]] = ()  # rows whose outputs ``compute`` reads (computed before it)
    message: ClassVar[str | None] = None  # progress message while it computes (None: none of its own)
    record_key: ClassVar[str | None] = None  # where ``RowOutput.record`` goes in the run record
    title: ClassVar[str | None] = None  # the heading of its report section (None: no section)

    def enabled(self, scenario: Scenario, config: ScenarioConfig) -> bool:
        """Whether runs of ``scenario`` under ``config`` get this row (checked before any run)."""
        return True

    def compute(self, ctx: RunContext) -> RowOutput | None:
        """φ at t* (and its cost) for the run in ``ctx``; ``None``: this run has no such row."""
        raise NotImplementedError

    def deletion_orders(self, ctx: RunContext, out: RowOutput) -> list[np.ndarray]:
        """The orderings whose prefixes ``score`` deletes (forked ahead, all at once)."""
        return [ctx.ranked(out.phi, "value", ctx.deletion_depth), ctx.ranked(out.phi, "abs", ctx.deletion_depth)]

    def grid_orders(self, ctx: RunContext, out: RowOutput) -> list[np.ndarray]:
        """The orderings whose prefixes ``score`` deletes at the log-k grid's depths (forked ahead with the
        others; a set not forked ahead is forked when ``score`` asks for it, so this only sets the pace)."""
        return self.deletion_orders(ctx, out)[:1]

    def score(self, ctx: RunContext, out: RowOutput) -> dict[str, float]:
        """The row's metrics (:data:`METRICS`): deletion by its ranking, agreement with the reference."""
        return score_values(ctx, self.name, out.phi)

    def finish(self, ctx: RunContext, out: RowOutput) -> None:
        """After every row is scored: record what needs the others (e.g. the noise ceiling)."""

    def tables(self, result: Any) -> dict[str, list[dict[str, Any]]]:
        """Tables of its own (``<name>.csv`` / ``.md``) from the finished :class:`StudyResult`."""
        return {}

    def section(self, run_dir: Path, records: Sequence[dict[str, Any]]) -> list[Any]:
        """Its report blocks (under ``title`` in "How sure"), built from the run directory alone."""
        return []

    def cost_rows(self, records: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
        """("what", value) lines for the report's "Work done" table."""
        return []


# ---------------------------------------------------------------------------------------------- registry
_ROWS: NamedList[Row] = NamedList()


def register_row(row: Row | type[Row], *, before: str | None = "random") -> Row:
    """Register a row (an instance or a class with a no-argument constructor) under ``row.name``.

    It goes into the table before the row ``before`` (default: before ``random``, which stays last;
    ``None``: at the end). Its ``needs`` must already be registered ahead of it. Registering a name again
    replaces that row in place.
    """
    if isinstance(row, type):
        row = row()
    if not isinstance(row, Row) or not isinstance(row.name, str) or not row.name.isidentifier():
        raise ConfigError(f"register_row needs a Row with an identifier-like name; got {row!r}")
    if _ROWS.replace(row):
        return row
    at = _ROWS.position(before)
    missing = [n for n in row.needs if n not in _ROWS.names()[:at]]
    if missing:
        raise ConfigError(f"row {row.name!r} needs {missing}, which must be registered before it")
    _ROWS.insert(at, row)
    return row


def unregister_row(name: str) -> None:
    """Remove a registered row (built-in ones too; the reference ``sampled_shapley`` cannot go)."""
    if name == REFERENCE:
        raise ConfigError(f"the plain sampled-Shapley row {REFERENCE!r} cannot be removed (the re-simulation game's "
                          "reference, and study.reference_estimator = 'sampled_shapley')")
    _ROWS.drop(name)


def rows() -> tuple[Row, ...]:
    """The registered rows, in table order."""
    return tuple(_ROWS)


def row_names() -> tuple[str, ...]:
    """Their names (the ``method`` column), in table order."""
    return tuple(r.name for r in _ROWS)


def get_row(name: str) -> Row:
    """The registered row ``name`` (:class:`ConfigError` when there is none)."""
    for r in _ROWS:
        if r.name == name:
            return r
    raise ConfigError(f"no row named {name!r}; registered rows: {list(row_names())}")


# ---------------------------------------------------------------------------------------------- stages
def compute_rows(ctx: RunContext) -> None:
    """The ``rows`` stage: every enabled row's ``compute``, in table order (into ``ctx.outputs``)."""
    for row in rows():
        if not row.enabled(ctx.scenario, ctx.config):
            continue
        absent = [n for n in row.needs if n not in ctx.outputs]
        if absent:
            raise StudyError(f"row {row.name!r} needs the output of {absent}, which this run did not compute")
        if row.message:
            ctx.tick(row.message)
        out = _computed(row, ctx)
        ctx.release_freed()
        if out is None:
            continue
        ctx.outputs[row.name] = out
        if out.cost is not None:
            ctx.rec["cost"][row.name] = out.cost
        if row.record_key is not None and out.record is not None:
            ctx.rec[row.record_key] = out.record
        ctx.saved.update(out.attributions)
    reference = reference_row(ctx.config)
    if reference not in ctx.outputs:
        raise StudyError(f"the reference row {reference!r} (study.reference_estimator) was not computed in this run "
                         "(unregistered?); set study.reference_estimator = \"sampled_shapley\" or register it")


def _is_built_in(row: Row) -> bool:
    return type(row).__module__.split(".")[0] == "aumann"


def _computed(row: Row, ctx: RunContext) -> RowOutput | None:
    """``row.compute(ctx)``, checked: a user's row that raises (or exits) is a :class:`StudyError` naming the row
    (a built-in row's exception is our bug and keeps its traceback), and what any row returns must be a
    :class:`RowOutput` (or ``None``) whose arrays fit the run's N agents — a φ one agent too long was ranked,
    deleted and blamed on the scenario's ``baseline_action`` (an IndexError there), a NaN in φ surfaced as a
    ``MetricError`` on "scores" that named no row."""
    where = f"row {row.name!r} (run {ctx.options.run_index})"
    if _is_built_in(row):
        out = row.compute(ctx)
    else:
        with user_code(where, error=StudyError):
            out = row.compute(ctx)
    if out is None:
        return None
    if not isinstance(out, RowOutput):
        raise StudyError(f"{where}: compute(ctx) returned {type(out).__name__}; it must return a RowOutput "
                         "(phi=..., stderr=..., cost=...) or None (no such row in this run)")
    n = ctx.n
    for field_name in ("phi", "stderr", "ceiling"):
        value = getattr(out, field_name)
        if value is None:
            continue
        arr = as_real_array(value, f"{where}: RowOutput.{field_name}", error=StudyError)
        if arr.shape != (n,):
            raise StudyError(f"{where}: RowOutput.{field_name} has shape {arr.shape}; it must hold one value per "
                             f"agent on the panel's agent axis, shape ({n},)")
        bad = ~np.isfinite(arr)
        if bad.any():
            raise StudyError(f"{where}: RowOutput.{field_name} holds {int(bad.sum())} NaN/inf value(s) (first at "
                             f"agent position {int(np.flatnonzero(bad)[0])}); a row's values must be finite")
        if field_name == "stderr" and (arr < 0).any():
            raise StudyError(f"{where}: RowOutput.stderr holds negative value(s); a standard error is ≥ 0")
        setattr(out, field_name, arr)
    if out.order is not None:
        order = as_real_array(out.order, f"{where}: RowOutput.order", error=StudyError)
        if order.ndim != 1 or not np.issubdtype(order.dtype, np.integer) or order.size > n \
                or (order.size and (order.min() < 0 or order.max() >= n)) or np.unique(order).size != order.size:
            raise StudyError(f"{where}: RowOutput.order must be distinct integer agent positions in [0, {n}) (a "
                             f"ranking, best first); got {order.dtype} of shape {order.shape}")
        out.order = order
    elif out.phi is None and type(row).deletion_orders is Row.deletion_orders:
        raise StudyError(f"{where}: RowOutput has neither phi nor order; the deletion curves rank agents by one of "
                         "them (a row without values overrides deletion_orders, as random does)")
    return out


def score_rows(ctx: RunContext) -> None:
    """The ``deletion`` stage: fork every deleted set at once, then each row's metrics and ``finish``."""
    ctx.tick("deletion forks")
    sets = []
    for name, out in ctx.outputs.items():
        row = get_row(name)
        sets += [order[:k] for order in row.deletion_orders(ctx, out) for k in range(1, ctx.sizes.k_del + 1)]
        if ctx.grid is not None:
            sets += [order[:k] for order in row.grid_orders(ctx, out) for k in ctx.grid]
    ctx.oracle.prefetch(sets)
    for name, out in ctx.outputs.items():
        ctx.rec["methods"][name] = get_row(name).score(ctx, out)
    for name, out in ctx.outputs.items():
        get_row(name).finish(ctx, out)
    ctx.rec["forks"] = ctx.oracle.forks
    if ctx.oracle.pooled_fallback:  # why the forks were evaluated in full, not from the pooled sums
        ctx.rec["pooled_fallback"] = ctx.oracle.pooled_fallback


__all__ = ["Row", "RowOutput", "compute_rows", "get_row", "register_row", "row_names", "rows", "score_rows",
           "unregister_row"]
