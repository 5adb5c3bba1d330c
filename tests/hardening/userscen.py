"""A small scenario whose own code misbehaves on request (``cfg.mode``): raise, exit, hang, sleep — for the
user-code boundary tests (importable by file path: ``tests/hardening/userscen.py:scenario``)."""

from __future__ import annotations

import sys
import time

from pydantic import Field

from aumann.attribution import indicators
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder


class Config(ScenarioConfig):
    agents: int = Field(4, ge=2)
    steps: int = Field(6, ge=2)
    mode: str = "ok"
    bad_step: int = 3


class Agent:
    def __init__(self, uid: int) -> None:
        self.unique_id = uid
        self.x = float(uid)


class Model:
    def __init__(self, cfg: Config, rng) -> None:
        self.cfg = cfg
        self.agents = [Agent(i) for i in range(cfg.agents)]
        self.steps = 0
        self.rng = rng

    def step(self) -> None:
        mode = self.cfg.mode
        if self.steps == self.cfg.bad_step:
            if mode == "raise":
                raise ZeroDivisionError("user bug in step")
            if mode == "exit":
                sys.exit(3)
            if mode == "hang":
                while True:
                    pass
            if mode == "swallow":  # a step that catches everything still cannot swallow the timeout
                while True:
                    try:
                        while True:
                            pass
                    except Exception:
                        continue
            if mode == "sleep":
                time.sleep(60)
        for a in self.agents:
            a.x += 1.0 + 0.1 * a.unique_id
        self.steps += 1


def build(cfg: Config, rng, backend=None):
    if cfg.mode == "build_raises":
        raise RuntimeError("cannot build")
    if cfg.mode == "build_none":
        return None
    if cfg.mode == "build_exit":
        sys.exit(0)
    return Model(cfg, rng)


def baseline(model, positions):
    if model.cfg.mode == "baseline_raises":
        raise KeyError("no such agent")


def groups(model, cfg):
    if cfg.mode == "groups_raises":
        raise ValueError("bad groups")
    if cfg.mode == "groups_missing":  # agent 2 has no group (a missing cell of the user's table)
        return {"half": [None if a.unique_id == 2 else a.unique_id % 2 for a in model.agents]}
    return {"half": ["a" if a.unique_id % 2 else "b" for a in model.agents]}


def make(name: str = "user-code") -> Scenario:
    return Scenario(
        name=name, description="a scenario whose own code misbehaves on request", config_model=Config,
        build_model=build, make_recorder=lambda cfg: FeatureRecorder({"x": "x"}), features=("x",),
        indicator=lambda cfg: indicators.get("var"), original=lambda cfg: indicators.get("var"),
        baseline_action=baseline, groups=groups)


scenario = make()
