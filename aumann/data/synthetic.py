"""A simple synthetic heavy-tailed panel for the quick demo (not calibrated; see the Bluesky synth).

Followers are lognormal-Pareto heavy-tailed, topic activity is sparse and zero-inflated, replies
concentrate on large accounts. Features follow the paper: a = log(1 + followers),
b = log(1 + posts), c = log(1 + replies received); tiers top 1 % / next 9 % / bottom 90 % by followers.
"""

from __future__ import annotations

import numpy as np

from aumann.checks import as_int
from aumann.errors import ConfigError
from aumann.io import memory_bytes
from aumann.panel import Panel
from aumann.seeding import RNGLike, as_generator
from aumann.tiers import tiers_by_rank


def heavy_tailed_panel(n_agents: int = 100_000, n_steps: int = 14, rng: RNGLike = 0) -> Panel:
    """A (T, N, 3) synthetic panel with tiers as the ``"tier"`` group (marked synthetic in ``meta``)."""
    n_agents = as_int(n_agents, "n_agents", minimum=1, error=ConfigError)
    n_steps = as_int(n_steps, "n_steps", minimum=1, error=ConfigError)
    need = n_steps * n_agents * 49 + n_agents * 24  # the draws and temporaries below, bytes
    if need > memory_bytes():  # refused before drawing (1e8 agents spent seconds on draws, then failed)
        raise MemoryError(f"Unable to allocate {need / 2**30:,.1f} GiB for a synthetic panel of {n_steps:,} steps × "
                          f"{n_agents:,} agents (this machine has {memory_bytes() / 2**30:,.1f} GiB)")
    gen = as_generator(rng)
    followers = np.floor(np.exp(gen.normal(0.3, 1.9, n_agents)) * (1 + gen.pareto(1.6, n_agents))).astype(np.int64)
    propensity = np.exp(gen.normal(-2.0, 1.2, n_agents))
    active = gen.random((n_steps, n_agents)) < np.minimum(0.9, 0.4 * propensity)[None, :]
    posts = np.where(active, gen.poisson(1.0 + 3.0 * propensity, (n_steps, n_agents)), 0)
    mean_replies = 0.05 * posts * np.power(1.0 + followers, 0.6)[None, :]
    replies = gen.poisson(mean_replies)
    values = np.empty((n_steps, n_agents, 3))
    values[:, :, 0] = np.log1p(followers)[None, :]
    values[:, :, 1] = np.log1p(posts)
    values[:, :, 2] = np.log1p(replies)
    return Panel(values, features=["a", "b", "c"], groups={"tier": tiers_by_rank(followers)},
                 meta={"synthetic": True, "generator": "aumann.data.synthetic.heavy_tailed_panel"})


__all__ = ["heavy_tailed_panel"]
