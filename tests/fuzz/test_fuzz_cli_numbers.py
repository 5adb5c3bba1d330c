"""Fuzz every numeric CLI flag (the non-LLM ones): any text either parses to a value inside the flag's documented
bounds or is refused by argparse with exit code 2 and a message naming the flag — nothing runs."""

from __future__ import annotations

import math

import pytest
from hypothesis import strategies as st

from aumann.cli import build_parser
from tests.fuzz.harness import fuzz_target

#: (command line before the flag, flag, lowest, highest, integer?) — the documented bounds
FLAGS = [
    ("run social-llm", "--runs", 1, 2**63 - 1, True), ("run social-llm", "--seed", 0, 2**63 - 1, True),
    ("run social-llm", "--agents", 1, 2**63 - 1, True), ("run social-llm", "--steps", 1, 2**63 - 1, True),
    ("run social-llm", "--permutations", 2, 2**63 - 1, True),
    ("run social-llm", "--step-timeout", 0.001, 1e6, False),
    ("demo", "--agents", 10, 100_000_000, True), ("demo", "--steps", 1, 1_000_000, True),
    ("demo", "--seed", 0, 2**63 - 1, True), ("report .", "--top", 1, 10_000_000, True),
    ("attribute p.npz --indicator heat --out o", "--steps", 1, 1_000_000, True),
    ("attribute p.npz --indicator heat --out o", "--power", 0, 1000, False),
    ("attribute p.npz --indicator heat --out o", "--tol", 0, 1, False),
    ("bluesky build-panel x.jsonl --out o", "--max-days", 1, 100_000, True),
    ("bluesky build-panel x.jsonl --out o", "--threads", 1, 4096, True),
    ("bluesky synth --out o", "--users", 100, 100_000_000, True), ("bluesky synth --out o", "--days", 1, 366, True),
    ("bluesky synth --out o", "--seed", 0, 2**63 - 1, True),
    ("bluesky capture --out o", "--duration", 0, 10 * 366 * 86400, False),
    ("bluesky capture --out o", "--cursor", 0, 2**63 - 1, True),
    ("bluesky capture --out o", "--rewind", 0, 86400, False),
    ("bluesky study counts --out o", "--seeds", 0, 2**63 - 1, True),
]

numeric_text = st.one_of(
    st.integers(-(2**80), 2**80).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats().map(lambda f: f"{f:e}"), st.text(max_size=12),
    st.sampled_from(["1e400", "-0", "0x10", "1_000", " 5 ", "٣", "1e-400", "nan", "+inf", "1.5", "9" * 400,
                     "0.0009", "1e6", "1e7", "366.0", "2e0"]),
)


@pytest.mark.parametrize("cmd,flag,lo,hi,integral", FLAGS, ids=[f"{c.split()[0]}{f}" for c, f, *_ in FLAGS])
def test_fuzz_numeric_flags(cmd, flag, lo, hi, integral, fuzz_budget):
    parser = build_parser()

    @fuzz_target(text=numeric_text)
    def check(text):
        try:
            args = parser.parse_args([*cmd.split(), flag, text])
        except SystemExit as exc:
            assert exc.code == 2
            return
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        value = value[0] if isinstance(value, list) else value
        assert not isinstance(value, bool)
        assert isinstance(value, int) if integral else (isinstance(value, float) and math.isfinite(value))
        assert lo <= value <= hi, (flag, text, value)

    check(fuzz_budget)


test_fuzz_numeric_flags.fuzz = True  # (each flag gets its share of --fuzz)


def test_refusals_name_the_flag(capsys):
    parser = build_parser()
    for cmd, flag, *_ in FLAGS:
        with pytest.raises(SystemExit):
            parser.parse_args([*cmd.split(), flag, "1e400"])
        assert f"argument {flag}" in capsys.readouterr().err
