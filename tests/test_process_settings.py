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
