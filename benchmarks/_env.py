"""What every benchmark prints next to its ratios: the machine's load and the thread settings.

Ratios against a reference measured in the same run survive a busy machine far better than seconds
do, but not entirely (a reference that streams memory and a kernel that computes suffer differently
from neighbours), so the load average before and after is part of every result.
"""

from __future__ import annotations

import os
import platform
from typing import Any


def environment() -> dict[str, Any]:
    import numpy as np
    import torch

    env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    return {
        "loadavg": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "numpy": np.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(), **{k: v for k, v in env.items() if v is not None},
    }


def header(what: str) -> dict[str, Any]:
    """Print one line describing the machine now; returns it for the results file."""
    env = environment()
    threads = ", ".join(f"{k}={v}" for k, v in env.items() if k.endswith("THREADS"))
    print(f"# {what} | load average {env['loadavg']} on {env['cpus']} CPUs | torch threads {env['torch_threads']}"
          f"{' | ' + threads if threads else ''} | GPU: {env['cuda'] or 'none'}", flush=True)
    return env


def set_threads(n: int | None) -> None:
    """``--threads n``: torch intra-op threads (and the BLAS/OpenMP pools that honour the env vars)."""
    if n:
        import torch

        torch.set_num_threads(n)
        os.environ["AUMANN_BENCH_THREADS"] = str(n)
