"""The Bluesky cross-scale study (``aumann bluesky study``; paper, Section 3 and Appendices K–Q).

Sampling protocols (:mod:`~aumann.studies.crossscale.protocols`), one grid cell's attribution at its
own scale (:mod:`~aumann.studies.crossscale.grid`), the rescaling residual ε
(:mod:`~aumann.studies.crossscale.residual`), the learned DeepSet indicator
(:mod:`~aumann.studies.crossscale.deepset`), tables and figures, and the resumable driver
:func:`run_crossscale` with its :class:`CrossScaleConfig`.
"""

from aumann.studies.crossscale.study import CrossScaleConfig, DeepSetSettings, run_crossscale

__all__ = ["CrossScaleConfig", "DeepSetSettings", "run_crossscale"]
