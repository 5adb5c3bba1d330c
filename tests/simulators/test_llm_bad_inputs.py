"""Issue 10, LLM backend: bad inputs and hostile servers get typed errors that name the problem, and
the API key never shows up in messages, logs or stored text, whatever path it takes."""

from __future__ import annotations

import json
import logging
import re
import sqlite3

import httpx
import pytest
from pydantic import BaseModel

from aumann.errors import ConfigError, ResponseCacheError, ResponseTooLargeError, RetryAfterTooLongError
from aumann.manifest import build_manifest, redact, redact_command, redact_url
from aumann.scenarios.social_llm.prompts import InteractDecision
from aumann.simulators.llm import BackendUnavailableError, MalformedResponseError, OpenAIBackend, ResponseCache
from aumann.simulators.llm.endpoints import parse_endpoint
from tests.llm_loopback import LoopbackLLM
from tests.simulators.llm_fakes import SECRET, closed_port

MSGS = [{"role": "user", "content": "Post?"}]


class Post(BaseModel):
    post: bool = False


def _no_secret(*texts: str) -> None:
    for t in texts:
        assert SECRET not in t and SECRET[8:] not in t


def test_key_echoed_inside_a_malformed_200_reply_is_redacted_from_the_error_and_the_logs(caplog):
    caplog.set_level(logging.DEBUG)
    with LoopbackLLM(echo_authorization=True) as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, api_key=SECRET, max_retries=1, sleep=lambda s: None)
        with pytest.raises(BackendUnavailableError, match=r"not JSON.*Authorization: Bearer \*\*\*") as info:
            b.decide(MSGS, Post)
    _no_secret(str(info.value), caplog.text, repr(b))
    assert srv.stats()["requests"] == 2


def test_a_reply_that_quotes_the_key_is_stored_without_it(tmp_path):
    class Note(BaseModel):
        text: str

    with LoopbackLLM(lambda body: json.dumps({"text": f"my key is {SECRET}"})) as srv:
        cache = ResponseCache(tmp_path / "c.sqlite")
        out = OpenAIBackend(model="m", base_url=srv.base_url, api_key=SECRET, cache=cache).decide(MSGS, Note)
    cache.close()
    assert out.text == "my key is ***"
    assert SECRET.encode() not in (tmp_path / "c.sqlite").read_bytes()


@pytest.mark.parametrize("url", ["http://bob:{k}@127.0.0.1:{p}/v1", "http://127.0.0.1:{p}/v1?api_key={k}",
                                 "http://127.0.0.1:{p}/v1?{k}", "http://127.0.0.1:{p}/v1?v=2&{k}"])
def test_credentials_inside_a_base_url_are_used_but_never_recorded(url, caplog):
    """(A key given as a bare query piece, ``?sk-…`` without a name, was kept whole in the label, the manifest's
    endpoints and every message: only ``name=value`` pieces were redacted.)"""
    caplog.set_level(logging.DEBUG)
    seen = []
    with LoopbackLLM(lambda body: '{"post": true}') as srv:
        full = url.format(k=SECRET, p=srv.port)
        srv.reply = lambda body: seen.append(1) or '{"post": true}'
        b = OpenAIBackend(model="m", base_url=full, max_retries=0)
        assert b.decide(MSGS, Post).post is True and seen
    _no_secret(b.label, b.base_url, repr(b), json.dumps(b.describe()), caplog.text)
    _no_secret(redact_command(["aumann", "run", "x", "--base-url", full]), redact_url(full))
    down = url.format(k=SECRET, p=closed_port())
    with pytest.raises(BackendUnavailableError) as info:
        OpenAIBackend(model="m", base_url=down, max_retries=0).decide(MSGS, Post)
    _no_secret(str(info.value))
    assert "127.0.0.1" in str(info.value)


def test_url_userinfo_becomes_the_bearer_key_when_none_is_given():
    ep = parse_endpoint(f"https://bob:{SECRET}@api.example.com/v1?x=1")
    assert ep.api_key == SECRET and ep.public == "https://***@api.example.com/v1?x=***" and ep.port == 443
    with pytest.raises(ConfigError, match=r"http\(s\)://host.*ftp://\*\*\*@h/v1"):
        parse_endpoint(f"ftp://u:{SECRET}@h/v1")



def test_a_url_s_plain_user_name_is_redacted_in_the_url_only_not_as_a_word(caplog):
    # the user name of http://user:KEY@host was registered as a secret: "user" became *** in every message and log
    # line ("a social-media ***"), though the URL's whole userinfo is redacted wherever the URL is shown
    from aumann.simulators.llm.core import ChatCompletions
    from aumann.simulators.llm.redaction import redact_recorded

    url = f"http://user:{SECRET}@127.0.0.1:9/v1"
    core = ChatCompletions("m", url)
    assert core.redact(f"a social-media user; {url}") == "a social-media user; http://***@127.0.0.1:9/v1"
    ep = parse_endpoint(url)
    assert ep.api_key == SECRET and ep.url_secrets == (SECRET,) and ep.public == "http://***@127.0.0.1:9/v1"
    with caplog.at_level(logging.WARNING, logger="aumann"):
        logging.getLogger("aumann").warning("persona: a social-media user")
    assert "persona: a social-media user" in caplog.text
    assert redact_recorded(f"user {url}") == "user http://***@127.0.0.1:9/v1"


@pytest.mark.parametrize("user", ["sk-proj-4f9a8b7c", "a1B2c3D4e5F6g7H8i9J0k1L2m3"], ids=["key prefix", "long"])
@pytest.mark.parametrize("password", [True, False], ids=["with password", "user name is the key"])
def test_a_key_like_url_user_name_is_redacted_everywhere(caplog, user, password):
    from aumann.simulators.llm.core import ChatCompletions
    from aumann.simulators.llm.redaction import redact_recorded, redact_registered

    url = f"https://{user}{':' + SECRET if password else ''}@127.0.0.1:9/v1"
    ep = parse_endpoint(url)
    assert ep.api_key == (SECRET if password else user) and user in ep.url_secrets
    core = ChatCompletions("m", url)
    with caplog.at_level(logging.WARNING, logger="aumann"):
        logging.getLogger("aumann").warning("the user was %s", user)
    for text in (core.redact(f"the user was {user}"), redact_registered(f"the user was {user}"),
                 redact_recorded(f"the user was {user}"), caplog.text):
        assert user not in text and "the user was " in text

def test_manifest_redacts_secret_named_keys_but_never_token_counts():
    m = build_manifest(f"aumann run x --base-url http://u:{SECRET}@h/v1", config={
        "api_key": SECRET, "Authorization": f"Bearer {SECRET}", "password": "pw-123456", "token": "t0k3n-xyz",
        "hf_token": "hf-abcdef", "secret": "s3cr3t-x"},
        extra={"llm_usage": {"prompt_tokens": 12, "completion_tokens": 3, "max_tokens": 9, "tokens": 4}})
    text = json.dumps(m)
    _no_secret(text)
    for v in ("pw-123456", "t0k3n-xyz", "hf-abcdef", "s3cr3t-x"):
        assert v not in text
    assert m["llm_usage"] == {"prompt_tokens": 12, "completion_tokens": 3, "max_tokens": 9, "tokens": 4}
    assert redact({"total_tokens": 5, "access_token": "abc"}) == {"total_tokens": 5, "access_token": "<redacted>"}


def test_a_reply_over_the_size_cap_is_rejected_counted_and_its_text_not_stored(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with LoopbackLLM(lambda body: '{"post": true}', huge_reply=5000) as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, max_response_bytes=2000, max_retries=1, cache=cache,
                          sleep=lambda s: None)
        with pytest.raises(ResponseTooLargeError, match=r"max_response_bytes = 2000 bytes \(\d+ bytes announced\)"):
            b.decide(MSGS, Post)
    assert b.usage.failures == 2 and b.usage.calls == 2
    rows = list(cache.rows())  # the decision is stored, as an abstention without its reply (see test_llm_too_large)
    assert [(r["reply"], r["invalid"][:11]) for r in rows] == [("", "too large: ")] and "    " not in json.dumps(rows)


def test_a_chunked_reply_over_the_cap_is_cut_off_while_reading():
    def big(request):
        return httpx.Response(200, content=iter([b"x" * 800] * 5))  # streamed: no Content-Length

    b = OpenAIBackend(model="m", transport=httpx.MockTransport(big), max_response_bytes=1000, max_retries=0)
    with pytest.raises(ResponseTooLargeError, match="cut off while reading"):
        b.decide(MSGS, Post)


def test_retry_after_beyond_the_maximum_is_a_typed_error_naming_the_wait():
    def slow_down(request):
        return httpx.Response(429, headers={"retry-after": "120"}, json={"error": {"message": "slow down"}})

    b = OpenAIBackend(model="m", transport=httpx.MockTransport(slow_down), retry_after_max=30, max_retries=3,
                      sleep=lambda s: None)
    with pytest.raises(RetryAfterTooLongError, match=r"Retry-After = 120 s, longer than retry_after_max = 30 s"):
        b.decide(MSGS, Post)
    assert b.usage.calls == 1 and b.usage.retries == 0  # not retried: waiting is what the server asked


def test_retry_after_as_an_http_date_is_honoured():
    import time
    from email.utils import formatdate

    from aumann.simulators.llm.replies import retry_after

    assert 8 < retry_after({"retry-after": formatdate(time.time() + 10, usegmt=True)}) <= 10
    assert retry_after({"retry-after-ms": "250"}) == 0.25 and retry_after({"retry-after": "soon"}) == 0.0


@pytest.mark.parametrize("tz", ["America/New_York", "Asia/Tokyo", "UTC"])
@pytest.mark.parametrize("form", ["asctime", "minus-zero", "gmt"])
def test_an_http_date_without_a_zone_is_utc_whatever_the_local_time_zone(tz, form, monkeypatch):
    """An HTTP date is UTC in all three formats (RFC 9110 5.6.7). The asctime form and a -0000 zone parse to a naive
    datetime, which was read in local time: under TZ=America/New_York a date 30 s ahead asked for 18,030 s (and a
    run stopped with RetryAfterTooLongError); under Asia/Tokyo for none (retried at once while rate limited)."""
    import time
    from email.utils import formatdate

    from aumann.simulators.llm.replies import retry_after

    when = time.time() + 30
    text = {"asctime": time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(when)),
            "minus-zero": formatdate(when), "gmt": formatdate(when, usegmt=True)}[form]
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        assert 27 < retry_after({"retry-after": text}) <= 30
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_reply_whose_fields_were_coerced_away_is_not_cached_as_a_good_answer(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with LoopbackLLM(lambda body: '{"interact": true, "action": "love"}') as srv:
        b = OpenAIBackend(model="m", base_url=srv.base_url, max_retries=1, cache=cache, sleep=lambda s: None)
        with pytest.raises(MalformedResponseError, match=r"\['action'\] coerced away.*\"love\"") as info:
            b.decide(MSGS, InteractDecision)
        assert srv.stats()["requests"] == 2
        again = OpenAIBackend(model="m", base_url=srv.base_url, max_retries=1, cache=ResponseCache(cache.path))
        with pytest.raises(MalformedResponseError, match="coerced away"):  # stored as invalid, never as an answer
            again.decide(MSGS, InteractDecision)
        assert srv.stats()["requests"] == 2  # and not asked again
    assert "action" in str(info.value) and len(cache) == 1
    assert InteractDecision.model_validate({"interact": True, "action": "love"}).action is None  # what it hid


def test_a_corrupted_cache_file_is_a_typed_error_naming_the_file(tmp_path):
    path = tmp_path / "llm-cache.sqlite"
    path.write_bytes(b"\x00garbage, not a database" * 100)
    with pytest.raises(ResponseCacheError, match=r"llm-cache\.sqlite.*corrupted or not a SQLite file") as info:
        len(ResponseCache(path))
    assert isinstance(info.value, ConfigError) and not isinstance(info.value, sqlite3.Error)
    with pytest.raises(ResponseCacheError, match=r"llm-cache\.sqlite"):
        ResponseCache(path).get("k")


def test_a_foreign_sqlite_database_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    before = path.read_bytes()
    with pytest.raises(ResponseCacheError, match=r"app\.db.*another application.*\['users'\]"):
        ResponseCache(path).get("k")
    assert path.read_bytes() == before
    wrong = tmp_path / "wrong.db"
    con = sqlite3.connect(wrong)
    con.execute("CREATE TABLE responses (key TEXT, value TEXT)")
    con.commit()
    con.close()
    with pytest.raises(ResponseCacheError, match=r"wrong\.db.*columns \['key', 'value'\]"):
        ResponseCache(wrong).get("k")


def test_bad_backend_and_rate_settings_are_typed_errors_naming_the_setting(tmp_path):
    from aumann.simulators.llm import LLMRequestError
    from aumann.simulators.llm.prices import load_prices

    for kw, name in (({"concurrency": 0}, "concurrency"), ({"max_cost": float("nan")}, "max_cost"),
                     ({"structured_output": "xml"}, "structured_output"), ({"jitter": 2}, "jitter"),
                     ({"max_response_bytes": 0}, "max_response_bytes"),
                     # (timeout=0 was accepted, as --llm-timeout 0 is not: every request timed out, each decision an
                     # abstention, until ServerDownError "timed out after 0s ... Is the server up?")
                     ({"timeout": 0}, r"timeout .*every request would time out"), ({"timeout": 1e-9}, "timeout")):
        with pytest.raises(LLMRequestError, match=name):
            OpenAIBackend(model="m", **kw)
    for kw, name in (({"rpm": 0}, "rpm"), ({"tpm": float("inf")}, "tpm")):
        with pytest.raises(ConfigError, match=name):
            OpenAIBackend(model="m", **kw)
    with pytest.raises(ConfigError, match=r"base_url .*not-a-url"):
        OpenAIBackend(model="m", base_url="not-a-url")
    with pytest.raises(ConfigError, match=r"price table .*does not exist"):
        load_prices("/nonexistent/prices.toml")
    for where in (tmp_path, "/dev/zero"):  # both were "does not exist"
        with pytest.raises(ConfigError, match=r"price table .* is not a regular file"):
            load_prices(where)


def test_a_bad_price_table_names_the_entry(tmp_path):
    from aumann.simulators.llm.prices import load_prices, price_for

    p = tmp_path / "prices.toml"
    p.write_text('[models."my-model"]\ninput = -1\noutput = 2\n')
    with pytest.raises(ConfigError, match=r"my-model\.input must be a finite number >= 0; got -1"):
        load_prices(p)
    p.write_text('[models."my-model"]\ninput = 0.5\noutput = 2\n')
    table = load_prices(p)
    assert price_for("my-model", table).cost(1_000_000, 1_000_000) == 2.5
    assert price_for("gpt-4o-mini-2024-07-18", table).input == 0.15 and price_for("unknown-model", table) is None


def test_a_broken_usage_ledger_is_a_typed_error_naming_the_file(tmp_path):
    from aumann.simulators.llm import load_ledger

    path = tmp_path / "llm-usage.json"
    path.write_text('{"usage": {"calls": 3')
    with pytest.raises(ConfigError, match=r"llm-usage\.json.*unreadable"):
        load_ledger(path)


def test_http_library_log_lines_never_show_a_key_from_the_url(caplog):
    import logging as lg

    caplog.set_level(lg.DEBUG)
    with LoopbackLLM(lambda body: '{"post": true}') as srv:
        b = OpenAIBackend(model="m", base_url=f"{srv.base_url}?api_key={SECRET}", transport=httpx.HTTPTransport())
        assert b.decide(MSGS, Post).post is True
    assert "HTTP Request: POST" in caplog.text  # httpx logged the request line ...
    _no_secret(caplog.text)  # ... without the key


def test_a_hostile_server_through_the_cli_never_gets_the_key_into_stderr_or_the_run_directory(tmp_path, monkeypatch,
                                                                                             capsys):
    # end to end (issue 10's two security holes at once): the key comes from the environment AND inside
    # --base-url, and the server echoes the Authorization header inside 200 replies that do not parse
    from aumann.cli import main
    from tests.llm_loopback import LoopbackLLM

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    cfg = tmp_path / "tiny.toml"
    cfg.write_text("agents = 4\nsteps = 3\nruns = 1\n[study]\npermutations = 4\nablations = false\n")
    out = tmp_path / "out"
    with LoopbackLLM(echo_authorization=True) as srv:
        url = f"http://user:{SECRET}@127.0.0.1:{srv.port}/v1?api_key={SECRET}"
        code = main(["run", "social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--backend",
                     "openai", "--model", "gpt-4o-mini", "--base-url", url, "--max-calls", "6"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert SECRET not in err and SECRET[-8:] not in err
    assert err.splitlines()[-1].startswith("aumann: error: ")
    for f in out.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


@pytest.mark.parametrize("usage, key", [('{"calls": 1e400}', "calls"), ('{"cost_usd": NaN}', "cost_usd"),
                                        ('{"calls": -5}', "calls"), ('{"prompt_tokens": 2.5}', "prompt_tokens"),
                                        ('{"calls": true}', "calls"), ('{"cost_usd": "1"}', "cost_usd")],
                         ids=["overflow", "nan_cost", "negative", "fraction", "bool", "string"])
def test_a_usage_ledger_with_impossible_spend_is_refused_naming_the_field(tmp_path, usage, key):
    # the ledger carries spend across resumed invocations: NaN or negative spend would disable the caps
    from aumann.simulators.llm import load_ledger

    path = tmp_path / "llm-usage.json"
    path.write_text('{"usage": ' + usage + '}')
    with pytest.raises(ConfigError, match=r"llm-usage\.json") as info:
        load_ledger(path)
    assert key in str(info.value)


def test_the_usage_ledger_is_written_as_strict_json(tmp_path):
    from aumann.simulators.llm import load_ledger, save_ledger
    from aumann.simulators.llm.usage import Usage

    u = Usage()
    u.calls, u.cost_usd = 3, 0.25
    path = save_ledger(tmp_path / "llm-usage.json", u, note=float("nan"))
    data = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(c))
    assert data["note"] is None and load_ledger(path).calls == 3


# ------------------------------------------------------------------ found by a helper attacking the secrets (27 Nov)
BARE = "9f8e7d6c5b4a39281706f5e4d3c2b1a0"  # a key with no sk-/Bearer shape: only the Redactor's own list knows it


def _no_piece(text: str, key: str = BARE) -> None:
    """Not a run of 6 or more of ``key``'s first or last characters anywhere in ``text``."""
    for k in range(6, len(key) + 1):
        assert key[:k] not in text and key[-k:] not in text, (k, text)


@pytest.mark.parametrize("cut", range(120, 170, 7))
def test_a_key_echoed_across_the_cut_of_a_message_leaves_no_piece_of_it(cut):
    """A malformed 200 reply and an HTTP error body that echo the key where the message cuts the body (``[:160]``,
    ``[:500]``): the message was cut first and redacted after, so the key's first characters survived (18 of 32
    in the repro). Redacted whole, then cut; and the Redactor itself removes what is left of a key on either side
    of a cut it did not make."""
    from aumann.simulators.llm.redaction import Redactor
    from aumann.simulators.llm.replies import Retryable, interpret

    class Reply:
        def __init__(self, status, body):
            self.status, self.body, self.headers = status, body, {}

    r = Redactor([BARE])
    body = ('{"pad":"' + "y" * (cut - 9) + '","key":"' + BARE + '"').encode()
    with pytest.raises(Retryable) as info:
        interpret(Reply(200, body), where="h", model="m", redact=r, retry_after_max=1, negotiable=False,
                  list_models=lambda: None)
    _no_piece(str(info.value))
    err = json.dumps({"error": {"message": "x" * (cut * 3) + " invalid key " + BARE}}).encode()
    with pytest.raises(Exception) as info:
        interpret(Reply(400, err), where="h", model="m", redact=r, retry_after_max=1, negotiable=False,
                  list_models=lambda: None)
    _no_piece(str(info.value))
    for piece in (BARE[:cut % 20 + 6], BARE[-(cut % 20 + 6):], f"{BARE[:9]}…", f"…{BARE[-9:]}"):
        _no_piece(r(f"says {piece} here"))
    assert r("nothing like it: 0123456789") == "nothing like it: 0123456789"


@pytest.mark.parametrize("bad", ["\r", "\n", " ", "\t", "\x00", "\u2028"])
def test_an_api_key_a_header_cannot_carry_is_refused_without_showing_it(bad, monkeypatch, capsys):
    """A key with a trailing CR (a CRLF .env file) reached http.client, whose ValueError quoted the whole header
    and surfaced as a ScenarioCodeError holding the key. Now: a ConfigError naming the variable and the position."""
    from aumann.cli import main

    key = f"sk-proj-TOPSECRET0123456789abcdef{bad}"
    with pytest.raises(ConfigError, match=r"api_key holds .* at position 34 of 34.*not shown") as info:
        OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1", api_key=key)
    assert "TOPSECRET" not in str(info.value)
    if bad == "\x00":
        return  # no environment variable can hold a NUL
    monkeypatch.setenv("OPENAI_API_KEY", key)
    code = main(["run", "social-llm", "--agents", "4", "--steps", "2", "--runs", "1", "--no-plots", "--backend",
                 "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--out", "/nonexistent/x"])
    err = capsys.readouterr().err
    assert code == 2 and "ConfigError: OPENAI_API_KEY holds" in err and "TOPSECRET" not in err


def test_a_header_value_http_client_refuses_is_a_transport_failure_without_the_header():
    from aumann.simulators.llm.transport import StdlibTransport, TransportFailure

    ep = parse_endpoint("http://127.0.0.1:9/v1")
    with pytest.raises(TransportFailure) as info:
        StdlibTransport().request("POST", ep, "/v1/x", b"{}", {"Authorization": f"Bearer {SECRET}\r"}, 1.0, 100)
    _no_secret(str(info.value))


@pytest.mark.parametrize("url", ["http://bob:Xy12/{k}@127.0.0.1:{p}/v1", "http://bob:8080/{k}@127.0.0.1:{p}/v1",
                                 "http://bob:a?{k}@127.0.0.1:{p}/v1", "http://bob:a#{k}@127.0.0.1:{p}/v1"])
def test_a_password_with_an_unencoded_slash_or_question_mark_is_refused_and_never_shown(url):
    """urlsplit ends the userinfo at the first '/', '?' or '#': the password went into the host, port or path, and
    every message (and llm-usage.json's endpoints) showed it. Refused, with everything up to the last '@' redacted."""
    full = url.format(k=SECRET, p=closed_port())
    with pytest.raises(ConfigError, match=r"base_url 'http://\*\*\*@127\.0\.0\.1:\d+/v1'.*percent-encoded") as info:
        parse_endpoint(full)
    _no_secret(str(info.value))
    assert "Xy12" not in str(info.value)
    _no_secret(redact_url(full), redact_command(["aumann", "--base-url", full]))


@pytest.mark.parametrize("where", ["body", "status", "headers"])
@pytest.mark.parametrize("kind", ["stdlib", "httpx"])
def test_a_reply_trickling_in_a_byte_at_a_time_is_bounded_by_the_timeout_in_all(kind, where):
    """The timeout bounded each socket read, so a server (or a gateway sending keep-alive bytes) that trickles its
    reply held a decision for as long as it liked. Now the request as a whole ends at the timeout -- also while the
    status line and the headers trickle in (the deadline covered only the body: a server sending a header line
    every 0.1 s held a timeout=1 request for as long as its headers lasted, up to 100 lines of 64 KiB each)."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from aumann.simulators.llm.transport import HttpxTransport, StdlibTransport, TransportFailure

    class Trickle(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                if where == "status":
                    for ch in b"HTTP/1.1 200 OK" + b" " * 1000:
                        self.wfile.write(bytes([ch]))
                        self.wfile.flush()
                        time.sleep(0.1)
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.flush_headers()
                if where == "headers":
                    for i in range(99):
                        self.wfile.write(b"X-Wait-%d: ...\r\n" % i)
                        self.wfile.flush()
                        time.sleep(0.1)
                self.end_headers()
                for _ in range(1000):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        ep = parse_endpoint(f"http://127.0.0.1:{srv.server_address[1]}/v1")
        transport = StdlibTransport() if kind == "stdlib" else HttpxTransport()
        t0 = time.monotonic()
        with pytest.raises(TransportFailure, match=r"timed out|took longer"):
            transport.request("POST", ep, "/v1/chat/completions", b"{}", {}, 1.0, 1_000_000)
        assert time.monotonic() - t0 < 10.0  # the trickle alone lasts 100 s
        transport.close()
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_model_list_of_a_404_hint_is_redacted():
    """The "models this server lists" hint was appended after redaction: a proxy whose /models echoed the key put it
    whole into ModelNotFoundError."""
    from aumann.errors import ModelNotFoundError
    from aumann.simulators.llm.redaction import Redactor
    from aumann.simulators.llm.replies import interpret

    class Reply:
        status, body, headers = 404, b'{"error": {"message": "model not found"}}', {}

    with pytest.raises(ModelNotFoundError, match=r"models this server lists: \['\*\*\*'") as info:
        interpret(Reply(), where="h", model="m", redact=Redactor([SECRET]), retry_after_max=1, negotiable=False,
                  list_models=lambda: [SECRET])
    _no_secret(str(info.value))


def test_the_cli_redacts_every_message_it_prints_with_the_keys_backends_registered():
    """The last net: whatever path a message took (a scenario's own exception quoting a header, say), the CLI's one
    line goes through every key a backend of this process registered."""
    from aumann.cli import one_line
    from aumann.simulators.llm.redaction import protect_logs

    protect_logs([SECRET])
    line = one_line(f"ScenarioCodeError: step() raised ValueError: Invalid header value b'Bearer {SECRET}\\r'")
    _no_secret(line)
    assert "ScenarioCodeError" in line


@pytest.mark.parametrize("kind", ["stdlib", "httpx"])
def test_a_reply_cut_off_before_its_content_length_is_a_failed_request_not_a_malformed_answer(kind, tmp_path):
    """A server (or a proxy) that closed the connection half-way through a Content-Length body: http.client's read1
    ends quietly there, so the stdlib transport returned the half body as the whole reply -- counted as the model's
    malformed answer, retried once 'varied' with a repair message, and stored in the cache as a permanent
    abstention; and since 'the server answered', an outage of such cuts never became ServerDownError. Now it is a
    failed request (as httpx always said): retried with backoff, a BackendUnavailableError, stored as 'failed: ...'."""
    import socket
    import threading

    from aumann.simulators.llm.transport import HttpxTransport

    good = json.dumps({"choices": [{"message": {"role": "assistant", "content": '{"post": true}'}}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode()
    lsock = socket.create_server(("127.0.0.1", 0))
    served = []

    def serve():
        while True:
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                # read the whole request body too: closing with unread bytes makes the kernel reset the
                # connection (RST), and the client then saw 'Connection reset by peer', not the cut-off reply
                head, _, body = data.partition(b"\r\n\r\n")
                length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                while length and len(body) < int(length.group(1)):
                    body += conn.recv(65536)
                served.append(1)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                             % len(good) + good[:len(good) // 2])

    threading.Thread(target=serve, daemon=True).start()
    try:
        cache = ResponseCache(tmp_path / "c.sqlite")
        b = OpenAIBackend(model="m", base_url=f"http://127.0.0.1:{lsock.getsockname()[1]}/v1", max_retries=2,
                          sleep=lambda s: None, cache=cache, transport=HttpxTransport() if kind == "httpx" else None)
        [out] = b.decide_many([{"messages": MSGS, "schema": Post}], return_exceptions=True)
        assert isinstance(out, BackendUnavailableError) and not isinstance(out, MalformedResponseError)
        assert "cut off" in str(out) or "complete message body" in str(out)
        assert len(served) == 3 and b.usage.failures == 3  # max_retries with backoff, not one 'varied' retry
        b.close()
    finally:
        lsock.close()
    [row] = ResponseCache(tmp_path / "c.sqlite", mode="replay").rows()
    assert row["invalid"].startswith("failed: ") and row["reply"] == ""


@pytest.mark.parametrize("extra", [[], ["--cache-mode", "replay"], ["--dry-run"]], ids=["record", "replay", "dry_run"])
def test_a_cache_path_that_is_a_folder_is_told_as_a_folder(tmp_path, capsys, extra):
    """--cache DIR said 'cannot be opened ... move it away or delete it' (a user's folder!) after the run had begun,
    'does not exist' under --cache-mode replay and `aumann llm show`, and a dry run silently estimated as if there
    were no cache. Now every path names it a directory at once, before anything runs."""
    from aumann.cli import main

    folder = tmp_path / "runs"
    folder.mkdir()
    with pytest.raises(ResponseCacheError, match=r"is a directory: .*one SQLite file") as info:
        ResponseCache(folder)
    assert "delete" not in str(info.value)
    code = main(["run", "social-llm", "--out", str(tmp_path / "out"), "--backend", "openai", "--model", "m",
                 "--base-url", "http://127.0.0.1:9/v1", "--cache", str(folder), *extra])
    err = capsys.readouterr().err
    assert code == 2 and "is a directory" in err and "delete" not in err and "does not exist" not in err
    assert not (tmp_path / "out" / "runs").exists()  # nothing was computed
    assert main(["llm", "show", str(tmp_path), "--cache", str(folder)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_the_reprs_of_an_endpoint_and_of_backend_options_hold_no_key():
    """Both were plain dataclass reprs: repr(endpoint) showed api_key, the URL's secrets and its query, and
    repr(BackendOptions) -- what a registered backend factory is handed, and might log or put in an exception --
    the key and every base URL with its credentials."""
    from aumann.simulators.llm.options import BackendOptions

    url = f"http://bob:{SECRET}@127.0.0.1:9/v1/{SECRET}?token={SECRET}"
    ep = parse_endpoint(url)
    opts = BackendOptions(model="m", base_urls=(url,), api_key=SECRET)
    for text in (repr(ep), str(ep), repr(opts), str(opts), repr([ep]), repr({"o": opts})):
        _no_secret(text)
    assert "127.0.0.1:9" in repr(ep) and "api_key='***'" in repr(opts)


@pytest.mark.parametrize("url, says", [
    ("http://127.0.0.1:{p}/v 1", "whitespace at position"),
    ("http://127.0.0.1:{p}/v1\r\nX-Injected: 1", "whitespace at position"),
    ("http://127.0.0.1:{p}/v1\tx", "whitespace at position"),
    ("http://127.0.0.1:{p}/v1\x7f", "a control character at position"),
    ("http://127.0.0.1:0/v1", "port 0"),
    ("http://127.0.0.1:{p}/v1/chat/completions", "an endpoint, not the API root"),
    ("http://127.0.0.1:{p}/v1,http://127.0.0.1:{p}/v1", "more than one URL"),  # an AUMANN_LLM_BASE_URL list
])
def test_a_base_url_no_request_could_be_sent_to_is_a_config_error_at_once(url, says):
    """A space in the path was refused by http.client on every request -- retried as an unreachable server until
    the run stopped with 'Is the server up?'; a CR/LF or tab was silently dropped by urlsplit (the rest of the line
    glued onto the path); port 0 became port 80; .../v1/chat/completions got /chat/completions twice and a 404
    whose hint listed the models. Now each is a ConfigError naming the problem, before anything is sent."""
    with pytest.raises(ConfigError, match=says):
        OpenAIBackend(model="m", base_url=url.format(p=closed_port()), api_key=SECRET)


def test_a_non_ascii_path_is_sent_percent_encoded():
    """http.client sends the request target as ASCII: a base URL with a non-ASCII path segment failed every request
    with 'a header value is not valid HTTP (a control character in the API key?)'. Now the path and query are sent
    UTF-8 percent-encoded (as httpx does)."""
    seen = []
    with LoopbackLLM(lambda body: '{"post": true}') as srv:
        srv.reply = lambda body: seen.append(1) or '{"post": true}'
        b = OpenAIBackend(model="m", base_url=f"http://127.0.0.1:{srv.port}/v1?tenant=zürich", max_retries=0)
        assert b.decide(MSGS, Post).post is True and seen
    assert parse_endpoint("http://h/ü/v1").path("/chat/completions") == "/%C3%BC/v1/chat/completions"


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_names_where_it_goes_and_is_not_followed(status):
    """A redirect (an http:// base URL of an https:// server) was 'request rejected (HTTP 301) ...: ' and the body,
    naming neither the redirect nor where it went. It is not followed (the key would go along), and the message
    says where to, redacted."""
    from aumann.errors import LLMRequestError

    target = f"https://bob:{SECRET}@elsewhere.example/v1?token={SECRET}"
    handler = lambda r: httpx.Response(status, headers={"Location": target})  # noqa: E731
    script = []
    b = OpenAIBackend(model="m", transport=httpx.MockTransport(lambda r: script.append(r) or handler(r)),
                      base_url="http://api.example/v1", api_key=SECRET, max_retries=2, sleep=lambda s: None)
    with pytest.raises(LLMRequestError, match=rf"redirects \(HTTP {status}\) to 'https://\*\*\*@elsewhere") as info:
        b.decide(MSGS, Post)
    _no_secret(str(info.value))
    assert len(script) == 1 and all(r.url.host == "api.example" for r in script)


def test_a_2xx_other_than_200_is_read_like_a_200():
    """A 201 or 203 (a proxy's 'non-authoritative' copy) carrying a good completion was a fatal 'request rejected
    (HTTP 201)', stopping the run."""
    body = {"choices": [{"message": {"role": "assistant", "content": '{"post": true}'}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    for status in (201, 203):
        answer = httpx.MockTransport(lambda r, status=status: httpx.Response(status, json=body))
        b = OpenAIBackend(model="m", transport=answer, base_url="http://api.example/v1", max_retries=0)
        assert b.decide(MSGS, Post).post is True


def test_a_key_inside_the_ray_runtime_env_flag_never_reaches_the_manifest_or_the_reports(tmp_path, monkeypatch):
    """The manifest (and report.md/report.html, which show it) recorded the command line with only URL credentials
    taken out: --ray-runtime-env '{"env_vars": {"OPENAI_API_KEY": "sk-…"}}' -- the way docs/cluster.md says to give
    workers environment variables -- put the key whole into three files of the run directory."""
    import sys

    from aumann.cli import executor_options, main
    from aumann.manifest import redact_command

    env = json.dumps({"env_vars": {"OPENAI_API_KEY": SECRET, "HF_TOKEN": "hf_" + SECRET[3:], "X": "1"}})
    assert redact_command(["run", "--ray-runtime-env", env]).count("***") == 2
    assert SECRET[8:] not in redact_command(f"run HF_TOKEN={SECRET} --set llm.max_tokens=40")
    monkeypatch.setattr(executor_options, "executor_from", lambda *a, **k: None)  # no Ray cluster for this test
    cfg = tmp_path / "tiny.toml"
    cfg.write_text("agents = 4\nsteps = 3\nruns = 1\n[study]\npermutations = 4\nablations = false\n")
    out = tmp_path / "out"
    argv = ["run", "social-llm", "--config", str(cfg), "--out", str(out), "--executor", "ray",
            "--ray-runtime-env", env]
    monkeypatch.setattr(sys, "argv", ["aumann", *argv])
    assert main(argv) == 0
    assert "--ray-runtime-env" in json.loads((out / "manifest.json").read_text())["command"]
    for f in out.rglob("*"):
        if f.is_file():
            assert SECRET[8:].encode() not in f.read_bytes(), f


@pytest.mark.parametrize("kind", ["stdlib", "httpx"])
def test_a_reply_no_request_asked_for_is_never_read_as_the_next_decisions_answer(kind):
    """A server (or a proxy) that sends a second, unasked-for reply on a keep-alive connection: the stdlib transport
    reused the connection, and the next decision read that stale reply as its own answer -- and every decision
    after it the answer of the one before. An idle connection with something to read is no longer reused (httpx's
    pool already checked)."""
    import socket
    import threading

    from aumann.simulators.llm.transport import HttpxTransport

    def reply(content: str) -> bytes:
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode()
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body

    import contextlib

    lsock = socket.create_server(("127.0.0.1", 0))
    answered = []
    # the unasked-for reply is sent once the first decision is back, and the next request waits for it to be sent:
    # it arrives while the connection is idle however loaded the machine (two sleeps of 0.2 s and 0.5 s raced)
    first_done, stray_sent = threading.Event(), threading.Event()

    def serve_one(conn):
        with conn, contextlib.suppress(OSError):  # the client drops the connection it no longer trusts
            while True:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(body) < length:
                    body += conn.recv(65536)
                answered.append(1)
                conn.sendall(reply('{"post": true}'))
                if len(answered) == 1:
                    first_done.wait(60)
                    conn.sendall(reply('{"post": false}'))  # a reply nobody asked for
                    stray_sent.set()

    def serve():
        while True:
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        b = OpenAIBackend(model="m", base_url=f"http://127.0.0.1:{lsock.getsockname()[1]}/v1", concurrency=1,
                          max_retries=0, transport=HttpxTransport() if kind == "httpx" else None)
        got = []
        for seed in range(3):
            got.append(b.decide(MSGS, Post, seed=seed).post)
            if seed == 0:
                first_done.set()
                assert stray_sent.wait(60)  # the unasked-for reply is in while the connection is idle
        assert got == [True, True, True] and len(answered) == 3
        b.close()
    finally:
        lsock.close()


@pytest.mark.parametrize("kind", ["stdlib", "httpx"])
def test_a_connection_failure_names_the_endpoint_once(kind):
    from aumann.simulators.llm.transport import HttpxTransport

    url = f"http://127.0.0.1:{closed_port()}/v1"
    b = OpenAIBackend(model="m", base_url=url, max_retries=0, transport=HttpxTransport() if kind == "httpx" else None)
    with pytest.raises(BackendUnavailableError) as info:
        b.decide(MSGS, Post)
    assert str(info.value).count(url) == 2  # "model 'm' at URL failed ...; last error: cannot connect to URL: ..."


def _read_only(path) -> bool:
    """Make ``path`` read-only to SQLite (chmod; as root, the immutable flag where allowed); whether it worked."""
    import os
    import subprocess

    os.chmod(path, 0o444)
    if not os.access(path, os.W_OK):
        return True
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False).returncode == 0
    return done


def test_a_read_only_cache_in_record_mode_is_refused_before_any_request_and_never_called_corrupted(tmp_path):
    """A read-only cache (in record mode) opened fine; the batch's requests were sent and paid for; then the flush
    failed and their answers were lost, with 'It is not a usable aumann response cache -- move it away or delete it'
    about a good cache. Now opening it checks that it can be written, and says how to read it without writing."""
    import subprocess

    path = tmp_path / "c.sqlite"
    with ResponseCache(path) as c:
        c.put("k", '{"post": true}', backend="openai", model="m", request={})
    if not _read_only(path):
        pytest.skip("cannot make a file read-only here")
    try:
        with LoopbackLLM(lambda body: '{"post": true}') as srv:
            b = OpenAIBackend(model="m", base_url=srv.base_url, cache=ResponseCache(path), max_retries=0)
            with pytest.raises(ResponseCacheError, match=r"cannot be written.*--cache-mode replay") as info:
                b.decide_many([{"messages": MSGS, "schema": Post}], return_exceptions=True)
            assert srv.stats()["requests"] == 0
        assert "delete" not in str(info.value)
        assert ResponseCache(path, mode="replay").get("k").text == '{"post": true}'  # read without writing
    finally:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True, check=False)


def test_key_like_tokens_are_redacted_only_at_the_start_of_a_word_so_recorded_config_words_stay():
    # every string a manifest records now goes through the registered-keys redaction: its key-like pattern matched
    # inside words, so a persona 'risk-averse' or a topic 'monkey-business' was recorded as 'risk-***' / 'monkey-***'
    from aumann.simulators.llm.redaction import Redactor

    r = Redactor([SECRET])
    for word in ("risk-averse persona", "monkey-business", "whisk-batter", "turkey-sandwich"):
        assert r(word) == word
    assert r("Authorization: Bearer abcdXYZ123") == "Authorization: Bearer ***"
    assert r('{"k": "sk-abcd1234"}') == '{"k": "sk-***"}'
    assert r("key=sk-proj-abc123 and api_key-sk-1234x") == "key=sk-*** and api_key-***"


def test_what_a_manifest_records_loses_whole_keys_but_never_a_word_that_starts_like_one():
    # the registered-keys net removes pieces of a key from messages cut inside it; applied to every recorded string
    # it took an OpenAI project key's first characters ('sk-pro') out of ordinary words ('risk-profile')
    from aumann.manifest import redact
    from aumann.simulators.llm.redaction import protect_logs, redact_registered

    key = "sk-proj-Zq81xLmW3vT9pA2sD4fG6hJ8"
    protect_logs([key])
    assert redact_registered("risk-profile") != "risk-profile"  # messages: the net for cut keys stays
    got = redact({"persona": "risk-profile averse", "out": f"d/{key}/x", "prompt": f"use {key} now"})
    assert got == {"persona": "risk-profile averse", "out": "d/***/x", "prompt": "use *** now"}


def test_llm_show_on_a_file_that_is_no_cache_never_says_to_delete_it(tmp_path, capsys):
    """`aumann llm show RUN --cache RUN/manifest.json` (a wrong path) said 'move it away or delete it (a new cache is
    created in its place)': advice for a run that records into a damaged cache, wrong for a command that only reads
    (nothing is created) and harmful on a file of the run's own. The read-only message says the file was only read."""
    from aumann.cli import main

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"command": "aumann run social-llm"}))
    before = manifest.read_bytes()
    capsys.readouterr()
    assert main(["llm", "show", str(tmp_path), "--cache", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "ResponseCacheError" in err and "not a usable aumann response cache" in err
    assert "delete it" not in err and "created in its place" not in err and "only read" in err
    assert manifest.read_bytes() == before


HOLD_LOCK = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA locking_mode = EXCLUSIVE")
c.execute("BEGIN EXCLUSIVE")
c.execute("UPDATE responses SET model = model")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("mode", ["replay", "record"])
def test_a_cache_locked_by_another_process_is_told_as_locked_not_as_corrupted(tmp_path, monkeypatch, capsys, mode):
    """`aumann llm show --cache C` while another process held C locked waited 60 s and then said "response cache 'C'
    is corrupted or not a SQLite file: database is locked": a good cache in use read as a damaged one (to move away
    or delete). It is told as locked now, with the wait, and the file is left as it was."""
    import subprocess
    import sys

    from aumann.cli import main
    from aumann.simulators.llm import cache as cache_module

    path = tmp_path / "llm-cache.sqlite"
    with ResponseCache(path) as c:
        c.put("k", '{"post": true}', backend="openai", model="m", request={})
    monkeypatch.setattr(cache_module, "BUSY_SECONDS", 0.2)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ResponseCacheError) as info:
            ResponseCache(path, mode=mode).open()
        assert re.search(r"llm-cache\.sqlite' is locked by another process \(waited 0\.2 s\): database is locked\. "
                         r"Another process holds it locked", str(info.value)), str(info.value)
        assert "corrupted" not in str(info.value) and "delete" not in str(info.value)
        if mode == "replay":
            assert main(["llm", "show", str(tmp_path)]) == 2
            err = capsys.readouterr().err
            assert "is locked by another process" in err and "corrupted" not in err
    finally:
        holder.communicate("")
    assert ResponseCache(path, mode="replay").get("k").text == '{"post": true}'


@pytest.mark.parametrize("mode", ["replay", "record"])
def test_waiting_for_a_cache_locked_by_another_process_is_said_when_the_wait_starts(tmp_path, monkeypatch, capsys,
                                                                                      mode):
    """`aumann llm show` (replay) and `aumann run --cache` (record) on a cache another process holds locked waited up
    to 60 s without a word. One line on stderr now says, as the wait starts, what is waited on, for how long at most
    and how to avoid it; the wait itself is unchanged (the holder lets go and the cache is read)."""
    import subprocess
    import sys
    import threading

    from aumann.cli import main
    from aumann.simulators.llm import cache as cache_module

    path = tmp_path / "llm-cache.sqlite"
    with ResponseCache(path) as c:
        c.put("k", '{"post": true}', backend="openai", model="m", request={})
    monkeypatch.setattr(cache_module, "WAIT_NOTICE_SECONDS", 0.1)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        threading.Timer(1.5, holder.communicate, args=("",)).start()  # the holder lets go while we wait
        capsys.readouterr()
        if mode == "replay":
            assert main(["llm", "show", str(tmp_path)]) == 0
        else:
            ResponseCache(path, mode="record").open().close()
        err = capsys.readouterr().err
    finally:
        if holder.poll() is None:
            holder.communicate("")
    # the notice of the wait to open it, once (on 2 loaded cores a later step -- listing its rows -- may pass the
    # 0.1 s notice too, and say so: a line of its own, saying what for, not counted here)
    waits = [line for line in err.splitlines() if line.startswith("waiting for the LLM response cache")
             and "another process holds it locked (waiting at most 60 s" in line]
    assert len(waits) == 1, err
    assert str(path) in waits[0] and "another process holds it locked" in waits[0], waits
    assert "at most 60 s" in waits[0] and "--cache PATH" in waits[0], waits
    if mode == "replay":
        assert "1 request(s) shown" in err


#: another process holding a cache: the write lock (a second run flushing into it), or an open read transaction
HOLD_WRITE = HOLD_LOCK.replace('c.execute("PRAGMA locking_mode = EXCLUSIVE")\n', "").replace("BEGIN EXCLUSIVE",
                                                                                            "BEGIN IMMEDIATE")
HOLD_READ = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN")
c.execute("SELECT count(*) FROM responses").fetchall()
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("what", ["flush", "read", "close"])
def test_waiting_for_another_process_after_the_cache_is_open_is_said_too(tmp_path, monkeypatch, capsys, what):
    """Opening a cache another process holds locked says so on stderr; the waits after it did not. A flush while
    another run writes the same cache (its write lock), a read while a writer holds it in exclusive locking mode, and
    close()'s merge of the log while another process reads it each waited up to 60 s without a word (measured: 3.2 s
    of silence for a 3 s hold). One line now, saying what the wait is for; the wait and its outcome are unchanged."""
    import sqlite3
    import subprocess
    import sys
    import threading

    from aumann.simulators.llm import cache as cache_module

    path = tmp_path / "llm-cache.sqlite"
    with ResponseCache(path) as c:
        c.put("k", '{"post": true}', backend="openai", model="m", request={})
    monkeypatch.setattr(cache_module, "WAIT_NOTICE_SECONDS", 0.1)
    if what == "read":  # a cache file in rollback-journal mode (WAL readers never wait for a writer), replayed
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("PRAGMA journal_mode = DELETE")
        con.close()
    cache = ResponseCache(path, mode="replay" if what == "read" else "record").open()
    hold = {"flush": HOLD_WRITE, "read": HOLD_LOCK, "close": HOLD_READ}[what]
    holder = subprocess.Popen([sys.executable, "-c", hold, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        if what == "close":  # a reply committed while the other process reads: the log cannot be merged at once
            cache.put("k2", '{"post": false}', backend="openai", model="m", request={})
            cache.flush()
        threading.Timer(1.0, holder.communicate, args=("",)).start()  # the holder lets go while we wait
        capsys.readouterr()
        if what == "flush":
            cache.put("k2", '{"post": false}', backend="openai", model="m", request={})
            assert cache.flush() == 1
        elif what == "read":
            assert cache.get("k").text == '{"post": true}'
        cache.close()
        err = capsys.readouterr().err
    finally:
        if holder.poll() is None:
            holder.communicate("")
    doing = {"flush": "(to store 1 reply; waiting at most 60 s, then this stops with an error)",
             "read": "(to read stored replies; waiting at most 60 s, then this stops with an error)",
             "close": "(to merge its log into the file; waiting at most 60 s, then the merge is left to a later run)"}
    # the notice of the wait on the held lock, once (on 2 loaded cores another step may pass the 0.1 s notice too,
    # and say so: a line of its own, not counted here)
    waits = [line for line in err.splitlines() if line.startswith("waiting for the LLM response cache")
             and doing[what] in line]
    assert len(waits) == 1, err
    assert str(path) in waits[0] and "another process holds it locked " + doing[what] in waits[0], waits
    assert "--cache PATH" in waits[0]
    assert ResponseCache(path, mode="replay").get("k2" if what != "read" else "k") is not None


def test_a_cache_opened_without_waiting_says_nothing(tmp_path, monkeypatch, capsys):
    """A cache nobody else holds is opened, written, replayed and closed without a "waiting" line. The notice's
    moment is the test's to say, not a clock's: each notice's timer (aumann.progress.notice_if_slow) runs out only
    when every block it watches has ended, so a block that ends -- however long a loaded machine takes for it --
    says nothing, and one whose notice is never called off (a block left open, a notice printed at once) does,
    deterministically. (It slept 0.2 s past a 50 ms notice: a cache opened in more than 50 ms on 2 loaded cores
    printed the notice and failed the test.)"""
    import threading
    from types import SimpleNamespace

    from aumann import progress

    moment = threading.Condition()
    passed = [False]
    started: list[threading.Thread] = []

    class Done:
        """notice_if_slow's ``done`` event: its ``wait(after)`` times out when the test says the moment passed."""

        def __init__(self) -> None:
            self.flag = False

        def set(self) -> None:
            with moment:
                self.flag = True
                moment.notify_all()

        def wait(self, timeout: float | None = None) -> bool:
            with moment:
                moment.wait_for(lambda: self.flag or passed[0])
                return self.flag

    def thread(*args, **kwargs) -> threading.Thread:
        t = threading.Thread(*args, **kwargs)
        started.append(t)
        return t

    monkeypatch.setattr(progress, "threading", SimpleNamespace(Event=Done, Thread=thread))
    path = tmp_path / "llm-cache.sqlite"
    with ResponseCache(path) as c:
        c.put("k", '{"post": true}', backend="openai", model="m", request={})
    ResponseCache(path, mode="replay").open().close()
    with moment:  # every block has ended: now each notice's moment has come
        passed[0] = True
        moment.notify_all()
    for t in started:
        t.join(timeout=60)
    assert started and not any(t.is_alive() for t in started)  # the notices were there, and each has had its say
    assert "waiting" not in capsys.readouterr().err


def _read_only_folder(folder) -> bool:
    """Make ``folder`` read-only (chmod; as root, the immutable flag where allowed); whether it worked."""
    import os
    import subprocess

    os.chmod(folder, 0o555)
    if not os.access(folder, os.W_OK):
        return True
    return subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False).returncode == 0


def _writable_again(folder) -> None:
    import os
    import subprocess

    subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
    os.chmod(folder, 0o755)


def test_a_cache_in_a_read_only_folder_is_shown_not_called_corrupted(tmp_path, capsys):
    """A good cache in a folder that cannot be written (a run directory on a read-only mount): SQLite could not make
    the -shm file a WAL-mode database needs, and `aumann llm show RUN` said "is corrupted or not a SQLite file:
    unable to open database file ... It is not a usable aumann response cache". It is read now (as immutable: a
    cache closed cleanly has no -wal file); in record mode it is told as a folder to make writable, never as
    damaged; with a -wal file still holding replies it is refused, saying where they are."""
    import os

    from aumann.cli import main

    run = tmp_path / "run"
    run.mkdir()
    with ResponseCache(run / "llm-cache.sqlite") as c:
        c.put("k", '{"post": true}', backend="openai", model="m", request={"messages": []})
    assert sorted(os.listdir(run)) == ["llm-cache.sqlite"]
    if not _read_only_folder(run):
        pytest.skip("cannot make a folder read-only here")
    try:
        assert ResponseCache(run / "llm-cache.sqlite", mode="replay").get("k").text == '{"post": true}'
        assert main(["llm", "show", str(run)]) == 0
        out = capsys.readouterr()
        assert '→ reply: {"post": true}' in out.out and "1 request(s) shown" in out.err
        with pytest.raises(ResponseCacheError, match=r"cannot be opened: unable to open database file\. Check that "
                                                     r"the file and its folder are writable") as info:
            ResponseCache(run / "llm-cache.sqlite").open()
        assert "corrupted" not in str(info.value) and "delete" not in str(info.value)
    finally:
        _writable_again(run)
    assert sorted(os.listdir(run)) == ["llm-cache.sqlite"]  # nothing was written beside it

    (run / "llm-cache.sqlite-wal").write_bytes(b"\x00" * 32)  # replies a writer left in its -wal file
    if not _read_only_folder(run):
        pytest.skip("cannot make a folder read-only here")
    try:
        with pytest.raises(ResponseCacheError, match=r"cannot be read in its folder.*last replies are still in "
                                                     r"llm-cache\.sqlite-wal: copy both files to a writable folder"):
            ResponseCache(run / "llm-cache.sqlite", mode="replay").open()
    finally:
        _writable_again(run)


def test_replay_of_a_cache_that_is_not_there_says_so_and_creates_nothing(tmp_path):
    """ResponseCache("typo/c.sqlite", mode="replay") made the folders and an empty file, replayed them as an empty
    cache (every decision a "replay cache miss", as if the requests had not been recorded), and left the empty file
    behind to be found next time. A replay of no file is a ResponseCacheError naming the path; nothing is made."""
    missing = tmp_path / "typo" / "sub" / "c.sqlite"
    with pytest.raises(ResponseCacheError, match=r"no response cache at '.*typo/sub/c\.sqlite': replay reads a cache "
                                                 r"recorded before"):
        ResponseCache(missing, mode="replay")
    assert not (tmp_path / "typo").exists()
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")  # a file that is there but empty still replays as an empty cache, left as it is
    assert len(ResponseCache(empty, mode="replay")) == 0 and empty.read_bytes() == b""
    assert len(ResponseCache(":memory:", mode="replay")) == 0
