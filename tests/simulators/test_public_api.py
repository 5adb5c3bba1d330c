"""The public surface of aumann.simulators is pinned, and importing it stays light."""

from __future__ import annotations

import subprocess
import sys

import aumann.simulators
import aumann.simulators.llm


def test_public_names():
    assert set(aumann.simulators.__all__) >= {
        "FeatureRecorder", "ArrayRecorder", "simulate", "checkpoint", "fork", "ForkResult", "for_agents",
        "LocalExecutor", "RayExecutor", "seeded_specs", "RunSpec",
    }
    assert set(aumann.simulators.llm.__all__) >= {
        "DecisionBackend", "OfflineBackend", "OpenAIBackend", "ResponseCache", "CacheMissError",
        "BudgetExceededError", "LLMAuthenticationError", "ModelNotFoundError", "Usage",
    }
    for mod in (aumann.simulators, aumann.simulators.llm):
        for name in mod.__all__:
            assert getattr(mod, name) is not None


def test_import_is_light():
    code = ("import sys, aumann.simulators, aumann.simulators.llm; "
            "print(sorted(m for m in ('torch', 'openai', 'mesa', 'ray', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
