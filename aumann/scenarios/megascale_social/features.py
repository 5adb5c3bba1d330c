"""What MegaScale-Social records: the feature columns, the recorder and the per-agent baseline.

Features per agent and step (after the step; float32 panel): ``belief`` b ∈ [−1, 1], ``exposure`` =
log(1 + posts seen), ``posted`` and ``reshared`` (0/1), ``influence`` w = log(1 + followers),
``risk`` s = σ(κ(b − θ)).

Baseline action: neutral and disengaged at the target step (view 0, no post, no reshare, reads
nothing); influence kept. Per-agent attribution baseline z⁰_i = (0, 0, 0, 0, w_i, σ(−κθ)): the same at
every step (influence is static).
"""

from __future__ import annotations

from typing import Any

import numpy as np

FEATURES = ("belief", "exposure", "posted", "reshared", "influence", "risk")
B, EXPOSURE, POSTED, RESHARED, INFLUENCE, RISK = range(6)


def make_recorder(cfg: Any) -> Any:
    """The array-path recorder of the six feature columns (float32 panel)."""
    from aumann.simulators import ArrayRecorder

    return ArrayRecorder(lambda m: m.features(), features=FEATURES, dtype=np.float32)


def baseline_features(model: Any, cfg: Any) -> np.ndarray:
    """z⁰ (N, D): view 0 → risk σ(−κθ), no exposure, no activity, influence kept."""
    out = np.zeros((model.n, len(FEATURES)))
    out[:, INFLUENCE] = model.world.influence
    out[:, RISK] = 1.0 / (1.0 + np.exp(cfg.risk_sharpness * cfg.risk_threshold))
    return out


__all__ = [
    "EXPOSURE",
    "FEATURES",
    "INFLUENCE",
    "POSTED",
    "RESHARED",
    "RISK",
    "B",
    "baseline_features",
    "make_recorder",
]
