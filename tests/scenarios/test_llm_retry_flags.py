"""``aumann run --max-retries`` / ``--retry-after-max``: the backend's retry policy from the command line (before
these flags a CLI run always retried a failed request 3 times and waited at most 60 s for a Retry-After), against
the loopback OpenAI-compatible server of tests/llm_loopback.py."""

from __future__ import annotations

import pytest

from aumann.errors import ConfigError, RetryAfterTooLongError, ServerDownError
from tests.cli_run import invoke_run
from tests.llm_loopback import LoopbackLLM
from tests.scenarios.test_llm_runs import _cfg


def _run(tmp_path, srv, *flags: str) -> None:
    invoke_run("social-llm", "--config", str(_cfg(tmp_path)), "--out", str(tmp_path / "out"), "--no-plots",
               "--backend", "openai", "--model", "m", "--base-url", srv.base_url, "--concurrency", "1", *flags)


@pytest.mark.parametrize(("retries", "attempts"), [(0, 1), (2, 3)])
def test_max_retries_sets_the_attempts_of_each_request(tmp_path, monkeypatch, retries, attempts):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with LoopbackLLM(status=503) as srv:  # every request fails: the run stops after 8 decisions gave up in a row
        with pytest.raises(ServerDownError, match=f"after {attempts} attempt"):
            _run(tmp_path, srv, "--max-retries", str(retries))
        assert srv.stats()["requests"] == 8 * attempts


def test_retry_after_max_refuses_a_longer_wait_and_names_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    # every other injected error is a 429 asking for 5 s: within the default 60 s, beyond --retry-after-max 1
    with LoopbackLLM(error_rate=1.0, retry_after=5) as srv:
        with pytest.raises(RetryAfterTooLongError, match=r"Retry-After = 5 s, longer than retry_after_max = 1 s.*"
                                                         r"--retry-after-max"):
            _run(tmp_path, srv, "--retry-after-max", "1")


@pytest.mark.parametrize(("flag", "value"), [("--max-retries", "-1"), ("--max-retries", "1.5"),
                                             ("--max-retries", "101"), ("--max-retries", "nan"),
                                             ("--retry-after-max", "-2"), ("--retry-after-max", "inf"),
                                             ("--retry-after-max", "1e400")])
def test_bad_retry_flags_are_refused_naming_the_flag(tmp_path, monkeypatch, flag, value):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ConfigError, match=flag):
        invoke_run("social-llm", "--config", str(_cfg(tmp_path)), "--out", str(tmp_path / "never"), "--no-plots",
                   "--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", flag, value)
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("flag", ["--max-tokens", "--max-retries", "--max-calls", "--llm-seed"])
@pytest.mark.parametrize("text", ["4.00000000000000001", "3.9999999999999999", "4.0000000000000000000001e0"])
def test_an_integer_flag_refuses_a_text_that_only_rounds_to_an_integer(flag, text):
    """``float("4.00000000000000001")`` is 4.0: the integer flags took it as 4. The text writes no integer."""
    from aumann.cli import build_parser, llm_options

    args = build_parser().parse_args(["run", "social-llm", "--backend", "openai", "--model", "m", flag, text])
    with pytest.raises(ConfigError, match=f"{flag} must be an integer.*got {text}"):
        llm_options.check_arguments(args)


@pytest.mark.parametrize("flag, text, want", [("--max-tokens", "4", 4), ("--max-tokens", "4.0", 4),
                                              ("--max-tokens", "4e0", 4),
                                              ("--temperature", "1.00000000000000001", 1.0)])
def test_an_exact_integer_text_and_a_real_flag_still_pass(flag, text, want):
    from aumann.cli import build_parser, llm_options

    args = build_parser().parse_args(["run", "social-llm", "--backend", "openai", "--model", "m", flag, text])
    llm_options.check_arguments(args)
    got = getattr(args, flag[2:].replace("-", "_"))
    assert got == want and isinstance(got, type(want))  # an integer flag holds an int after the check
