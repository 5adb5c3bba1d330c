"""Fuzz the bounded JSON/TOML reader and everything that reads outside JSON/TOML through it: config files, --set
values, record files (io.read_json + aumann.records)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import strategies as st

from aumann import bounded, configs, io, records, scenarios
from aumann.errors import ConfigError, StudyError
from tests.fuzz.harness import fuzz_target, scratch_dir, typed_or_result

SOCIAL, MIDSCALE = scenarios.get("social-llm"), scenarios.get("midscale-social")  # imported outside the guard
SOCIAL.load_config()

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=30)


def _text_variants(draw_text: bytes, depth: int, opener: bytes, cut: int) -> bytes:
    deep = opener * depth + draw_text + (b"]" if opener == b"[" else b"}") * (depth // 2)
    return deep[: cut or None]


json_text = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=300),
    st.builds(_text_variants, st.binary(max_size=20), st.integers(0, 3000), st.sampled_from([b"[", b"{\"a\":"]),
              st.integers(0, 4000)),
    st.sampled_from([b"1e400", b"-1e400", b"NaN", b"Infinity", b'"\\ud800"', b"\xef\xbb\xbf{}", b"{\"a\":1,\"a\":2}",
                     b"[" * 100000, b'"' + b"\\" * 1001, b"0" * 5000]),
)


@fuzz_target(text=json_text)
def test_fuzz_bounded_json(text):
    value, err = typed_or_result(bounded.loads_json, text, what="fuzz input")
    if err is None:
        assert bounded.nesting_depth(text) <= bounded.MAX_DEPTH
    value, err = typed_or_result(bounded.loads_json, text, what="fuzz input", allow_nan=False)
    if err is None:
        assert "NaN" not in json.dumps(value) or isinstance(value, str | dict | list)


toml_text = st.one_of(
    st.text(max_size=200),
    st.builds(lambda k, v: f"{k} = {v}\n", st.text(max_size=10), st.text(max_size=30)),
    st.builds(lambda n, c: ("a = " + "[" * n + "1" + "]" * n)[: c or None], st.integers(0, 5000), st.integers(0, 6000)),
    st.builds(lambda n: "".join(f"[{'t.' * i}x]\n" for i in range(1, n)), st.integers(0, 100)),
    st.sampled_from(["agents = 1e400", "agents = inf", "agents = nan", "seed = 99999999999999999999999",
                     "[study]\nrandom_orderings = 1000000000000000", "study = 3", "agents = true",
                     "\ufeffagents = 5", "agents = '5'", "[[study]]\nx=1", "steps = -1", "step_timeout = 1e-9"]),
)


@fuzz_target(text=toml_text)
def test_fuzz_toml_config_files(text):
    with scratch_dir() as d:
        path = Path(d) / "c.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass") if isinstance(text, str) else None
        data, err = typed_or_result(configs.load_toml, path)
        if err is None:
            assert isinstance(data, dict)
        cfg, err = typed_or_result(SOCIAL.load_config, path)
        if err is None:
            assert isinstance(err, type(None)) and cfg.agents <= 10_000_000
            assert all(math.isfinite(v) for v in _numbers(cfg.model_dump()))


def _numbers(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _numbers(v)
    elif isinstance(obj, float):
        yield obj


assignment = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(
    ["agents", "steps", "runs", "seed", "step_timeout", "study.permutations", "study.random_orderings", "study.k_del",
     "study.top_k", "study.path_orders", "study.judge_candidates", "study.action_tol", "study.quadrature_steps",
     "study", "ba_m", "alpha", "nope", "study.nope", "a.b.c", ""]),
    st.one_of(st.integers(-(2**70), 2**70).map(str), st.floats().map(repr), st.text(max_size=12),
              st.sampled_from(["inf", "nan", "1e400", "[1,2]", "{a=1}", "true", "'x'", "[" * 200, "1e15"])))


@fuzz_target(sets=st.lists(assignment, min_size=1, max_size=3))
def test_fuzz_set_assignments(sets):
    cfg, err = typed_or_result(MIDSCALE.load_config, assignments=sets)
    if err is None:
        assert isinstance(err, type(None)) and cfg.study.random_orderings <= 10_000 and cfg.agents <= 10_000_000
    else:
        assert isinstance(err, ConfigError)


record_like = st.fixed_dictionaries(
    {"run": scalars, "digest": st.one_of(st.text(max_size=20), st.just("0123456789abcdef")),
     "t_star": scalars, "f_t_star": scalars, "methods": json_values, "ceiling": json_values,
     "smoothing_gap": json_values, "arrays_sha256": st.one_of(st.just("a" * 64), st.text(max_size=70)),
     "checksum": st.just("b" * 64)},
    optional={"files_sha256": json_values, "k_del": scalars, "seconds": json_values})


@fuzz_target(rec=record_like, kind=st.sampled_from([records.RunRecord, records.RunTiming, records.Manifest,
                                                    records.CountsMeta, records.OutsideRecord]))
def test_fuzz_record_schemas(rec, kind):
    with scratch_dir() as d:
        path = Path(d) / "r.json"
        try:
            path.write_text(json.dumps(rec))
        except ValueError:
            return
        data, err = typed_or_result(io.read_json, path, error=StudyError, within=d, object_only=True)
        if err is None:
            out, err = typed_or_result(records.check, kind, data, error=StudyError, what="record")
            if err is None and kind is records.RunRecord:
                assert isinstance(out["t_star"], int) and out["t_star"] >= 0
                assert out["f_t_star"] is None or math.isfinite(out["f_t_star"])
