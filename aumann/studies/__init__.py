"""Studies: drivers that write run directories.

* :mod:`aumann.studies.faithfulness` — ``aumann run SCENARIO``: simulate, attribute, deletion
  faithfulness and ablations per run (resumable);
* :mod:`aumann.studies.tables` and :mod:`aumann.studies.report` — the run directory's tables, plots
  and report;
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
}

if TYPE_CHECKING:  # pragma: no cover
    from aumann.studies.faithfulness import StudyResult, StudySizes, analyse_run, run_study
    from aumann.studies.report import write_outputs


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'aumann.studies' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = ["StudyResult", "StudySizes", "analyse_run", "run_study", "write_outputs"]
