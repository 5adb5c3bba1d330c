"""Small games and panels shared by the baseline tests (imports public names only)."""

from __future__ import annotations

import numpy as np
import torch

from aumann.attribution import AgentwiseIndicator, QuadraticIndicator


def positive_panel(rng: np.random.Generator, T: int, N: int, D: int = 3) -> np.ndarray:
    return np.abs(rng.normal(size=(T, N, D))) + 0.1


def additive_indicator(W: np.ndarray) -> AgentwiseIndicator:
    """f(z) = Σ_{i,d} W_{i,d} z_{i,d} (Appendix D's f_add)."""
    Wt = torch.as_tensor(W)
    return AgentwiseIndicator(lambda z: (Wt.to(z.dtype) * z).sum(-1, keepdim=True), name="f_add")


def softplus_indicator(W: np.ndarray, a: float = 0.35) -> AgentwiseIndicator:
    """f(z) = softplus(a Σ W z)/a (Appendix D's f_nl)."""
    Wt = torch.as_tensor(W)
    return AgentwiseIndicator(lambda z: (Wt.to(z.dtype) * z).sum(-1, keepdim=True),
                              rho=lambda s: torch.nn.functional.softplus(a * s[..., 0]) / a, name="f_nl")


def quadratic_indicator(Q: np.ndarray, C: np.ndarray) -> QuadraticIndicator:
    """f(z) = Σ Q z² + ½ sᵀ C s with s_i = Σ_d z_{i,d} (Appendix D's f_quad)."""
    Qt = torch.as_tensor(Q)
    return QuadraticIndicator(C, q=lambda z: (Qt.to(z.dtype) * z**2).sum(-1), name="f_quad")


def random_torch_fn(rng: np.random.Generator, D: int = 3):
    """A smooth non-pooled indicator with interactions between agents (no fast path)."""
    a = torch.as_tensor(rng.normal(size=D))
    b = torch.as_tensor(rng.normal(size=D))

    def f(z: torch.Tensor) -> torch.Tensor:
        u = z @ a.to(z.dtype)  # (..., N)
        w = z @ b.to(z.dtype)
        return torch.tanh(u.sum(-1)) * (w**2).mean(-1) + (u * w).sum(-1) ** 2 / 10

    return f
