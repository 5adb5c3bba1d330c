"""``aumann run --backend NAME`` where NAME's registered factory returns ``None``: the scenario's offline policy
decides (the registry's contract, :func:`aumann.simulators.llm.registry.offline_policy_decides`), and every part
of the run says and does what ``--backend offline`` does -- not only the unused-flag warning and the resume digest
(``tests/cli/test_unused_flags.py``)."""

from __future__ import annotations

import pytest

BASE = ["run", "midscale-social", "--agents", "6", "--steps", "2", "--runs", "1", "--permutations", "4",
        "--no-ablations", "--no-plots", "--judge", "off"]


@pytest.fixture
def nothing(monkeypatch):
    """``register_backend("nothing", lambda options: None)``, for this test only."""
    from aumann.simulators.llm import registry

    monkeypatch.setitem(registry._registry, "nothing",
                        registry.BackendEntry("nothing", lambda options: None, "the offline policy, renamed"))
    return "nothing"


def test_a_dry_run_of_a_none_backend_is_refused_as_a_dry_run_of_offline_is(tmp_path, capsys, nothing):
    """`--backend nothing --dry-run` crashed with AttributeError: 'NoneType' object has no attribute 'model' (the dry
    run read backend.model); `--backend offline --dry-run` is refused with a ConfigError, and so is this now."""
    from aumann.cli import main

    out = tmp_path / "never"
    assert main([*BASE, "--backend", nothing, "--dry-run", "--out", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("aumann: error: ConfigError: --dry-run estimates an LLM run, and --backend nothing builds no LLM backend "
            "(its factory returned None)") in err and "0 requests" in err
    assert not out.exists()
