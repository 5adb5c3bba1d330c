"""MegaScale-Social: registration, recorder, baselines (see README.md in this folder).

Features per agent and step (after the step; float32 panel): ``belief`` b ∈ [−1, 1], ``exposure`` =
log(1 + posts seen), ``posted`` and ``reshared`` (0/1), ``influence`` w = log(1 + followers),
``risk`` s = σ(κ(b − θ)).

Indicator of the faithfulness table: the pooled propagation risk f_prop = log(1 + c m_w m_s m_a)
(:mod:`.indicators`); its original replaces s by the hard threshold 1[b > θ]. The network cascade
pressure f_casc is attributed beside it by the study's MegaScale stages (:mod:`aumann.studies.megascale`).

Baseline action: neutral and disengaged at the target step (view 0, no post, no reshare, reads
nothing); influence kept. Per-agent attribution baseline z⁰_i = (0, 0, 0, 0, w_i, σ(−κθ)): the same at
every step (influence is static), so the study gets it as one (N, D) array.
"""

from __future__ import annotations

import numpy as np
import torch

from aumann.attribution.aggregators import standard_aggregators
from aumann.scenarios import register
from aumann.scenarios.base import Scenario
from aumann.scenarios.megascale_social.config import MegaScaleConfig
from aumann.scenarios.megascale_social.features import (
    FEATURES,
    INFLUENCE,
    POSTED,
    RESHARED,
    RISK,
    baseline_features,
    make_recorder,
)
from aumann.scenarios.megascale_social.indicators import indicator
from aumann.tiers import tiers_by_rank


def _build(cfg: MegaScaleConfig, rng: np.random.Generator, backend=None):
    from aumann.scenarios.megascale_social.model import MegaScaleSocial

    return MegaScaleSocial(cfg, rng=rng, backend=backend)


def _baseline_action(model, positions) -> None:
    model.force_baseline(positions)


def _resimulate(model, cfg: MegaScaleConfig, positions) -> tuple[np.ndarray, dict]:
    """The coming step with ``positions`` at the baseline action (incremental; equal to a full fork)."""
    return model.counterfactual_matrix(positions), {}  # float64: the stacked float32 features, exactly


def _resimulate_rows(model, cfg: MegaScaleConfig, positions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_resimulate` as (the factual step's matrix, the changed rows, their values)."""
    return model.counterfactual_rows(positions)


def _baseline_all(run, cfg: MegaScaleConfig) -> np.ndarray:
    return baseline_features(run.model, cfg)  # static: one (N, D) array for every step


def _aggregators(cfg: MegaScaleConfig):
    # the columns by ``unbind``, not by ``z[..., j]``: the same values, but autograd's backward of each ``z[..., j]``
    # fills a zero tensor the size of z (four per score), of ``unbind`` one stacked tensor. The f-sensitivity
    # ablation's path integrals at 10⁶ agents: 2.1–2.8× faster for f₁ and f₂, the same gradient bits.
    def score(z: torch.Tensor) -> torch.Tensor:  # per-agent risk r_i = w_i s_i a_i
        c = z.to(torch.float64).unbind(-1)
        return c[INFLUENCE] * c[RISK] * (c[POSTED] + c[RESHARED])

    def opinion(z: torch.Tensor) -> torch.Tensor:
        return z.to(torch.float64).unbind(-1)[0]

    return standard_aggregators(score, opinion, cfg.agents)


def _offline_backend():
    from aumann.scenarios.megascale_social.policy import offline_backend

    return offline_backend()


MEGASCALE_SOCIAL = register(Scenario(
    name="megascale-social",
    description="MegaScale-Social: an archetype-batched LLM-driven society of up to 10⁶–10⁷ agents on a scale-free "
                "follower network (one structured request per occupied archetype key per step)",
    config_model=MegaScaleConfig,
    build_model=_build,
    make_recorder=make_recorder,
    features=FEATURES,
    indicator=indicator,
    original=lambda cfg: indicator(cfg, smooth=False),
    baseline_action=_baseline_action,
    baseline_features_fn=baseline_features,
    baseline_all_fn=_baseline_all,
    resimulate_fn=_resimulate, resimulate_rows_fn=_resimulate_rows,
    aggregators=_aggregators,
    offline_backend=_offline_backend,
    config_file="megascale-social.toml",
    baseline_description="neutral and disengaged at the target step: view 0, no post, no reshare, reads nothing; "
                         "influence kept",
    tags=("llm", "large-scale", "network"),
    groups=lambda model, cfg: {"tier": tiers_by_rank(model.world.influence)},
    abstention_description="the archetype key does nothing that step: no post, no reshare, no belief shift",
))

__all__ = ["MEGASCALE_SOCIAL", "MegaScaleConfig", "baseline_features"]
