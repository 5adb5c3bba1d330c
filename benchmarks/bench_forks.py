"""Fork cost: a checked copy against a replay, on Mesa's own example models.

For each model (Boltzmann wealth with the issue's 100 agents on a 10 × 10 grid, wolf–sheep at its
default 20 × 20 with 150 animals and DEVS stepping) and each fork point t, the model is run t steps,
then ``fork(model, steps=1, strategy=...)`` is timed with ``"copy"`` and with ``"replay"`` (the
factory rebuilds the model and replays t steps). Reported per fork point: the median wall time of
each and the ratio replay / copy; the reference is the copy fork of the same model in the same
run, so the ratio does not depend on the machine. Also reported: one plain ``model.step()``, and
the copy's own overhead (deepcopy alone, the check alone) at the first fork point.

Run: ``python benchmarks/bench_forks.py [--points 5 20 50] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
import warnings
from typing import Any

warnings.filterwarnings("ignore", message=".*Random number generator not specified.*")


def _build(module: Any, cls: str, scenario: str, **params: Any) -> Any:
    """One of Mesa's example models, seeded 1: Mesa 3.5's take a Scenario of their parameters; Mesa 3.3's take
    keywords and ``seed=`` (wolf-sheep an ``ABMSimulator`` too, which 3.5 deprecates: there the model schedules
    its own events)."""
    if hasattr(module, scenario):
        return getattr(module, cls)(getattr(module, scenario)(**params, rng=1))
    if cls == "WolfSheep":
        from mesa.experimental.devs import ABMSimulator

        params["simulator"] = ABMSimulator()
    return getattr(module, cls)(**params, seed=1)


def _models():
    from mesa.examples.advanced.wolf_sheep import model as wolf_sheep
    from mesa.examples.basic.boltzmann_wealth_model import model as boltzmann

    def energy(a):
        return float(getattr(a, "energy", getattr(a, "wealth", 0.0)))

    return {
        "boltzmann-wealth (N=100, 10x10)": (
            lambda: _build(boltzmann, "BoltzmannWealth", "BoltzmannScenario", n=100, width=10, height=10), energy),
        "wolf-sheep (150 animals, 20x20, DEVS)": (lambda: _build(wolf_sheep, "WolfSheep", "WolfSheepScenario"), energy),
    }


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, nargs="+", default=[5, 20, 50], help="fork points t (steps before the fork)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    from aumann.simulators import FeatureRecorder, fork, simulate
    from aumann.simulators.branching import copy_problem, default_step

    print(f"load average: {os.getloadavg()}")
    for name, (factory, feat) in _models().items():
        rec = FeatureRecorder({"x": feat})
        print(f"\n{name}")
        model = factory()
        done = 0
        for t in sorted(args.points):
            simulate(model, t - done, rec)
            done = t
            ok = [fork(model, steps=1, recorder=rec, strategy=s, factory=factory).panel for s in ("copy", "replay")]
            assert ok[0].equals(ok[1]), "copy and replay forks disagree"
            t_copy = _median_time(lambda m=model, r=rec: fork(m, steps=1, recorder=r, strategy="copy"), args.repeats)
            t_replay = _median_time(lambda m=model, r=rec: fork(m, steps=1, recorder=r, strategy="replay"),
                                    args.repeats)
            print(f"  t={t:4d}: copy fork {t_copy * 1e3:8.1f} ms   replay fork {t_replay * 1e3:8.1f} ms   "
                  f"replay/copy = {t_replay / t_copy:6.2f}")
            if t == min(args.points):
                probe = factory()
                t_step = _median_time(lambda m=probe: default_step(m), args.repeats)
                from aumann.simulators.branching import _copy_hooks

                def hooked_copy(model=model):
                    with _copy_hooks() as ctx:
                        memo: dict = {}
                        branch = copy.deepcopy(model, memo)
                        ctx.finish(memo)
                    return branch

                t_deep = _median_time(hooked_copy, args.repeats)
                branch = hooked_copy()
                t_check = _median_time(lambda b=branch, m=model: copy_problem(m, b), args.repeats)
                print(f"         one step {t_step * 1e3:.1f} ms; copy = deepcopy {t_deep * 1e3:.1f} ms + check "
                      f"{t_check * 1e3:.1f} ms (checked once per model state, then skipped)")
    print(f"\nload average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
