"""MegaScale-Social model: Mesa idioms, determinism, forks, counter-based draws, archetype batching."""

from __future__ import annotations

import copy
import dataclasses
import re

import mesa
import networkx as nx
import numpy as np
import pytest

from aumann import scenarios
from aumann.errors import ConfigError, SimulationError
from aumann.scenarios.megascale_social import counter
from aumann.scenarios.megascale_social.archetypes import ArchetypeSpec
from aumann.scenarios.megascale_social.features import FEATURES, baseline_features
from aumann.scenarios.megascale_social.model import MegaScaleSocial, World
from aumann.scenarios.megascale_social.policy import offline_backend
from aumann.simulators import fork, simulate
from aumann.simulators.llm import OfflineBackend

SC = scenarios.get("megascale-social")


def _cfg(n: int = 600, steps: int = 6, **kw):
    return SC.load_config(agents=n, steps=steps, **kw)


class CountingBackend:
    """Wraps the offline policy; records every batch the decider submits."""

    def __init__(self) -> None:
        self.inner = offline_backend()
        self.usage = self.inner.usage
        self.batches: list[list[dict]] = []

    def decide_many(self, requests):
        self.batches.append(list(requests))
        return self.inner.decide_many(requests)

    def __deepcopy__(self, memo):
        return self


def test_is_a_mesa_model_with_arrays_and_no_agent_objects():
    m = MegaScaleSocial(_cfg(), rng=0)
    assert isinstance(m, mesa.Model) and len(m.agents) == 0
    for _ in range(3):
        m.step()
    assert m.steps == 3
    view = m.agent(5)
    assert view.unique_id == 5 and view.persona in {p.name for p in m.world.fixture.personas}
    assert view.belief == pytest.approx(float(m.pop.belief[5])) and view.followers >= 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.belief = 0.0  # read-only
    with pytest.raises(SimulationError):
        m.agent(m.n)
    df = m.datacollector.get_model_vars_dataframe()
    assert len(df) == 3 and {"endorse_share", "archetypes", "post_rate"} <= set(df.columns)


def test_same_seed_same_bytes_other_seed_differs():
    a = SC.simulate(_cfg(), rng=7).panel.values
    b = SC.simulate(_cfg(), rng=7).panel.values
    c = SC.simulate(_cfg(), rng=8).panel.values
    assert a.dtype == np.float32 and a.shape == (6, 600, len(FEATURES))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_forks_share_the_world_and_replay_the_factual_step():
    m = MegaScaleSocial(_cfg(), rng=1)
    for _ in range(3):
        m.step()
    twin = copy.deepcopy(m)
    assert twin.world is m.world and twin.decider is m.decider and twin.pop is not m.pop
    assert twin.pop.belief is not m.pop.belief
    m.step()
    twin.step()
    for k, v in m.features().items():
        assert np.array_equal(v, twin.features()[k]), k
    assert twin._is_fork and not m._is_fork
    led = m.decider.ledger
    assert led.fork > 0 and sum(led.factual.values()) == led.decisions


def test_counter_uniforms_do_not_depend_on_order_or_subset():
    full = counter.uniforms(11, 4, 2, 10_000)
    idx = np.random.default_rng(0).permutation(10_000)[:777]
    assert np.array_equal(counter.uniforms(11, 4, 2, idx), full[idx])
    assert not np.array_equal(counter.uniforms(11, 5, 2, 100), full[:100])
    hi, lo = counter.uniform_pair(11, 4, 2, 50_000)
    for u in (full, hi, lo):
        assert u.min() >= 0 and u.max() < 1
    from scipy import stats

    assert stats.kstest(hi, "uniform").pvalue > 1e-3 and stats.kstest(lo, "uniform").pvalue > 1e-3
    assert abs(np.corrcoef(hi, lo)[0, 1]) < 0.01


def test_keys_round_trip_and_stay_within_the_grid():
    spec = ArchetypeSpec(16)
    assert spec.n_keys == 960
    rng = np.random.default_rng(0)
    n = 5000
    persona = rng.integers(16, size=n).astype(np.int16)
    b = rng.uniform(-1, 1, n).astype(np.float32)
    cnt = rng.integers(0, 30, n).astype(np.int32)
    lean = rng.uniform(-1, 1, n).astype(np.float32)
    keys = spec.encode(persona, b, cnt, lean)
    p, s, v, lb = spec.decode(keys)
    assert np.array_equal(p, persona)
    assert np.array_equal(s, np.searchsorted(spec.stance_edges, b, side="right"))
    assert np.array_equal(v, np.searchsorted(spec.volume_edges, cnt, side="right"))
    assert np.all(lb[v == 0] == 1)  # nothing seen: the middle lean bucket
    with pytest.raises(ConfigError):
        ArchetypeSpec(4, stance_edges=(0.5, -0.5))


def test_one_batch_per_step_one_request_per_occupied_key():
    backend = CountingBackend()
    m = MegaScaleSocial(_cfg(2000, 8), rng=2, backend=backend)
    seen_requests = set()
    for t in range(8):
        keys = m.keys()
        occupied = np.unique(keys).size
        before = len(backend.batches)
        m.step()
        assert m.decider.ledger.factual[t] == occupied <= 960  # decisions this step: one per occupied key
        new = backend.batches[before:]
        assert len(new) <= 1  # at most one backend batch per step (repeats come from the memo)
        for req in (new[0] if new else []):
            text = req["messages"][1]["content"]
            assert "step" not in text.lower() and not re.search(r"\bday \d", text.lower())  # cache reuse
            seen_requests.add(text + req["messages"][0]["content"])
    assert len(seen_requests) == sum(len(b) for b in backend.batches)  # nothing is asked twice


def test_answers_do_not_depend_on_the_memo():
    a = MegaScaleSocial(_cfg(), rng=4)
    b = MegaScaleSocial(_cfg(), rng=4)
    for _ in range(5):
        a.step()
        b.decider._memo.clear()  # every request goes to the backend again
        b.step()
    for k, v in a.features().items():
        assert np.array_equal(v, b.features()[k]), k


def test_forced_agents_take_the_baseline_action():
    cfg = _cfg()
    m = MegaScaleSocial(cfg, rng=5)
    for _ in range(3):
        m.step()
    z0 = baseline_features(m, cfg)
    pos = [0, 3, 10, 599]
    m.force_baseline(pos)
    m.step()
    feats = m.features()
    z = np.stack([np.asarray(feats[k], dtype=np.float64) for k in FEATURES], axis=1)
    np.testing.assert_allclose(z[pos], z0[pos], rtol=1e-6, atol=1e-7)
    with pytest.raises(SimulationError):
        m.force_baseline([600])


def test_incremental_counterfactual_equals_a_full_fork():
    cfg = _cfg(1500, 6)
    run = SC.simulate(cfg, rng=9, keep_from=0)
    before = run.before(4)
    rng = np.random.default_rng(1)
    hubs = np.argsort(-before.world.network.follower_count())[:20]
    for pos in (hubs.tolist(), sorted(rng.choice(1500, 300, replace=False).tolist()), []):
        z_inc, _ = SC.step_with_baseline(before, cfg, pos)
        res = fork(before, intervention=(lambda mm, pos=pos: mm.force_baseline(pos)) if pos else None, steps=1,
                   recorder=SC.make_recorder(cfg))
        assert np.array_equal(z_inc, res.panel.values[0])
    assert np.array_equal(SC.step_with_baseline(before, cfg, [])[0], run.panel.values[4])


def test_counterfactual_matrix_is_the_stacked_features_in_float64():
    """The deletion forks' matrix (the factual one copied, changed rows rewritten) holds exactly the stacked float32
    features, column-major, and a fork never writes into the factual matrix it copies."""
    cfg = _cfg(1500, 6)
    run = SC.simulate(cfg, rng=9, keep_from=0)
    before = run.before(4)
    hubs = np.argsort(-before.world.network.follower_count())[:20]
    for pos in (hubs.tolist(), [3, 7, 1499], [], hubs.tolist()):
        z = before.counterfactual_matrix(pos)
        feats = before.counterfactual_features(pos)
        want = np.stack([np.asarray(feats[k], dtype=np.float32) for k in FEATURES], axis=1).astype(np.float64)
        assert z.dtype == np.float64 and z.flags.f_contiguous
        assert np.array_equal(z, want)
    assert np.array_equal(before.counterfactual_matrix([]), run.panel.values[4])


def test_counterfactual_rows_are_the_matrix_as_what_changes():
    """(factual matrix, changed rows, their values): the matrix with the rows replaced is counterfactual_matrix's,
    the rows are unique, the factual matrix is one array that no fork writes into."""
    cfg = _cfg(1500, 6)
    run = SC.simulate(cfg, rng=9, keep_from=0)
    before = run.before(4)
    hubs = np.argsort(-before.world.network.follower_count())[:20]
    bases = []
    for pos in (hubs.tolist(), [3, 7, 1499], [], sorted(np.random.default_rng(2).choice(1500, 700, False).tolist())):
        base, rows, values = SC.step_rows(before, cfg, pos)
        bases.append(base)
        z = base.copy()
        z[rows] = values
        assert np.unique(rows).size == rows.size and values.dtype == np.float64
        assert np.array_equal(z, before.counterfactual_matrix(pos))
        assert set(pos) <= set(rows.tolist())
    assert all(b is bases[0] for b in bases) and np.array_equal(bases[0], run.panel.values[4])


def test_forcing_fork_is_per_thread_and_survives_pickling():
    """Concurrent deletion forks (an LLM backend's fork threads) each mark their own decisions as fork decisions: one
    fork finishing must not unmark another's still deciding."""
    import pickle
    import threading

    m = MegaScaleSocial(_cfg(300, 3), rng=0)
    dec = m.decider
    dec.forcing_fork = True
    seen = []
    t = threading.Thread(target=lambda: seen.append(dec.forcing_fork))
    t.start()
    t.join()
    assert dec.forcing_fork is True and seen == [False]
    clone = pickle.loads(pickle.dumps(dec))
    assert clone.forcing_fork is False
    clone.forcing_fork = True
    assert clone.forcing_fork is True
    dec.forcing_fork = False


def test_decision_modes_agent_and_constant():
    cfg = _cfg(300, 3)
    agent = MegaScaleSocial(cfg, rng=0, mode="agent")
    const = MegaScaleSocial(cfg, rng=0, constant=[0.2, 0.1, 0.0])
    for _ in range(3):
        agent.step()
        const.step()
    assert agent.decider.ledger.per_step() == [300, 300, 300]
    assert const.decider.ledger.per_step() == [] and const.backend.usage.decisions == 0
    with pytest.raises(ConfigError):
        MegaScaleSocial(cfg, rng=0, mode="crowd")


def test_worlds_from_networkx_and_edge_lists():
    g = nx.barabasi_albert_graph(200, 2, seed=1)
    w = World.from_networkx(g, rng=0)
    m = MegaScaleSocial(rng=0, world=w)
    panel = simulate(m, 3, SC.make_recorder(m.config))
    assert panel.shape == (3, 200, len(FEATURES)) and w.network.mutual
    src = np.array([0, 1, 2, 3, 4, 5])
    dst = np.array([1, 2, 3, 4, 5, 0])
    w2 = World.from_edges(src, dst, rng=1)
    m2 = MegaScaleSocial(rng=0, world=w2)
    m2.step()
    assert w2.network.follower_count().tolist() == [1] * 6 and not w2.network.mutual
    with pytest.raises(ConfigError, match="agents"):
        MegaScaleSocial(_cfg(50), rng=0, world=w2)


def test_edge_list_network_from_config(tmp_path):
    p = tmp_path / "follows.txt"
    rows = [(i, (i * 7 + 3) % 40) for i in range(40)] + [(i, (i + 1) % 40) for i in range(40)]
    p.write_text("\n".join(f"{a} {b}" for a, b in rows))
    run = SC.simulate(SC.load_config(agents=40, steps=3, network=str(p)), rng=0)
    assert run.panel.shape[1] == 40
    with pytest.raises(ConfigError, match="agents = 40"):
        SC.simulate(SC.load_config(agents=50, steps=3, network=str(p)), rng=0)


def test_offline_backend_is_deterministic_and_validated():
    b = offline_backend()
    assert isinstance(b, OfflineBackend)
    m = MegaScaleSocial(_cfg(), rng=0)
    req = m.decider.archetype_request(int(m.keys()[0]), 0)
    d1, d2 = b.decide(**req), b.decide(**req)
    assert d1 == d2 and 0 <= d1.post <= 1 and -1 <= d1.stance_shift <= 1


class AbstainingBackend:
    """Every request comes back as an abstention (a reply that stayed invalid), counted as the LLM backend does."""

    def __init__(self) -> None:
        from aumann.simulators.llm.usage import Usage

        self.usage = Usage()
        self.sent = 0

    def decide_many(self, requests, *, return_exceptions=False):
        from aumann.errors import MalformedResponseError

        reqs = list(requests)
        self.sent += len(reqs)
        self.usage.add(invalid_decisions=len(reqs))
        return [MalformedResponseError("the reply stayed invalid after a varied retry") for _ in reqs]

    def __deepcopy__(self, memo):
        return self


def test_remembered_abstentions_stay_abstentions_in_the_usage_account():
    # issue 23 (found on SmolLM2-135M): a key that abstained was remembered as (0, 0, 0) and every later
    # memo hit counted as a valid decision, so an all-abstention run reported 50% invalid (and with the
    # study's forks far less), under llm.max_invalid_rate: the run was never marked unreliable
    from aumann.simulators.llm.usage import invalid_rate

    backend = AbstainingBackend()
    m = MegaScaleSocial(_cfg(300, 6), rng=1, backend=backend)
    for _ in range(6):
        m.step()
    ledger = m.decider.ledger
    assert ledger.decisions > backend.sent > 0  # later steps reused remembered keys (memo hits happened)
    assert m.decider.abstained == backend.sent  # each distinct key asked once, not again
    assert backend.usage.decisions == 0 and backend.usage.cache_hits == 0
    assert backend.usage.invalid_decisions == ledger.decisions  # every decision of the run abstained
    assert invalid_rate(backend.usage) == 1.0
    # the study's account (manifest.json → llm_usage, which llm_reliability reads) takes its decisions from
    # the decider's ledger: abstentions are not answered decisions there either
    from aumann.studies.megascale.analysis import llm_usage

    account = {**backend.usage.as_dict(), **llm_usage(m, ledger.as_dict())}  # as `aumann run` merges them
    assert account["decisions"] == account["fork_decisions"] == 0
    assert account["invalid_decisions"] == ledger.decisions
    assert invalid_rate(account) == 1.0
    for v in (m.features()["posted"], m.features()["reshared"]):
        assert not np.any(v)  # an abstention is no action
