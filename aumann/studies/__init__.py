"""Studies: drivers that write run directories.

* :mod:`aumann.studies.faithfulness` — ``aumann run SCENARIO``: simulate, attribute, deletion
  faithfulness and ablations per run (resumable);
* :mod:`aumann.studies.tables` and :mod:`aumann.studies.report` — the run directory's tables and plots;
* :mod:`aumann.studies.pages` — ``report.html`` (one self-contained page) and ``report.md`` of any
  finished run directory (``aumann report``), from :mod:`~aumann.studies.page` (the document model),
  :mod:`~aumann.studies.sections` and :mod:`~aumann.studies.charts` (Bokeh or PNG figures);
* :mod:`aumann.studies.crossscale` — ``aumann bluesky study``: the Bluesky cross-scale study.

>>> from aumann.studies import run_study, write_outputs

Names are imported on first use, so ``aumann.studies.crossscale`` does not pay for the scenario stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "StudyResult": "aumann.studies.faithfulness",
    "StudySizes": "aumann.studies.faithfulness",
    "analyse_run": "aumann.studies.faithfulness",
    "run_study": "aumann.studies.faithfulness",
    "write_outputs": "aumann.studies.report",
    "render_report": "aumann.studies.pages",
}

if TYPE_CHECKING:  # pragma: no cover
    from aumann.studies.faithfulness import StudyResult, StudySizes, analyse_run, run_study
    from aumann.studies.pages import render_report
    from aumann.studies.report import write_outputs


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'aumann.studies' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = ["StudyResult", "StudySizes", "analyse_run", "render_report", "run_study", "write_outputs"]
