"""Fixtures of the simulator tests: the real LLM server (see real_llm.py)."""

from tests.simulators.real_llm import real_llm_server  # noqa: F401 - a session fixture
