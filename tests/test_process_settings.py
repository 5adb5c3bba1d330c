"""What importing aumann sets for the process."""

from __future__ import annotations

import os
import subprocess
import sys


def test_openmp_threads_wait_passively_unless_asked_otherwise():
    """Importing aumann sets OMP_WAIT_POLICY=PASSIVE before torch loads OpenMP, and keeps a user's setting."""
    code = "import os, aumann, torch; print(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "PASSIVE"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "OMP_WAIT_POLICY": "ACTIVE"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ACTIVE"


def test_torch_asks_for_huge_pages_unless_asked_otherwise():
    """Importing aumann sets THP_MEM_ALLOC_ENABLE=1 (torch's large CPU tensors on transparent huge pages),
    keeps a user's setting, and torch still allocates and computes under it."""
    code = ("import os, aumann, torch; x = torch.ones(1 << 22); "
            "print(os.environ['THP_MEM_ALLOC_ENABLE'], int(x.sum()))")
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", str(1 << 22)]
    out = subprocess.run([sys.executable, "-c", code], env={**env, "THP_MEM_ALLOC_ENABLE": "0"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", str(1 << 22)]
