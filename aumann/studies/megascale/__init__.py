"""MegaScale-Social's analysis, as optional stages of the faithfulness study (:mod:`.analysis`).

Importing this package registers the stages (the study driver does); :mod:`.deletion` is f_casc's
deletion under both oracles, :mod:`.scale` the scale checks (tier shares, archetype fidelity, LLM
ablation), :mod:`.measures` the small measures they share.
"""

from aumann.studies.megascale.analysis import STAGES, register

register()

__all__ = ["STAGES", "register"]
