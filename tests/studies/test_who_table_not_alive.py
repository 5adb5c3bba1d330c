"""The who-table ranks agents by Φ_i = Σ_t φ_i,t over every step and shows their values at t*: for an agent that is
not alive at t* (dead, or not yet born) those cells read "not alive", never a 0 that looks measured. The wolf–sheep
example's table showed φ at t* = 0 and energy 0 for 7 of its top 20 animals, which were dead by then (and φ = 0 for
12 living ones, whose action at t* changed nothing: those zeros are measured and stay)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from aumann.attribution import Panel, attribute
from aumann.cli import main
from aumann.studies.sections import NOT_ALIVE_TEXT, who_table
from tests.studies import htmlcheck

#: T = 3 steps of 5 agents; agent "b" dies before step 2 (t*: the largest Δv), "e" lives there with energy 0
VALUES = np.array([[1.0, 2, 3, 4, 5], [2, 3, 4, 5, 6], [9, 0, 8, 7, 0]])[..., None]
ALIVE = np.ones((3, 5), dtype=bool)
ALIVE[2, 1] = False
IDS = ["a", "b", "c", "d", "e"]


def _panel() -> Panel:
    return Panel(VALUES, features=["energy"], alive=ALIVE, agent_ids=IDS)


def _cells(table, column: str) -> dict[str, str]:
    """{agent id: the shown text of ``column``} of a who-table."""
    from aumann.studies.page import Cell, literal

    j = next(i for i, c in enumerate(table.columns) if c in (column, literal(column)))  # feature names: literal
    agent = table.columns.index("agent")
    return {r[agent].text: (r[j].text if isinstance(r[j], Cell) else repr(float(r[j]))) for r in table.rows}


def test_the_cells_at_t_star_of_an_agent_not_alive_read_not_alive_and_a_living_zero_stays():
    att = attribute("lin", _panel())
    ts = int(np.argmax(att.delta_v))
    assert ts == 2 and att.phi[ts, 1] == 0 and att.phi[ts, 4] == 0  # both 0: "b" is dead, "e" lives with energy 0
    table = who_table(att, k=5, t_star=ts, features={"energy": VALUES[ts, :, 0]}, alive=ALIVE[ts])
    for column in ("φ at t*", "% of Δv(t*)", "energy"):
        cells = _cells(table, column)
        assert cells["b"] == NOT_ALIVE_TEXT, (column, cells)
        assert all(v != NOT_ALIVE_TEXT for k, v in cells.items() if k != "b"), (column, cells)
    assert _cells(table, "φ at t*")["e"] == "0.0"  # a living agent's 0 is a value
    assert _cells(table, "Φ_i")["b"] != NOT_ALIVE_TEXT  # ranked by what it did while alive
    # without an alive mask, as before: numbers throughout
    plain = who_table(att, k=5, t_star=ts, features={"energy": VALUES[ts, :, 0]})
    assert NOT_ALIVE_TEXT not in str(plain.rows)


def test_a_computed_value_of_an_agent_not_alive_at_t_star_is_shown(monkeypatch):
    """A reference that is not 0 for an agent that died during step t* (the re-simulation game credits what its
    action did to others) was computed: it is shown, not hidden as "not alive"."""
    from types import SimpleNamespace

    att = attribute("lin", _panel())
    ref = SimpleNamespace(phi=np.array([[0.1, 0.3, 0.2, 0.1, 0.0]]), stderr=np.array([[0.01, 0.02, 0.01, 0.0, 0.0]]))
    table = who_table(att, k=5, t_star=2, features=None, reference=ref, alive=ALIVE[2])
    assert _cells(table, "Shapley φ(t*)")["b"] == "0.3" and _cells(table, "± stderr")["b"] == "0.02"
    assert _cells(table, "φ at t*")["b"] == NOT_ALIVE_TEXT


def test_aumann_attribute_writes_not_alive_as_empty_cells_and_a_column_and_the_page_says_so(tmp_path):
    """top_agents.csv held phi_t_star = 0.0 and z_energy = 0.0 for the dead agent: plain numbers that read as measured.
    Its cells at t* are now empty (plain numbers elsewhere), alive_t_star says why, summary.json holds no NaN, and
    the page's who-table reads "not alive"."""
    src = _panel().save(tmp_path / "panel.npz")
    out = tmp_path / "out"
    assert main(["attribute", str(src), "--indicator", "lin", "--out", str(out), "--static"]) == 0
    with open(out / "top_agents.csv", newline="") as fh:
        rows = {r["agent"]: r for r in csv.DictReader(fh)}
    assert list(next(iter(rows.values())))[-1] == "alive_t_star"  # appended: the other columns keep their places
    assert rows["b"]["alive_t_star"] == "False" and rows["b"]["phi_t_star"] == "" and rows["b"]["z_energy"] == ""
    assert float(rows["b"]["Phi"]) == pytest.approx(1.0)  # its Φ_i stays: what it did while alive
    for agent in ("a", "c", "d", "e"):
        assert rows[agent]["alive_t_star"] == "True"
        float(rows[agent]["phi_t_star"]), float(rows[agent]["z_energy"])  # plain numbers
    assert float(rows["e"]["phi_t_star"]) == 0.0  # a living agent's measured 0
    json.loads((out / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in summary.json"))
    page = (out / "report.html").read_text(encoding="utf-8")
    tab = htmlcheck.tables(page)["who-run-000"]
    col, agent = tab["head"].index("φ at t*"), tab["head"].index("agent")
    shown = {r[agent]["text"]: r[col]["text"] for r in tab["rows"]}
    assert shown["b"] == NOT_ALIVE_TEXT and shown["e"] == "0"
    text = htmlcheck.text(page)
    assert "Top agents ranked by Φ_i = Σ_t φ_i,t over all 3 step(s)" in text
    assert "1 of these 5 agents are not alive at t*" in text


def test_the_run_page_of_wolf_sheep_says_not_alive_for_the_animals_dead_at_t_star(tmp_path):
    """`aumann run` of Mesa's wolf–sheep: each run's who-table reads "not alive" at t* for exactly the animals of its
    top agents that are not alive at t* (its panel's alive mask), and says what it ranks by."""
    from aumann import scenarios
    from aumann.studies.faithfulness import run_study
    from aumann.studies.report import write_outputs
    from tests.paths import REPO

    sc = scenarios.load(f"{REPO / 'docs' / 'examples' / 'wolf_sheep.py'}:scenario")
    cfg = sc.load_config(agents=16, steps=8, runs=1, wolves=4, size=7,
                         study={"permutations": 10, "random_orderings": 2, "path_orders": 2, "quadrature_steps": 6,
                                "k_del": 3, "ablations": False})
    out = tmp_path / "wolf"
    res = run_study(sc, cfg, out_dir=out)
    write_outputs(res, out, command="aumann run wolf-sheep", seconds=1.0, config=cfg.model_dump(mode="json"),
                  plots=False, interactive=False)
    panel = Panel.load(out / "panels" / "run-000.npz")
    ts = int(res.records[0]["t_star"])
    page = (out / "report.html").read_text(encoding="utf-8")
    tab = htmlcheck.tables(page)["who-run-000"]
    agent, col, feat = tab["head"].index("agent"), tab["head"].index("φ at t*"), tab["head"].index("energy")
    alive = {str(i): bool(a) for i, a in zip(panel.agent_ids.tolist(), panel.alive[ts], strict=True)}
    dead = [r for r in tab["rows"] if not alive[r[agent]["text"]]]
    assert dead  # the check below looks at something: some top animals are dead at t*
    assert all(r[col]["text"] == NOT_ALIVE_TEXT and r[feat]["text"] == NOT_ALIVE_TEXT for r in dead)
    assert all(r[feat]["text"] != NOT_ALIVE_TEXT for r in tab["rows"] if alive[r[agent]["text"]])
    assert f"Run 0: top agents ranked by Φ_i = Σ_t φ_i,t over all 8 steps (t* = step {ts})" in htmlcheck.text(page)
