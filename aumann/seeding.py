"""Explicit randomness: one root seed, independent streams, never global state.

Library code never calls ``np.random.seed``, ``random.seed`` or ``torch.manual_seed``. Every
function that draws random numbers takes an ``rng`` argument that :func:`as_generator` normalises.
"""

from __future__ import annotations

from typing import Any

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


def model_given_no_seed(model: Any) -> bool:
    """Whether ``model`` may be a Mesa model built without a seed (``Model()``: both of its generators drawn from
    the operating system's entropy, so no seed reproduces it). Mesa 3.3 keeps the seed it was given in ``_seed``,
    but not for ``rng=`` *an int* (``_seed`` is ``None`` there as for no seed at all): such a model is told apart by
    its numpy generator's seed, which :func:`_seeded_by_int` reads. Mesa 3.5 always keeps an int in ``_seed`` (one
    drawn from ``model.rng`` where it was given none): there an unseeded ``model.rng`` (:func:`_seeded_by_entropy`)
    says it. It may be wrong one way only: a model taken for unseeded that is not (its callers check a second
    build, or only add advice to an error already raised)."""
    if not (hasattr(model, "rng") and hasattr(model, "random")) or _seeded_by_int(model):
        return False
    return getattr(model, "_seed", 0) is None or _seeded_by_entropy(model)


#: numpy seeds a generator given no seed with 128 bits of the operating system's entropy; an integer seed below
#: this bound is one the caller gave (the odds of operating-system entropy this small are 2**-64)
_GIVEN_SEED_BOUND = 2**64


def _seeded_by_int(model: Any) -> bool:
    """Whether ``model.rng`` was built from an integer seed (``mesa.Model(rng=1234)``), read from the generator's
    ``SeedSequence``: Mesa seeds ``model.random`` from that same integer, so both generators are fixed by it and a
    second build to check that would cost a build for nothing. Only what numpy keeps is read (no Mesa version)."""
    seq = getattr(getattr(getattr(model, "rng", None), "bit_generator", None), "seed_seq", None)
    entropy = getattr(seq, "entropy", None)
    return (isinstance(entropy, int) and not isinstance(entropy, bool) and 0 <= entropy < _GIVEN_SEED_BOUND
            and tuple(getattr(seq, "spawn_key", ())) == ())


def _seeded_by_entropy(model: Any) -> bool:
    """Whether ``model.rng`` was seeded from the operating system's entropy, as ``np.random.default_rng()`` seeds
    one given nothing: an int of at least :data:`_GIVEN_SEED_BOUND` in its ``SeedSequence`` and no spawn key."""
    seq = getattr(getattr(getattr(model, "rng", None), "bit_generator", None), "seed_seq", None)
    entropy = getattr(seq, "entropy", None)
    return (isinstance(entropy, int) and not isinstance(entropy, bool) and entropy >= _GIVEN_SEED_BOUND
            and tuple(getattr(seq, "spawn_key", ())) == ())


__all__ = ["RNGLike", "as_generator", "describe", "model_given_no_seed", "seed_int", "spawn",
           "torch_generator"]
