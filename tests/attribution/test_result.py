import numpy as np
import pytest

from aumann.attribution import Panel, attribute, indicators
from aumann.attribution.result import Attribution
from aumann.errors import PanelError, ShapeError, ZeroDeltaVError


def _panel(rng, T=3, N=50):
    v = np.abs(rng.normal(size=(T, N, 3)))
    tiers = np.array(["top"] * 5 + ["mid"] * 15 + ["tail"] * (N - 20))
    return Panel(v, features=["a", "b", "c"], groups={"tier": tiers})


def test_aggregations_and_group_shares(rng):
    p = _panel(rng)
    res = attribute(indicators.get("heat"), p)
    np.testing.assert_allclose(res.by_step(), res.delta_v, rtol=1e-12)
    np.testing.assert_allclose(res.by_agent(), res.phi.sum(0))
    shares = res.group_shares("tier")
    assert set(shares) == {"top", "mid", "tail"}
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-12)
    per_step = res.group_shares("tier", per_step=True)
    np.testing.assert_allclose(sum(per_step.values()), np.ones(3), atol=1e-12)
    np.testing.assert_allclose(res.shares().sum(1), 1.0, atol=1e-12)


def test_group_shares_refuse_labels_mixing_numbers_and_text():
    """group_shares([1, "1", 2, "2"]) made text of every label and reported two groups for four; refused (the rule
    of Panel(groups=...)), while labels of one type keep their groups."""
    res = attribute("lin", Panel(np.ones((1, 4, 1))))
    with pytest.raises(PanelError, match=r"group labels mixes numbers and text \(1 and '1'\)"):
        res.group_shares([1, "1", 2, "2"])
    assert res.group_shares([1, 1, 2, 2]) == {1: 0.5, 2: 0.5}
    assert res.group_shares(["1", "2", "3", "4"]) == {"1": 0.25, "2": 0.25, "3": 0.25, "4": 0.25}


def test_shares_with_zero_delta_v_raise():
    p = Panel(np.zeros((4, 2)))
    res = attribute(indicators.get("lin"), p)
    assert res.phi.shape == (1, 4)
    with pytest.raises(ZeroDeltaVError, match="Δv"):
        res.shares()


def test_export_and_roundtrip(tmp_path, rng):
    res = attribute(indicators.get("var"), _panel(rng), per_feature=True)
    df = res.to_pandas()
    assert len(df) == 3 * 50 and {"step", "agent", "phi", "phi_a", "group_tier"} <= set(df.columns)
    res.to_parquet(tmp_path / "a.parquet")
    back = Attribution.load(res.save(tmp_path / "a"))
    np.testing.assert_array_equal(back.phi, res.phi)
    np.testing.assert_array_equal(back.phi_features, res.phi_features)
    assert back.provenance["indicator"] == "var" and back.method == "aumann_shapley"


def test_constructor_validates_shapes():
    with pytest.raises(ShapeError):
        Attribution(phi=np.ones((2, 3)), delta_v=np.ones(3), f_values=np.ones(2), f_baseline=np.ones(2),
                    agent_ids=np.arange(3), steps=np.arange(2), features=("a",))


def test_phi_sums_from_the_method_are_reused_and_never_carried_stale():
    import dataclasses

    res = attribute(indicators.get("heat"), Panel(np.abs(np.random.default_rng(3).normal(size=(4, 50, 3)))))
    assert res._phi_sums is not None  # the closed form handed its Σ_i φ over
    np.testing.assert_allclose(res.by_step(), res.phi.sum(axis=1), rtol=1e-12)
    doubled = dataclasses.replace(res, phi=2 * res.phi)  # a derived result recomputes its sums
    np.testing.assert_allclose(doubled.by_step(), 2 * res.phi.sum(axis=1), rtol=1e-12)
    with pytest.raises(ShapeError, match="phi_sums"):
        Attribution(phi=res.phi, delta_v=res.delta_v, f_values=res.f_values, f_baseline=res.f_baseline,
                    agent_ids=res.agent_ids, steps=res.steps, features=res.features, phi_sums=np.zeros(3))


# an edited file is damaged, not loaded: bool("no") is True, and a repeated id breaks every lookup by label
_TAMPERED = {
    "satisfies_efficiency_string": ({}, {"satisfies_efficiency": "no"}, "satisfies_efficiency"),
    "n_evals_string": ({}, {"n_evals": "abc"}, "n_evals"),
    "n_evals_negative": ({}, {"n_evals": -5}, "n_evals"),
    "n_evals_fraction": ({}, {"n_evals": 2.5}, "n_evals"),
    "n_evals_bool": ({}, {"n_evals": True}, "n_evals"),
    "method_object": ({}, {"method": {"a": 1}}, "method"),
    "features_nested": ({}, {"features": [[1], {"a": 2}]}, "features"),
    "features_repeated": ({}, {"features": ["a", "a", "c"]}, "unique"),
    "agent_ids_repeated": ({"agent_ids": np.array(["x"] * 50)}, {}, "agent_ids"),
    "steps_repeated": ({"steps": np.array([0, 0, 1])}, {}, "steps"),
    "steps_nan": ({"steps": np.array([0.0, np.nan, 1.0])}, {}, "steps"),
    "group_nan": ({"group::tier": np.full(50, np.nan)}, {}, "tier"),
}


@pytest.mark.parametrize("case", sorted(_TAMPERED), ids=str)
def test_load_refuses_tampered_metadata_and_labels(tmp_path, rng, case):
    from aumann.errors import AttributionFileError
    from aumann.io import read_npz, write_npz

    arrays, meta_changes, needle = _TAMPERED[case]
    path = attribute(indicators.get("heat"), _panel(rng)).save(tmp_path / "a.npz")
    data, meta = read_npz(path, error=RuntimeError)
    write_npz(tmp_path / "b.npz", {**data, **arrays}, meta={**meta, **meta_changes})
    with pytest.raises(AttributionFileError, match=needle):
        Attribution.load(tmp_path / "b.npz")


def test_load_reads_what_save_wrote_under_the_same_name(tmp_path):
    # save() appends .npz to the whole name; load() of the same name found nothing (Attribution) or, for a
    # dotted name, replaced the suffix and read another file (Panel.load("run.v2") read run.npz)
    Panel(np.ones((2, 3, 1))).save(tmp_path / "run")
    assert Panel(np.full((2, 3, 1), 7.0)).save(tmp_path / "run.v2").name == "run.v2.npz"
    assert Panel.load(tmp_path / "run.v2").values[0, 0, 0] == 7.0
    assert Panel.load(str(tmp_path / "run")).values[0, 0, 0] == 1.0
    res = attribute(indicators.get("lin"), Panel(np.full((2, 3, 1), 7.0)))
    assert res.save(tmp_path / "att.v1").name == "att.v1.npz"
    np.testing.assert_array_equal(Attribution.load(tmp_path / "att.v1").phi, res.phi)
    np.testing.assert_array_equal(Attribution.load(tmp_path / "att.v1.npz").phi, res.phi)


def test_group_shares_and_totals_are_the_mask_sums_to_the_bit_and_one_group_per_agent_is_linear(rng):
    """R_G was a mask per group (phi[labels == g]): quadratic in the number of groups, 8,000 one-agent groups took
    1.5 s and 10^5 did not finish. One sort now gives each group's members in the same order, so every sum is the
    same sum to the bit; a page lists at most PAGE_TOP_MAX groups, the largest |R_G|, and says so."""
    from aumann.attribution.result import group_members, group_shares
    from aumann.studies.sections import PAGE_TOP_MAX, group_share_table

    labels = rng.integers(0, 41, size=3000)
    res = attribute("lin", Panel(rng.normal(size=(4, 3000, 1)) + 0.05, groups={"g": labels}))
    phi = res.phi
    want = {int(g): float(phi.sum(0)[labels == g].sum() / phi.sum()) for g in np.unique(labels)}
    assert res.group_shares("g") == want
    totals = res.group_totals("g")
    for g in np.unique(labels):
        assert np.array_equal(totals[int(g)], phi[:, labels == g].sum(axis=1))
    assert group_shares(phi[0], labels, total=2.0, groups=[3, 99]) == {3: float(phi[0, labels == 3].sum() / 2.0),
                                                                       99: 0.0}
    members = group_members(np.array(["b", "a", "b", "c", "a"]))
    assert [(str(g), m.tolist()) for g, m in members] == [("a", [1, 4]), ("b", [0, 2]), ("c", [3])]

    n = 3 * PAGE_TOP_MAX
    one_each = attribute("lin", Panel(rng.normal(size=(1, n, 1)) + 0.05, groups={"id": np.arange(n)}))
    blocks = group_share_table(one_each, caption="R_G", id="g")
    table = blocks[-1]
    assert len(table.rows) == PAGE_TOP_MAX and "3,000 labels" in blocks[0].text
    shares = one_each.group_shares("id")
    cutoff = sorted((abs(v) for v in shares.values()), reverse=True)[PAGE_TOP_MAX - 1]
    assert all(abs(shares[int(r[0].text)]) >= cutoff for r in table.rows)


def test_a_group_that_is_neither_a_name_nor_labels_says_so():
    """group_shares(3) (a group named 3 is kept as "3") said "group labels must have shape (N,) = (4,); got ()"."""
    res = attribute("lin", Panel(np.ones((1, 4, 1)), groups={"3": ["a", "a", "b", "b"]}))
    for group, shown in ((3, "int '3'"), ({"a": 1}, "dict \"{'a': 1}\"")):
        with pytest.raises(ShapeError, match=rf"group must be the name \(text\) of one of this result's groups \['3'\] "
                                             rf"or one label per agent \(N = 4\); got {shown}"):
            res.group_shares(group)
    assert res.group_shares("3") == {"a": 0.5, "b": 0.5}
    assert res.group_shares(["x", "y", "y", "y"]) == {"x": 0.25, "y": 0.75}  # a group of one member


def test_a_panel_file_and_an_attribution_file_each_name_the_loader_the_other_needs(tmp_path):
    """Attribution.load(a panel file) said only "is not an aumann attribution file", and Panel.load(an attribution
    file) "unsupported panel format 'aumann.attribution/1'"."""
    from aumann.errors import AttributionFileError

    panel = Panel(np.ones((1, 4, 1)))
    p_file, a_file = panel.save(tmp_path / "panel.npz"), attribute("lin", panel).save(tmp_path / "attr.npz")
    with pytest.raises(AttributionFileError, match=r"panel\.npz' is not an aumann attribution file \(it is a panel "
                                                   r"file: read it with Panel\.load\)"):
        Attribution.load(p_file)
    with pytest.raises(PanelError, match=r"attr\.npz' is an attribution file, not a panel file: read it with "
                                         r"Attribution\.load"):
        Panel.load(a_file)
