"""aumann: Aumann–Shapley attribution of emergent macro indicators in multi-agent simulations.

Importing :mod:`aumann` defines names only; the heavy parts (torch, mesa, openai, matplotlib) load
when their subpackages are imported.

One process setting is made here, before torch can load OpenMP: ``OMP_WAIT_POLICY=PASSIVE`` unless the
environment already says otherwise. OpenMP's default lets idle worker threads spin after every parallel
region; the study's many small torch operations then burned several times their own CPU time in spinning
(MegaScale-Social's sampled Shapley at 10⁵ agents: 9.9 CPU-s → 1.6 CPU-s), which on a shared 2-core
machine also slows everyone else. Set ``OMP_WAIT_POLICY=ACTIVE`` to get the spinning back.

A second one, ``THP_MEM_ALLOC_ENABLE=1`` unless set: torch then asks the kernel for transparent huge pages
for its large CPU tensors (numpy does so already). Every fresh tensor of a path integral's autograd pass
otherwise costs a page fault per 4 KiB, and at 10⁶ agents those faults were about half of its time
(MegaScale-Social's f-sensitivity ablation: 7.5 → 3.3–5.1 CPU-s per aggregator, peak resident set
unchanged). It only matters where the kernel's ``transparent_hugepage`` mode is ``madvise`` or ``always``;
set ``THP_MEM_ALLOC_ENABLE=0`` to turn it off.
"""

import os as _os

_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__version__ = "0.1.0"
__all__ = ["__version__"]
