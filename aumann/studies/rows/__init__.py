"""The rows of the faithfulness table: one small object per method, registered by name.

A row is a :class:`Row` subclass: its ``name`` (the ``method`` column), the ``game`` its φ explains,
and ``compute(ctx) -> RowOutput`` (φ at t* over the panel's agents, its standard error and what it
cost), given the run's :class:`~aumann.studies.context.RunContext`. Everything else has a default
that fits a method with values: deletion by its ranking under both oracles (``score``), the
agreement with the reference (:func:`reference_row`: ``sampled_shapley_cv`` or ``sampled_shapley`` by
``study.reference_estimator``), the columns of ``faithfulness.csv``. A row can
add a record section, tables (``tables``) and a report section (``section``). Adding a row is one
class and one :func:`register_row` call; the study driver, the tables and the pages take it from
the registry::

    class Gradient(Row):
        name = "gradient"
        game = "masking"

        def compute(self, ctx):
            ...                                   # φ at t*, shape (N,)
            return RowOutput(phi=phi, cost={"seconds": dt})

    register_row(Gradient())                      # before "random" (the baseline stays last)

The rows run in registry order (which is table order): a row that uses another's output names it in
``needs``. Built in: ``aumann_shapley``, ``sampled_shapley`` (plain permutation sampling),
``sampled_shapley_cv`` (the same value with the Aumann–Shapley control variate; the default reference — the
reference's second seed gives the noise ceiling),
``leave_one_out``, ``action_aumann_shapley`` (scenarios with a step map),
``sampled_shapley_resimulation`` (``study.resimulation_reference``), ``llm_judge`` (a ranking, no
values) and ``random`` (the mean of random orderings).

The package, by concept: :mod:`~aumann.studies.rows.registry` (:class:`Row`, :class:`RowOutput`, the
registry and the ``rows`` / ``deletion`` stages that run it), :mod:`~aumann.studies.rows.scoring` (deletion
and agreement metrics of a row), the built-in rows — :mod:`~aumann.studies.rows.feature_game` (the masking
game: ``aumann_shapley``, ``sampled_shapley``, ``sampled_shapley_cv``, ``leave_one_out``),
:mod:`~aumann.studies.rows.resimulation` (``action_aumann_shapley``, ``sampled_shapley_resimulation``),
:mod:`~aumann.studies.rows.judge` (``llm_judge``), :mod:`~aumann.studies.rows.random_orderings` (``random``) —
registered here in table order.
"""

from __future__ import annotations

from aumann.studies.rows.feature_game import (
    AumannShapleyRow,
    LeaveOneOutRow,
    SampledShapleyCVRow,
    SampledShapleyRow,
)
from aumann.studies.rows.judge import JudgeRow
from aumann.studies.rows.random_orderings import RandomRow
from aumann.studies.rows.registry import (
    Row,
    RowOutput,
    compute_rows,
    get_row,
    register_row,
    row_names,
    rows,
    score_rows,
    unregister_row,
)
from aumann.studies.rows.resimulation import ActionRow, ResimulationReferenceRow
from aumann.studies.rows.scoring import METRICS, REFERENCE, REFERENCE_CV, reference_row, score_order, score_values

for _row in (AumannShapleyRow, SampledShapleyRow, SampledShapleyCVRow, LeaveOneOutRow, ActionRow,
             ResimulationReferenceRow, JudgeRow, RandomRow):
    register_row(_row, before=None)

BUILTIN = row_names()
"""The built-in rows, in table order."""

__all__ = ["BUILTIN", "METRICS", "REFERENCE", "REFERENCE_CV", "ActionRow", "AumannShapleyRow", "JudgeRow",
           "LeaveOneOutRow", "RandomRow", "ResimulationReferenceRow", "Row", "RowOutput", "SampledShapleyCVRow",
           "SampledShapleyRow", "compute_rows", "get_row", "reference_row", "register_row", "row_names", "rows",
           "score_order", "score_rows", "score_values", "unregister_row"]
