"""Studies: drivers that write run directories.

* :mod:`aumann.studies.faithfulness` — ``aumann run SCENARIO``: simulate, attribute, deletion
  faithfulness and ablations per run (resumable), as the stages of :mod:`aumann.studies.stages` over a
  :class:`~aumann.studies.context.RunContext`, with one row of the table per registered
  :class:`~aumann.studies.rows.Row`; :mod:`aumann.studies.rundir` owns the run directory;
  :mod:`aumann.studies.megascale` is MegaScale-Social's analysis (optional stages);
* :mod:`aumann.studies.tables` and :mod:`aumann.studies.report` — the run directory's tables and plots;
* :mod:`aumann.studies.pages` (and :mod:`~aumann.studies.study_page`, the study's page as registered
  sections) — ``report.html`` (one self-contained page) and ``report.md`` of any
  finished run directory (``aumann report``), from :mod:`~aumann.studies.page` (the document model),
  :mod:`~aumann.studies.sections` and :mod:`~aumann.studies.charts` (Bokeh or PNG figures);
* :mod:`aumann.studies.crossscale` — ``aumann bluesky study``: the Bluesky cross-scale study.

>>> from aumann.studies import run_study, write_outputs
>>> from aumann.studies import Row, RowOutput, register_row, Stage, register_stage   # docs/extending.md

Names are imported on first use, so ``aumann.studies.crossscale`` does not pay for the scenario stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "ReportSection": "aumann.studies.study_page",
    "Row": "aumann.studies.rows",
    "RowOutput": "aumann.studies.rows",
    "RunContext": "aumann.studies.context",
    "RunDir": "aumann.studies.rundir",
    "Stage": "aumann.studies.stages",
    "register_row": "aumann.studies.rows",
    "register_section": "aumann.studies.study_page",
    "register_stage": "aumann.studies.stages",
    "StudyResult": "aumann.studies.faithfulness",
    "StudySizes": "aumann.studies.faithfulness",
    "analyse_run": "aumann.studies.faithfulness",
    "run_study": "aumann.studies.faithfulness",
    "write_outputs": "aumann.studies.report",
    "render_report": "aumann.studies.pages",
}

if TYPE_CHECKING:  # pragma: no cover
    from aumann.studies.context import RunContext
    from aumann.studies.faithfulness import StudyResult, StudySizes, analyse_run, run_study
    from aumann.studies.pages import render_report
    from aumann.studies.report import write_outputs
    from aumann.studies.rows import Row, RowOutput, register_row
    from aumann.studies.rundir import RunDir
    from aumann.studies.stages import Stage, register_stage
    from aumann.studies.study_page import ReportSection, register_section


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'aumann.studies' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = ["ReportSection", "Row", "RowOutput", "RunContext", "RunDir", "Stage", "StudyResult", "StudySizes",
           "analyse_run", "register_row", "register_section", "register_stage", "render_report", "run_study",
           "write_outputs"]
