"""Fuzzing the LLM side's readers and flags (issue 22): typed error or correct result, never a traceback.

Every reader of outside records -- server replies and their usage, the usage ledger, price tables, cache
rows -- and every numeric LLM flag gets arbitrary input from hypothesis (a bounded number of examples,
so the suite stays fast); the spend caps are checked against servers that report absurd counts.
"""

from __future__ import annotations

import json
import math
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from aumann.errors import BudgetExceededError, ConfigError
from aumann.simulators.llm import LLMBackend, Price, ResponseCache, Usage
from aumann.simulators.llm.calls import Answer
from aumann.simulators.llm.layers import Budget, Coalesce, Retry, compose
from aumann.simulators.llm.records import MAX_TOKENS_PER_REQUEST, read_completion
from aumann.simulators.llm.settings import Caps

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: JSON values a hostile or broken server might put where a count belongs
odd_numbers = st.one_of(
    st.integers(min_value=-10**20, max_value=10**20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.booleans(), st.none(), st.lists(st.integers(), max_size=2),
    st.sampled_from(["1e400", "-1e9", "NaN", "Infinity", "abc", "12"]))


def _raw(v) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("1e400" if v > 0 else "-1e400")
    if isinstance(v, str) and v in ("1e400", "-1e9", "NaN", "Infinity"):
        return v  # a bare JSON token, as a server would send it
    return json.dumps(v)


@FUZZ
@given(pt=odd_numbers, ct=odd_numbers, text=st.one_of(st.text(max_size=40), st.none(), st.integers()))
def test_server_replies_and_usage_are_read_through_one_schema(pt, ct, text):
    usage = f'{{"prompt_tokens": {_raw(pt)}, "completion_tokens": {_raw(ct)}}}'
    body = f'{{"choices": [{{"message": {{"content": {json.dumps(text)}}}}}], "usage": {usage}}}'.encode()
    done = read_completion(body)
    assert isinstance(done.prompt_tokens, int) and isinstance(done.completion_tokens, int)
    assert 0 <= done.prompt_tokens <= MAX_TOKENS_PER_REQUEST and 0 <= done.completion_tokens <= MAX_TOKENS_PER_REQUEST
    ok = all((isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_TOKENS_PER_REQUEST) or v is None
             for v in (pt, ct))
    assert (done.usage_refused is None) == ok
    if done.usage_refused is not None:
        assert (done.prompt_tokens, done.completion_tokens) == (0, 0)
    assert done.text == (text if isinstance(text, str) else None)


@FUZZ
@given(st.binary(max_size=200))
def test_any_reply_body_is_read_or_refused_with_a_value_error(body):
    try:
        read_completion(body)
    except ValueError:
        pass


class Vote(BaseModel):
    yes: bool


class Reporting:
    """A core whose server reports whatever token counts it is given."""

    def __init__(self, counts):
        self.counts = list(counts)
        self.sent = 0

    def handle(self, call):
        pt, ct = self.counts[self.sent % len(self.counts)]
        self.sent += 1
        refused = None
        if not all(isinstance(v, int) and 0 <= v <= MAX_TOKENS_PER_REQUEST for v in (pt, ct)):
            refused, pt, ct = "out of range", 0, 0
        return Answer('{"yes": true}', pt if isinstance(pt, int) else 0, ct if isinstance(ct, int) else 0,
                      meta={"usage_refused": refused})


def _bounds(call):
    return 64, 16  # an attempt's upper bound: 80 tokens, $0.08 at the test price


@FUZZ
@given(counts=st.lists(st.tuples(st.integers(-10**12, 10**12), st.integers(-10**12, 10**12)), min_size=1, max_size=4),
       cap=st.floats(min_value=0.0, max_value=0.5))
def test_no_reported_count_lets_spend_pass_the_cost_cap(counts, cap):
    usage = Usage()
    core = Reporting(counts)
    price = Price(input=1000.0, output=1000.0)  # $0.001 a token: a request is cents
    stack = compose(core, lambda inner: Budget(inner, usage, Caps(max_cost=cap), price=price, bounds=_bounds),
                    lambda inner: Retry(inner, usage), Coalesce)
    backend = LLMBackend(stack, name="fuzz", model="m", usage=usage, concurrency=1)
    msgs = [{"role": "user", "content": "vote"}]
    for seed in range(12):
        try:
            backend.decide(msgs, Vote, seed=seed)
        except BudgetExceededError:
            break
    assert 0.0 <= usage.cost_usd <= cap + 1e-12  # never negative, never past the cap
    assert usage.prompt_tokens >= 0 and usage.completion_tokens >= 0


@FUZZ
@given(data=st.dictionaries(st.sampled_from(["calls", "cost_usd", "prompt_tokens", "decisions", "latency_bins",
                                             "retries", "invalid_decisions", "fork_calls", "other"]),
                       st.one_of(odd_numbers, st.dictionaries(st.text(max_size=5), odd_numbers, max_size=3)),
                       max_size=6))
def test_ledger_counters_are_checked(data, tmp_path_factory):
    from aumann.simulators.llm import load_ledger

    path = tmp_path_factory.mktemp("ledger") / "llm-usage.json"
    try:
        text = json.dumps({"usage": data}, allow_nan=True)
    except (TypeError, ValueError):
        return
    path.write_text(text)
    try:
        u = load_ledger(path)
    except ConfigError:
        return
    for k, v in u.counters().items():
        assert isinstance(v, int | float) and math.isfinite(v) and v >= 0, k


@FUZZ
@given(inp=odd_numbers, out=odd_numbers)
def test_price_tables_are_checked(inp, out, tmp_path_factory):
    from aumann.simulators.llm import load_prices

    def toml(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
        if isinstance(v, int):
            return str(v)
        return json.dumps(str(v))

    path = tmp_path_factory.mktemp("prices") / "prices.toml"
    path.write_text(f'[models."m"]\ninput = {toml(inp)}\noutput = {toml(out)}\n')
    try:
        table = load_prices(path)
    except ConfigError:
        return
    p = table["m"]
    assert 0 <= p.input <= 1e6 and 0 <= p.output <= 1e6


@FUZZ
@given(text=st.one_of(st.text(max_size=20), st.integers(-2**63, 2**63 - 1), st.binary(max_size=8),
                     st.floats(allow_nan=True)),
       pt=st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True), st.text(max_size=4)),
       ct=st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True), st.text(max_size=4)),
       request=st.one_of(st.text(max_size=30), st.just('{"messages": [], "invalid": "x"}'), st.just("[[[[")))
def test_cache_rows_are_read_through_their_schema(text, pt, ct, request, tmp_path_factory):
    path = tmp_path_factory.mktemp("cache") / "c.sqlite"
    cache = ResponseCache(path)
    len(cache)  # creates the table
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     ("k", "b", "m", request, text, pt, ct, 0.0))
    except sqlite3.IntegrityError:
        # SQLite binds a float NaN as NULL, which the table's NOT NULL columns refuse: such a row
        # can never be on disk for the reader to meet. Anything else refused is a real failure.
        assert any(isinstance(v, float) and math.isnan(v) for v in (text, pt, ct))
        conn.close()
        return
    conn.commit()
    conn.close()
    got = ResponseCache(path).get("k")
    assert isinstance(got.text, str) and isinstance(got.prompt_tokens, int) and isinstance(got.completion_tokens, int)
    assert 0 <= got.prompt_tokens <= MAX_TOKENS_PER_REQUEST and 0 <= got.completion_tokens <= MAX_TOKENS_PER_REQUEST
    rows = list(ResponseCache(path, mode="replay").rows())
    assert len(rows) == 1 and ("damaged" in rows[0] or isinstance(rows[0]["reply"], str))


FLAGS = ["--rpm", "--tpm", "--llm-timeout", "--max-cost", "--max-calls", "--temperature", "--top-p", "--max-tokens",
         "--llm-seed", "--max-invalid-rate", "--concurrency", "--assumed-latency", "--max-retries", "--retry-after-max"]


@FUZZ
@given(flag=st.sampled_from(FLAGS),
       value=st.one_of(st.sampled_from(["1e-300", "1e300", "nan", "inf", "-inf", "-1", "0", "1e15", "abc", "0.5", "7",
                                        "1e400", "2", "-0"]),
                       st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers().map(str)))
def test_every_numeric_llm_flag_is_checked_with_a_one_line_error(flag, value):
    from aumann.cli import build_parser, llm_options

    argv = ["run", "social-llm", "--backend", "openai", "--model", "m", flag, value]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: not a number at all -- its usage line names the flag
        assert exc.code == 2
        return
    try:
        llm_options.check_arguments(args)
    except ConfigError as exc:
        msg = str(exc)
        assert flag in msg and "\n" not in msg
        return
    v = getattr(args, flag[2:].replace("-", "_"))
    assert isinstance(v, int | float) and math.isfinite(v)


@FUZZ
@given(secret=st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=10,
                      max_size=30),
       where=st.sampled_from(["password", "password-with-at", "user", "query", "path"]))
def test_a_secret_in_any_part_of_a_url_never_reaches_a_file(secret, where, tmp_path_factory):
    from aumann.manifest import redact_url
    from aumann.simulators.llm import OpenAIBackend, save_ledger

    url = {"password": f"http://u:{secret}@127.0.0.1:9/v1",
           "password-with-at": f"http://u:x@{secret}@127.0.0.1:9/v1",
           "user": f"http://{secret}@127.0.0.1:9/v1",
           "query": f"http://127.0.0.1:9/v1?k={secret}",
           "path": f"http://127.0.0.1:9/v1/sk-{secret}"}[where]
    assert secret not in redact_url(url)
    b = OpenAIBackend(model="m", base_url=url)
    out = tmp_path_factory.mktemp("ledger") / "llm-usage.json"
    save_ledger(out, b.usage, llm=b.describe(), label=b.label)
    assert secret not in out.read_text() and secret not in repr(b) and secret not in b.label


def test_the_fuzz_suite_catches_a_bypass_it_was_written_for():
    """The cap test above fails on the old arithmetic: a server reporting -10**9 tokens made spend negative."""
    usage = Usage()
    price = Price(1000.0, 1000.0)
    stack = compose(Reporting([(-10**9, -10**9)]), lambda inner: Budget(inner, usage, Caps(max_cost=0.5), price=price,
                                                                                 bounds=_bounds),
                    lambda inner: Retry(inner, usage))
    b = LLMBackend(stack, name="fuzz", model="m", usage=usage, concurrency=1)
    with pytest.raises(BudgetExceededError):
        for seed in range(100):
            b.decide([{"role": "user", "content": "vote"}], Vote, seed=seed)
    assert usage.bad_usage >= 1 and 0 < usage.cost_usd <= 0.5  # refused, counted, charged its upper bound
