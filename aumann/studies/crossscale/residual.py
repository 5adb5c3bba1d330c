"""The rescaling residual ε of Theorem 1 and the exact residual law for f_var (paper §4.2, App. A.4).

For a subset S with within-S normalised shares φ̃^S and the full-panel shares φ̃ restricted to S,
the best agent-independent rescaling is

    c* = (φ̃^S · φ̃) / (φ̃ · φ̃),      ε = ‖φ̃^S − c* φ̃‖₂ / ‖φ̃^S‖₂ .

Theorem 1 (i): ε = 0 for an indicator linear over agents (f = mean of μ(z_i)); (ii): no such
guarantee otherwise. For f_var with g_i = a_i + b_i + c_i, m_S and m_N the subset and full means,
u_i = g_i (g_i − m_S), v_i = g_i (g_i − m_N) (vectors over S), Proposition 2 gives exactly

    ε = sin∠(u, v) = |m_S − m_N| · ‖P_v^⊥ g_S‖₂ / ‖u‖₂ ,

computed here from raw features only (no attribution involved), so it is an independent check of
the measured residual.
"""

from __future__ import annotations

import numpy as np

from aumann.errors import ShapeError, ZeroDeltaVError


def best_scalar(phi_s: np.ndarray, phi_full: np.ndarray) -> tuple[float, float]:
    """``(c*, ε)`` of the best scalar rescaling ``φ̃^S ≈ c φ̃`` (both restricted to S, same order).

    Raises:
        ShapeError: the two vectors differ in shape.
        ZeroDeltaVError: φ̃^S or φ̃|_S is identically zero (ε undefined).
    """
    a = np.asarray(phi_s, dtype=np.float64).ravel()
    b = np.asarray(phi_full, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ShapeError(f"subset shares {a.shape} and full shares {b.shape} must align over S")
    bb = _dot(b, b)
    na = np.sqrt(_dot(a, a))
    if bb == 0.0 or na == 0.0:
        raise ZeroDeltaVError("rescaling residual undefined: a share vector is identically zero on S")
    c = _dot(a, b) / bb
    r = a - c * b
    return c, float(np.sqrt(_dot(r, r)) / na)


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    # elementwise product + pairwise sum: no BLAS call (BLAS threads can contend with torch's)
    return float(np.sum(x * y))


def residual_law_var(g_s: np.ndarray, m_full: float) -> float:
    """Proposition 2: ε for f_var from the composite g on S and the full-panel mean ``m_full``."""
    g = np.asarray(g_s, dtype=np.float64).ravel()
    m_s = float(g.mean())
    u = g * (g - m_s)
    v = g * (g - m_full)
    nu = np.sqrt(_dot(u, u))
    vv = _dot(v, v)
    if nu == 0.0 or vv == 0.0:
        raise ZeroDeltaVError("residual law undefined: zero variance on S or in the full panel")
    perp = g - (_dot(v, g) / vv) * v
    return float(abs(m_s - m_full) * np.sqrt(_dot(perp, perp)) / nu)


__all__ = ["best_scalar", "residual_law_var"]
