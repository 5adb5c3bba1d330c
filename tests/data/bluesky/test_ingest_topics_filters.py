"""Topic matching (SQL and Python forms agree) and the user filters (bot handles without false positives)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest

from aumann.data.bluesky.filters import FilterConfig, apply_filters, load_filters
from aumann.data.bluesky.topics import Topic, keyword_regex, load_topics
from aumann.errors import ConfigError

TEXTS = [
    "Tariffs are up", "TARIFFS!", "tariffed goods", "new tariff: 25%", "the trade   war is on", "tradewar",
    "#tariffs", "pre-tariff prices", "Earth Day 2026", "earthday", "climate-change", "climates", "the Masters",
    "The Mastersons", "Masters tournament", "WrestleMania 42", "wwe", "awwe", "wwe's", "Claude Mythos", "mythology",
    "Ünïcode: climate 🌍", "", "golf at Augusta National", "liberation day", "liberation-day",
]


def test_default_topics_are_the_five_study_topics():
    names = [t.name for t in load_topics()]
    assert names == ["earth-day-climate", "mythos", "the-masters", "trump-tariffs", "wrestlemania"]
    for t in load_topics():
        assert t.keywords and t.hashtags


@pytest.mark.parametrize("topic", load_topics(), ids=lambda t: t.name)
def test_sql_and_python_keyword_rules_agree(topic: Topic):
    rx = keyword_regex(topic)
    con = duckdb.connect()
    sql_hits = [bool(con.execute("SELECT regexp_matches(?, ?)", [t, rx]).fetchone()[0]) for t in TEXTS]
    py_hits = [topic.matches(t) for t in TEXTS]
    assert sql_hits == py_hits


#: texts the keyword rules may meet, hostile ones included: Unicode case folding (RE2's ``(?i)`` folds 'ſ' to 's'),
#: whitespace runs of every kind ``\s`` matches, keywords glued to letters, digits, '_' or combining marks
FOLD_TEXTS = [*TEXTS, "the Maſters", "TARIFFſ", "wweſ", "earth\t\n\r\fday", "earth\u00a0day", "_climate_", "climate_",
              "2tariffs", "tariffs2", "ΤARIFFS", "Ⓦwe", "x\u0345wwe", "wwe\u0345", "\u0130climate", "mythosphere",
              "glasswings", "mastersthe masters"]


@pytest.mark.parametrize("topic", load_topics(), ids=lambda t: t.name)
def test_the_keyword_prefilter_is_a_necessary_condition_of_the_rule(topic: Topic):
    """The ingester keeps a post as a topic candidate by the keywords without their word boundaries
    (``whole_words=False``) and applies the exact rule to the candidates only: every text the rule matches must pass."""
    con = duckdb.connect()
    rule, pre = keyword_regex(topic), keyword_regex(topic, whole_words=False)
    hits = [(t, bool(con.execute("SELECT regexp_matches(?, ?)", [t, rule]).fetchone()[0]),
             bool(con.execute("SELECT regexp_matches(?, ?)", [t, pre]).fetchone()[0])) for t in FOLD_TEXTS]
    assert [t for t, r, p in hits if r and not p] == []
    assert any(r for _, r, _ in hits) and any(p and not r for _, r, p in hits)  # the texts test both sides


def test_keyword_rule_is_whole_word_and_case_insensitive():
    tariffs = next(t for t in load_topics() if t.name == "trump-tariffs")
    assert tariffs.matches("TARIFFS!") and tariffs.matches("new tariff: 25%") and tariffs.matches("the trade   war")
    assert not tariffs.matches("tariffed goods") and not tariffs.matches("tradewar")
    assert tariffs.matches("x", ["#TradeWar"]) and not tariffs.matches("x", ["trade"])
    masters = next(t for t in load_topics() if t.name == "the-masters")
    assert masters.matches("watching The Masters") and not masters.matches("The Mastersons")


def test_topic_config_errors(tmp_path: Path):
    (tmp_path / "bad.toml").write_text('name = "Bad Name"\nkeywords = ["x"]\n')
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        load_topics(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="holds no"):
        load_topics(empty)
    (empty / "t.toml").write_text("keywords = []\nhashtags = []\n")
    with pytest.raises(ConfigError, match="neither keywords nor hashtags"):
        load_topics(empty)
    with pytest.raises(ConfigError, match="does not exist"):
        load_topics(tmp_path / "nope")


BOTS = ["newsbot.bsky.social", "bot-alerts.bsky.social", "my-bot.bsky.social", "weatherbot2.bsky.social",
        "bots.example.com", "bot.bsky.social", "feed_bot.example.org", "NewsBot.bsky.social"]
NOT_BOTS = ["nonlinearbotanist.bsky.social", "abbott.bsky.social", "robotics-lab.bsky.social", "robot.bsky.social",
            "talbot.bsky.social", "abbot.bsky.social", "sabotage.bsky.social", "botanist.bsky.social",
            "cabot-cove.com", "turbot.fish", "bottle.bsky.social", "alice.bsky.social"]


@pytest.mark.parametrize("handle", BOTS)
def test_bot_handles_are_caught(handle: str):
    assert load_filters().is_bot_handle(handle)


@pytest.mark.parametrize("handle", NOT_BOTS)
def test_ordinary_words_containing_bot_pass(handle: str):
    assert not load_filters().is_bot_handle(handle)


def test_default_config_file_equals_builtin_defaults():
    assert load_filters() == FilterConfig()


def test_apply_filters_counts_each_user_once_in_order():
    users = pd.DataFrame({
        "created_at": pd.to_datetime(["2026-04-09", "2020-01-01", None, "2026-04-09", None], utc=True),
        "handle": ["newsbot.bsky.social", "newsbot.bsky.social", "abbott.bsky.social", None, None],
        "engaged": [False, True, True, True, False],
    })
    keep, dropped, notes = apply_filters(users, pd.Timestamp("2026-04-10", tz="UTC"), FilterConfig())
    assert keep.tolist() == [False, False, True, False, False]
    assert dropped == {"account_age": 2, "bot_handle": 1, "no_engagement": 1}
    assert notes == {"age_unknown": 2, "handle_unknown": 2}


@pytest.mark.parametrize(("patterns", "handle", "bot"), [
    (["(?i)newsbot"], "NewsBot.example", True),  # a global flag: valid alone, an re.error traceback once joined
    (["spam", "(?i)newsbot"], "newsbot.example", True), (["spam", "(?i)newsbot"], "abbott.example", False),
    (["(x)", r"(b)\1"], "bb.example", True),  # joined, \1 meant the first pattern's group and never matched
    (["(?P<t>x)x", "(?P<t>b)b"], "bb.example", True),  # joined, the group names collided (re.error)
])
def test_bot_patterns_are_searched_as_written(patterns, handle, bot):
    """The patterns were joined into one regex: a global flag or a repeated group name (each valid alone, so the
    config loaded) ended the build in an re.error traceback, and a backreference silently pointed at another
    pattern's group. Each now means what it says, in is_bot_handle and in apply_filters."""
    cfg = FilterConfig(bot_handle_patterns=patterns)
    assert cfg.is_bot_handle(handle) is bot
    users = pd.DataFrame({"created_at": pd.to_datetime([None], utc=True), "handle": [handle], "engaged": [True]})
    _, dropped, _ = apply_filters(users, pd.Timestamp("2026-04-10", tz="UTC"), cfg)
    assert dropped["bot_handle"] == int(bot)


def test_a_huge_minimum_account_age_is_a_config_error_not_an_overflow(tmp_path: Path):
    """min_account_age_days = 1e9 loaded and then ended build-panel in pandas' OutOfBoundsTimedelta traceback."""
    f = tmp_path / "f.toml"
    f.write_text("[filters]\nmin_account_age_days = 1e9\n")
    with pytest.raises(ConfigError, match=r"min_account_age_days: Input should be less than or equal to 1000000"):
        load_filters(f)
    users = pd.DataFrame({"created_at": pd.to_datetime(["2020-01-01"], utc=True), "handle": [None], "engaged": [True]})
    keep, _, _ = apply_filters(users, pd.Timestamp("1970-01-01", tz="UTC"), FilterConfig(min_account_age_days=1e6))
    assert keep.tolist() == [False]  # the largest allowed age still computes (created after the cut-off)


def test_an_account_age_past_292_years_filters_by_the_calendar():
    """pandas 2.x holds a Timedelta in nanoseconds (about 292 years): min_account_age_days = 200,000, which the config
    allows, ended apply_filters in a bare OverflowError there. Beyond it the cut-off is compared in seconds: every
    account created since is too young, an unknown age passes and is counted."""
    users = pd.DataFrame({"created_at": pd.to_datetime(["2020-01-01T00:00:00", None, "1700-01-01T00:00:00.5"],
                                                                  utc=True, format="ISO8601"),
                          "handle": ["a", "b", "c"], "engaged": [True, True, True]})
    start = pd.Timestamp("2024-01-01", tz="UTC")
    for days in (100_000, 200_000, 1_000_000):  # the cut-offs 1750, 1476 and 709 BC
        keep, dropped, notes = apply_filters(users, start, FilterConfig(min_account_age_days=days))
        assert keep.tolist() == [False, True, days == 100_000], days
        assert notes["age_unknown"] == 1 and dropped["account_age"] == 1 + (days != 100_000)


def test_filter_config_errors(tmp_path: Path):
    with pytest.raises(Exception, match="bad bot handle regex"):
        FilterConfig(bot_handle_patterns=["(unclosed"])
    bad = tmp_path / "f.toml"
    bad.write_text("[filters]\nmin_account_age_days = -1\n")
    with pytest.raises(ConfigError, match="invalid"):
        load_filters(bad)


_ASCII_TOPICS = [Topic(name="letters", keywords=["s", "k", "a b", "x_y", "r2d2"], hashtags=["x"]),
                 Topic(name="tags-only", hashtags=["y"])]


@pytest.mark.parametrize("topics", [load_topics(), _ASCII_TOPICS], ids=["default", "ascii"])
def test_the_marked_text_finds_the_same_topics_as_the_unicode_rule(topics):
    """With ASCII keywords the ingester matches them between ASCII boundaries in a copy of the text whose other
    non-word characters are U+0001 (one Unicode class to compile instead of two per topic). Checked against the rule
    itself (:func:`keyword_regex`) on random texts built from keyword pieces and hostile characters: 'ſ' and the
    Kelvin sign (letters ``(?i)`` folds to 's' / 'k'), U+0345 (a combining mark ``(?i)`` folds to a letter), other
    combining marks, non-ASCII letters and digits, every whitespace RE2's ``\\s`` knows and some it does not, U+0001
    itself, punctuation and emoji."""
    import random

    from aumann.data.bluesky.ingest import _topics_expr

    words, names = _topics_expr(topics)
    assert words != "text"  # the marked form is the one under test
    pieces = ["tariff", "tariffs", "trade", "war", "earth", "day", "wwe", "masters", "the", "mythos", "s", "k", "a",
              "b", "x", "y", "_", "r2d2", "2", "ſ", "\u212a", "K", "S", "é", "ß", "\u0345", "\u0301", "٣", "Ⅻ",
              " ", "  ", "\t", "\n", "\r", "\f", "\v", "\u00a0", "\u2003", "\x01", "\x00", "-", ".", "#", "'", "🌍"]
    rng = random.Random(0)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 8))) for _ in range(4000)]
    rules = [(t.name, keyword_regex(t)) for t in topics if t.keywords]
    reference = "[" + ", ".join(f"CASE WHEN regexp_matches(text, '{rx}') THEN '{name}' END" for name, rx in rules) + "]"
    names_kw = names.replace("list_has_any(ntags", "false AND list_has_any(ntags")  # hashtags: same code either way
    got = duckdb.connect().execute(
        f"SELECT text, list_filter({reference}, lambda x: x IS NOT NULL), "
        f"list_filter({names_kw}, lambda x: x IS NOT NULL) "
        f"FROM (SELECT text, {words} AS words, []::VARCHAR[] AS ntags FROM unnest(?::VARCHAR[]) u(text))",
        [texts]).fetchall()
    assert [(t, a, b) for t, a, b in got if a != b] == []
    assert sum(bool(a) for _, a, _ in got) > 200 and sum(not a for _, a, _ in got) > 200  # both outcomes occur


def test_keywords_beyond_ascii_keep_the_unicode_rule():
    from aumann.data.bluesky.ingest import _topics_expr

    words, names = _topics_expr([Topic(name="cafe", keywords=["café"]), Topic(name="c", keywords=["c++"])])
    assert words == "text" and r"[^\pL\pN_]" in names
