"""MidScale-Social: deterministic influence-weighted propagation on a seeded scale-free graph.

State lives in numpy arrays (N = 1000 by default); one step is a handful of edge-list reductions
(``np.bincount`` over the ~2 m N directed edges of a Barabási–Albert graph), no per-agent loop.
SocialLLM's belief mechanics carry over in expectation: posts carry (amplified) beliefs, agreeing
content pulls, disagreeing content pushes, approval amplifies the author.

One step (σ the logistic function, A_ij = 1 for graph neighbours, a(x) = σ((r − |x|)/θ) a soft
"agree" switch with radius r and width θ; 2a − 1 ∈ (−1, 1) is the like (+) / dislike (−) balance):

1. posting intensity  p_i = σ(post_logit_i + β |s_i|) · attention_t
2. content            c_i = clip((1 + ½ κ_i) s_i, −1, 1)
3. post exposure      E_i = Σ_j A_ij w_j p_j,   m_i = Σ_j A_ij w_j p_j c_j / E_i
4. reshare intensity  r_i = reshare_rate_i · a(m_i − s_i) · (1 − exp(−E_i / e₀))
5. total exposure     e_i = E_i + Σ_j A_ij w_j r_j,  incoming content
                      m̃_i = (Σ_j A_ij w_j p_j c_j + Σ_j A_ij w_j r_j m_j) / e_i
6. belief             s_i ← clip(s_i + susc_i (1 − α|s_i|) μ (m̃_i − s_i)(2a(m̃_i − s_i) − 1)(1 − exp(−e_i/e₀)), −1, 1)
7. author feedback    s_i ← clip(s_i (1 + κ_fb p_i L_i), −1, 1),  L_i = mean_{j ∈ N(i)} (2 a(c_i − s_j) − 1)
8. influence          w_i = w⁰_i (1 + ρ Σ_j A_ij r_j a(c_i − s_j) / deg_i)

attention_t = 1 + ½ sin(2π t / 7) is a weekly news cycle (world state, recorded as context).
There is no randomness after initialisation (graph, persona/stance/prototype assignment, initial
beliefs): the propagation is deterministic, so a fork with no intervention replays exactly.

Baseline action (``force_baseline``): the agent is neutral and disengaged for the step: belief 0,
no posting, no resharing, reads nothing (exposure 0), no feedback; its influence weight (a network
property, like wealth in EconAgent) is kept. Its features after the step are (0, 0, 0, 0, w_i).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import networkx as nx
import numpy as np

from aumann.scenarios.midscale_social.agents import AgentTable


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class MidScaleModel:
    """The MidScale-Social world (vectorised; not a Mesa model, which would add a per-agent loop).

    Args:
        config: a :class:`~aumann.scenarios.midscale_social.scenario.MidScaleConfig`.
        rng: numpy Generator (graph, assignment, initial beliefs).
        fixture: personas / stances / prototypes (see :mod:`.fixture`).
    """

    def __init__(self, config: Any, rng: np.random.Generator, fixture: dict[str, Any]) -> None:
        self.config = config
        n = config.agents
        g = nx.barabasi_albert_graph(n, min(config.ba_m, n - 1), seed=int(rng.integers(2**31)))
        edges = np.asarray(list(g.edges()), dtype=np.int64).reshape(-1, 2)
        self.src = np.concatenate([edges[:, 0], edges[:, 1]])  # j (sender)
        self.dst = np.concatenate([edges[:, 1], edges[:, 0]])  # i (receiver)
        self.degree = np.bincount(self.dst, minlength=n).astype(np.float64)
        self.table = AgentTable.draw(fixture, self.degree, rng)
        self.fixture_generator = fixture.get("generator", "unknown")
        self.n = n
        self.t = 0
        self.belief = self.table.belief0.copy()
        self.influence = self.table.influence0.copy()
        self.exposure = np.zeros(n)
        self.posting = np.zeros(n)
        self.reshare = np.zeros(n)
        self.forced = np.zeros(n, dtype=bool)
        self.attention = 1.0

    def force_baseline(self, positions: Iterable[int]) -> None:
        """Make the agents at these positions take the baseline action in the next step."""
        self.forced = np.zeros(self.n, dtype=bool)
        idx = np.fromiter((int(p) for p in positions), dtype=np.int64)
        self.forced[idx] = True

    def _gather(self, values: np.ndarray) -> np.ndarray:
        """Σ_j A_ij values_j for every i."""
        return np.bincount(self.dst, weights=values[self.src], minlength=self.n)

    def _agree(self, diff: np.ndarray) -> np.ndarray:
        cfg = self.config
        return _sigmoid((cfg.like_radius - np.abs(diff)) / cfg.agree_width)

    def step(self) -> None:
        cfg, tab = self.config, self.table
        live = ~self.forced
        s = np.where(live, self.belief, 0.0)
        w = self.influence
        self.attention = 1.0 + cfg.attention_amplitude * np.sin(2.0 * np.pi * self.t / 7.0)
        p = _sigmoid(tab.post_logit + cfg.post_slope * np.abs(s)) * self.attention * live
        c = np.clip((1.0 + 0.5 * tab.intensity) * s, -1.0, 1.0)
        wp = w * p
        E = self._gather(wp) * live
        m = np.divide(self._gather(wp * c), E, out=np.zeros(self.n), where=E > 1e-12)
        sat_E = 1.0 - np.exp(-E / cfg.exposure_scale)
        r = tab.reshare_rate * self._agree(m - s) * sat_E * live
        wr = w * r
        e = (E + self._gather(wr)) * live
        m_tot = np.divide(self._gather(wp * c) + self._gather(wr * m), e, out=np.zeros(self.n), where=e > 1e-12)
        d = m_tot - s
        sens = tab.susceptibility * (1.0 - cfg.alpha * np.abs(s))
        s_new = s + sens * cfg.mu * d * (2.0 * self._agree(d) - 1.0) * (1.0 - np.exp(-e / cfg.exposure_scale))
        s_new = np.clip(s_new, -1.0, 1.0)
        # author feedback: approval of i's content by its neighbours j (edge j -> i reversed: i sends to j)
        approve = 2.0 * self._agree(c[self.src] - s_new[self.dst]) - 1.0  # for sender src, receiver dst
        L = np.divide(np.bincount(self.src, weights=approve, minlength=self.n), self.degree,
                      out=np.zeros(self.n), where=self.degree > 0)
        s_new = np.clip(s_new * (1.0 + cfg.feedback * p * L), -1.0, 1.0)
        reshared = np.bincount(self.src, weights=r[self.dst] * self._agree(c[self.src] - s_new[self.dst]),
                               minlength=self.n)
        w_new = tab.influence0 * (1.0 + cfg.influence_gain * np.divide(reshared, self.degree, out=np.zeros(self.n),
                                                                        where=self.degree > 0))
        self.belief = np.where(live, s_new, 0.0)
        self.influence = np.where(live, w_new, w)
        self.exposure, self.posting, self.reshare = e, p, r
        self.forced = np.zeros(self.n, dtype=bool)
        self.t += 1

    def features(self) -> dict[str, np.ndarray]:
        """Current feature columns (the recorder's array path)."""
        return {"belief": self.belief, "exposure": self.exposure, "posting": self.posting,
                "reshare": self.reshare, "influence": self.influence}


__all__ = ["MidScaleModel"]
