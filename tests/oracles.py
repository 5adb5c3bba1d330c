"""Independent reference implementations the tests check the library against (never imported by aumann)."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def closed_form_phi(name: str, z: np.ndarray) -> np.ndarray:
    """Zero-baseline Aumann–Shapley φ (per agent) of lin/heat/var/gini for z of shape (n, D).

    Paper Appendix F, Eqs. (phi-lin)–(phi-gini), written from the formulas with numpy and scipy only;
    gini's ranks are scipy's average ranks (ties share their ranks, the symmetric subgradient).
    """
    z = np.asarray(z, dtype=np.float64)
    n = z.shape[0]
    g = z.sum(axis=1)
    if name == "lin":
        return g / n
    if name == "heat":
        sums = z.sum(axis=0)
        f = np.log1p(np.prod(sums / n))
        with np.errstate(invalid="ignore", divide="ignore"):
            part = np.where(sums > 0, z / np.where(sums > 0, sums, 1.0), 0.0)
        return part.sum(axis=1) * f / z.shape[1]
    if name == "var":
        return g * (g - g.mean()) / n
    if name == "gini":
        k = rankdata(g, method="average")
        return g * (2 * k - n - 1) / n**2
    raise ValueError(f"no closed form for {name!r}; known: lin, heat, var, gini")
