"""Cost of counting the agents no capture sees (``meta["transient_agents"]``), as ratios.

``simulate`` watches each step of a Mesa model (its ``register_agent``/``deregister_agent`` routed through a
counter while the step runs). The reference is the same run, same seed, recorded by the same recorder with the
watch turned off, in the same process; the ratio watched / unwatched (best of ``--repeats``) is printed for:

* a population with no births (only the per-step cost of installing the watch);
* the worst case: every agent creates and removes one agent in every step (one counted pair per agent per step);
* Mesa's own wolf–sheep at its default 20 × 20 (lambs born and eaten in the same step).

Run: ``python benchmarks/bench_transients.py [--agents 100 5000] [--steps 50] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

from _env import header

warnings.filterwarnings("ignore")


def _models(agents: list[int]) -> dict[str, Callable[[int], Any]]:
    import mesa

    class Walker(mesa.Agent):
        def __init__(self, model: mesa.Model) -> None:
            super().__init__(model)
            self.energy = 1.0

        def step(self) -> None:
            self.energy += 1.0
            if self.model.churn:
                Walker(self.model).remove()  # born and removed within the step

    class World(mesa.Model):
        def __init__(self, n: int, churn: bool, seed: int) -> None:
            super().__init__(rng=seed)
            self.churn = churn
            Walker.create_agents(self, n)

        def step(self) -> None:
            self.agents.do("step")

    def wolf_sheep(seed: int) -> Any:
        from mesa.examples import WolfSheep
        from mesa.experimental.devs import ABMSimulator

        return WolfSheep(seed=seed, simulator=ABMSimulator())

    out: dict[str, Callable[[int], Any]] = {}
    for n in agents:
        out[f"no births, N={n}"] = lambda s, n=n: World(n, False, s)
        out[f"every agent: one birth+removal a step, N={n}"] = lambda s, n=n: World(n, True, s)
    out["mesa wolf-sheep 20x20"] = wolf_sheep
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, nargs="+", default=[100, 5000])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from aumann.simulators import FeatureRecorder, simulate

    header("transient-agent watch: watched / unwatched simulate")
    on = FeatureRecorder({"energy": "energy"})
    off = FeatureRecorder({"energy": "energy"})
    off._counts_transients = False  # the reference: the same recorder, no watch
    print(f"{'model':45s} {'ratio':>7s} {'watched s':>10s} {'unwatched s':>12s} {'counted':>8s}")
    for name, build in _models(args.agents).items():
        best = {"on": float("inf"), "off": float("inf")}
        counted = 0
        for r in range(args.repeats):
            for key, rec in (("on", on), ("off", off)):  # interleaved: load drifts hit both alike
                model = build(r + 1)
                t0 = time.perf_counter()
                panel = simulate(model, args.steps, rec)
                best[key] = min(best[key], time.perf_counter() - t0)
                if key == "on" and r == 0:
                    counted = panel.meta.get("transient_agents", {}).get("total", 0)
        print(f"{name:45s} {best['on'] / best['off']:7.3f} {best['on']:10.3f} {best['off']:12.3f} {counted:8d}")
    header("after")


if __name__ == "__main__":
    main()
