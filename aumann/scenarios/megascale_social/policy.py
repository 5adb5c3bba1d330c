"""The offline policy as a decision backend (the default when no LLM backend is given)."""

from __future__ import annotations

from aumann.scenarios.megascale_social.prompts import offline_policy
from aumann.simulators.llm import OfflineBackend

OFFLINE_LABEL = "offline policy"


def offline_backend() -> OfflineBackend:
    """An :class:`~aumann.simulators.llm.OfflineBackend` answering MegaScale-Social requests with
    :func:`~aumann.scenarios.megascale_social.prompts.offline_policy` (deterministic; no server, no key)."""
    return OfflineBackend(offline_policy, name="megascale-social offline policy")


__all__ = ["OFFLINE_LABEL", "offline_backend"]
