"""Explicit randomness: one root seed, independent streams, never global state.

Library code never calls ``np.random.seed``, ``random.seed`` or ``torch.manual_seed``. Every
function that draws random numbers takes an ``rng`` argument that :func:`as_generator` normalises.
"""

from __future__ import annotations

import numpy as np

from aumann.checks import as_int, as_seed
from aumann.errors import ConfigError

RNGLike = int | np.random.Generator | np.random.SeedSequence | None


def as_generator(rng: RNGLike) -> np.random.Generator:
    """Normalise an ``rng`` argument into a :class:`numpy.random.Generator` (a Generator is reused).

    Raises:
        ConfigError: ``rng`` is not ``None``, a non-negative integer, a SeedSequence or a Generator.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(as_seed(rng, "rng (seed)"))


def spawn(rng: RNGLike, n: int) -> list[np.random.Generator]:
    """``n`` statistically independent child generators of ``rng``."""
    rng = as_seed(rng, "rng (seed)")
    n = as_int(n, "n (number of generators)", minimum=0, error=ConfigError)
    if isinstance(rng, np.random.Generator):
        return list(rng.spawn(n))
    seq = rng if isinstance(rng, np.random.SeedSequence) else np.random.SeedSequence(rng)
    return [np.random.default_rng(s) for s in seq.spawn(n)]


def seed_int(rng: RNGLike) -> int:
    """A 63-bit integer drawn from ``rng`` (e.g. for ``torch.Generator().manual_seed`` or an LLM seed)."""
    return int(as_generator(rng).integers(2**63 - 1))


def torch_generator(rng: RNGLike):
    """A CPU :class:`torch.Generator` seeded from ``rng``."""
    import torch

    return torch.Generator().manual_seed(seed_int(rng))


def describe(rng: RNGLike) -> int | str | None:
    """What to write into provenance for ``rng``: the int seed, or a description."""
    if rng is None or isinstance(rng, int):
        return rng
    if isinstance(rng, list | tuple):  # entropy as a sequence of ints (as_seed takes it): a seed, not a Generator
        return [int(v) for v in rng]
    if isinstance(rng, np.random.SeedSequence):
        return f"SeedSequence(entropy={rng.entropy}, spawn_key={rng.spawn_key})"
    return "Generator"


__all__ = ["RNGLike", "as_generator", "describe", "seed_int", "spawn", "torch_generator"]
