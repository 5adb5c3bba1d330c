"""Counter-based uniforms: u(seed, step, stream, agent), independent of ordering and sharding.

The draw of agent i at step t for purpose ``stream`` is the i-th output of a SplitMix64 sequence
(Steele, Lea & Flood 2014, the generator behind Java's ``SplittableRandom``; its output passes
BigCrush) whose starting state is a hash of (seed, step, stream):

    state₀ = mix(mix(seed ⊕ C₁) ⊕ (step · C₂ + stream · C₃))
    u_i    = (mix(state₀ + (i + 1) · γ) >> 11) · 2⁻⁵³,    γ = 0x9E3779B97F4A7C15

with ``mix`` the SplitMix64 finaliser. :func:`uniform_pair` splits one output into two float32
uniforms (24 bits each), which is what a step's two Bernoulli draws (post, reshare) use. u_i depends
on nothing but (seed, step, stream, i): any
subset of agents, in any order, on any shard, draws the same numbers, and a fork that re-simulates a
step draws exactly what the factual run drew for every agent it did not intervene on.
"""

from __future__ import annotations

import numpy as np

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK = (1 << 64) - 1


def _mix_int(z: int) -> int:
    z &= _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def stream_state(seed: int, step: int, stream: int) -> int:
    """The SplitMix64 starting state of (seed, step, stream)."""
    a = _mix_int(int(seed) ^ 0x243F6A8885A308D3)
    return _mix_int(a ^ ((int(step) * 0x13198A2E03707344 + int(stream) * 0xA4093822299F31D0) & _MASK))


def _bits(seed: int, step: int, stream: int, index: np.ndarray | int) -> np.ndarray:
    idx = np.arange(index, dtype=np.uint64) if isinstance(index, int | np.integer) else \
        np.asarray(index).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (idx + np.uint64(1)) * _GAMMA
        z += np.uint64(stream_state(seed, step, stream))
        z ^= z >> np.uint64(30)
        z *= _M1
        z ^= z >> np.uint64(27)
        z *= _M2
        z ^= z >> np.uint64(31)
    return z


def uniforms(seed: int, step: int, stream: int, index: np.ndarray | int) -> np.ndarray:
    """float64 uniforms in [0, 1) (53 bits) for the agents ``index`` (an int n means agents 0 … n − 1)."""
    z = _bits(seed, step, stream, index)
    z >>= np.uint64(11)
    return z.astype(np.float64) * (1.0 / 9007199254740992.0)


def uniform_pair(seed: int, step: int, stream: int, index: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Two float32 uniforms in [0, 1) per agent from one 64-bit output: the top 24 bits of its high and
    of its low 32-bit half (24 bits = float32's resolution; enough for Bernoulli draws)."""
    z = _bits(seed, step, stream, index)
    hi = (z >> np.uint64(40)).astype(np.float32)
    lo = ((z >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.float32)
    scale = np.float32(1.0 / 16777216.0)
    hi *= scale
    lo *= scale
    return hi, lo


__all__ = ["stream_state", "uniform_pair", "uniforms"]
