"""Optional stages in lanes (``Stage.lane``): lanes run at the same time, and the run record — its values and
its key order — is what running the stages one after another gives."""

from __future__ import annotations

import dataclasses
import json
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from aumann.errors import StudyError
from aumann.progress import StageTimer, end_thread
from aumann.studies import stages as S
from aumann.studies.context import RunContext, RunOptions
from aumann.studies.stages import Stage, attempt


def _ctx(strict: bool = False) -> RunContext:
    ctx = RunContext(scenario=None, config=None, streams=None, options=RunOptions(strict=strict))
    ctx.run = SimpleNamespace(panel=SimpleNamespace(shape=(1, 10)))
    ctx.rec.update({"t_star": 3, "methods": {}})
    ctx.stages.update({"rows": {"status": "ok", "optional": False}})
    return ctx


def _lane_stages(meet: threading.Barrier | None = None, fail: bool = False) -> list[Stage]:
    def s1(ctx):
        if meet is not None:
            meet.wait()  # returns only if s3 runs at the same time
        attempt(ctx, "s1 part", lambda: ctx.rec.setdefault("x", 1))
        ctx.arrays["a1"] = np.arange(3)
        if fail:
            raise ValueError("s1 broke")

    def s2(ctx):
        ctx.rec["y"] = ctx.rec["x"] + 1  # sees its own lane's record

    def s3(ctx):
        if meet is not None:
            meet.wait()
        ctx.rec["analysis"] = {"tables": {"t": [1, 2]}}
        ctx.extras["shared"] = "state"
        ctx.rec.pop("t_star")

    def s4(ctx):
        ctx.rec["analysis"]["tables"]["u"] = [ctx.extras["shared"]]
        ctx.rec["methods"] = {"replaced": True}

    def s5(ctx):  # no lane: alone, after both lanes, and it sees both
        ctx.rec["last"] = sorted(k for k in ctx.rec)

    return [Stage("s1", s1, lane="a"), Stage("s2", s2, lane="a"), Stage("s3", s3, lane="b"),
            Stage("s4", s4, lane="b", needs=("s3",)), Stage("s5", s5)]


def _run(monkeypatch, todo: list[Stage], ctx: RunContext) -> RunContext:
    monkeypatch.setattr(S, "_STAGES", S.NamedList(todo))
    S.pending(ctx)
    S.run_stages(ctx, optional=True)
    return ctx


def _dump(ctx: RunContext) -> str:
    return json.dumps({"rec": ctx.rec, "stages": ctx.stages, "arrays": {k: v.tolist() for k, v in ctx.arrays.items()},
                       "extras": ctx.extras})


def test_segments_cut_at_stages_without_a_lane_and_at_needs_across_lanes():
    def st(name, lane, needs=()):
        return Stage(name, lambda ctx: None, lane=lane, needs=needs)

    todo = [st("a1", "a"), st("b1", "b"), st("a2", "a"), st("solo", None), st("a3", "a"), st("b2", "b"),
            st("b3", "b", needs=("a3",)), st("a4", "a")]
    names = [[[s.name for s in lane] for lane in seg] for seg in S._segments(todo)]
    assert names == [[["a1", "a2"], ["b1"]], [["solo"]], [["a3"], ["b2"]], [["b3"], ["a4"]]]


def test_lanes_run_at_the_same_time_and_give_the_serial_record(monkeypatch):
    todo = _lane_stages()
    serial = _run(monkeypatch, [dataclasses.replace(s, lane=None) for s in todo], _ctx())
    monkeypatch.setattr("aumann.attribution.threads.usable_cores", lambda: 2)
    meet = threading.Barrier(2, timeout=20)  # s1 and s3 each wait for the other: only lanes on threads pass
    lanes = _run(monkeypatch, _lane_stages(meet), _ctx())
    assert _dump(lanes) == _dump(serial)  # the same values in the same key order
    assert lanes.rec["y"] == 2 and "t_star" not in lanes.rec and lanes.rec["analysis"]["tables"]["u"] == ["state"]
    assert lanes.rec["last"] == sorted(serial.rec["last"]) and "x" in lanes.rec["last"]
    assert all(lanes.stages[n]["status"] == "ok" for n in ("s1", "s1 part", "s2", "s3", "s4", "s5"))


def test_one_core_runs_the_lanes_one_after_another_with_the_same_record(monkeypatch):
    serial = _run(monkeypatch, [dataclasses.replace(s, lane=None) for s in _lane_stages()], _ctx())
    monkeypatch.setattr("aumann.attribution.threads.usable_cores", lambda: 1)
    seen = set()
    todo = _lane_stages()
    todo = [dataclasses.replace(s, run=lambda ctx, f=s.run: (seen.add(threading.get_ident()), f(ctx))) for s in todo]
    lanes = _run(monkeypatch, todo, _ctx())
    assert _dump(lanes) == _dump(serial) and seen == {threading.get_ident()}


def test_lanes_run_one_after_another_where_memory_is_short(monkeypatch):
    serial = _run(monkeypatch, [dataclasses.replace(s, lane=None) for s in _lane_stages()], _ctx())
    monkeypatch.setattr("aumann.attribution.threads.usable_cores", lambda: 2)
    monkeypatch.setattr("aumann.attribution.memory.available_host", lambda: S.LANE_BYTES_PER_AGENT * 10 - 1)
    seen = set()
    todo = [dataclasses.replace(s, run=lambda ctx, f=s.run: (seen.add(threading.get_ident()), f(ctx)))
            for s in _lane_stages()]
    lanes = _run(monkeypatch, todo, _ctx())  # 10 agents: one byte short of room for two lanes at once
    assert _dump(lanes) == _dump(serial) and seen == {threading.get_ident()}


def test_a_failing_lane_is_recorded_and_under_strict_raised_after_the_other_lane_finished(monkeypatch):
    monkeypatch.setattr("aumann.attribution.threads.usable_cores", lambda: 2)
    ctx = _run(monkeypatch, _lane_stages(fail=True), _ctx())
    assert ctx.stages["s1"]["status"] == "failed" and ctx.stages["s1"]["error"] == "ValueError"
    assert ctx.stages["s2"]["status"] == "ok" and ctx.stages["s4"]["status"] == "ok"  # not strict: on it goes

    ctx = _ctx(strict=True)
    with pytest.raises(StudyError, match="'s1'"):
        _run(monkeypatch, _lane_stages(fail=True), ctx)
    assert ctx.stages["s1"]["status"] == "failed" and ctx.stages["s2"]["status"] == "pending"  # that lane stopped
    assert ctx.stages["s4"]["status"] == "ok" and ctx.rec["analysis"]["tables"]["u"] == ["state"]  # merged
    assert ctx.stages["s5"]["status"] == "pending"  # nothing after the lanes ran


def test_the_stage_timer_gives_each_thread_its_own_running_stage():
    now = [0.0]
    timer = StageTimer(clock=lambda: now[0])
    timer.start("deletion")
    now[0] = 2.0
    end_thread()  # the lanes start: the calling thread's stage ends

    def lane(name: str, at_end: float) -> None:
        timer.start(name)
        now[0] = max(now[0], at_end)
        end_thread()

    for name, at_end in (("ablations", 5.0), ("cascade", 9.0)):  # one after the other here: a deterministic clock
        t = threading.Thread(target=lane, args=(name, at_end))
        t.start()
        t.join()
    now[0] = 10.0
    timer.start("report")
    now[0] = 11.0
    timer.stop()
    assert timer.seconds == {"deletion": 2.0, "ablations": 3.0, "cascade": 4.0, "report": 1.0}
    assert list(timer.seconds_in(["report", "deletion"])) == ["report", "deletion", "ablations", "cascade"]


def test_an_interrupt_stops_the_calling_lane_at_once_and_the_others_after_their_stage(monkeypatch):
    import time

    monkeypatch.setattr("aumann.attribution.threads.usable_cores", lambda: 2)
    ran: list[str] = []
    started, release = threading.Event(), threading.Event()

    def interrupt(ctx):
        assert started.wait(20)  # the other lane is inside its first stage
        raise KeyboardInterrupt

    def b1(ctx):
        started.set()
        release.wait(20)
        ran.append("b1")

    todo = [Stage("a1", interrupt, lane="a"), Stage("b1", b1, lane="b"),
            Stage("b2", lambda ctx: ran.append("b2"), lane="b")]
    with pytest.raises(KeyboardInterrupt):
        _run(monkeypatch, todo, _ctx())
    assert ran == []  # the interrupt came back while the other lane was still in its stage
    release.set()
    for _ in range(400):
        if ran:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    assert ran == ["b1"]  # b1 finished, b2 never started


def _study(tmp_path, monkeypatch, *, large: bool, extra=()):
    from aumann import scenarios
    from aumann.studies import faithfulness
    from aumann.studies.rundir import RunDir
    from aumann.studies.stages import register_stage, unregister_stage

    if large:  # a "large" run: its first write goes on beside the lanes
        monkeypatch.setattr(faithfulness, "LARGE_N", 1)
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=20, steps=6, runs=1, study={"permutations": 20, "random_orderings": 2,
                                                            "path_orders": 2, "quadrature_steps": 8})
    seen: list[dict] = []

    def peek(ctx):  # alone, after the lanes: the first write is on disk by now
        seen.append(json.loads(RunDir(tmp_path).record(0).read_text()))

    added = [Stage("lane x", lambda ctx: ctx.rec.update(x=1), lane="x"),
             Stage("lane y", lambda ctx: ctx.rec.update(y=2), lane="y"), Stage("peek", peek), *extra]
    for st in added:
        register_stage(st)
    try:
        result = faithfulness.run_study(sc, cfg, out_dir=tmp_path)
    finally:
        for st in added:
            unregister_stage(st.name)
    return result, seen


def test_a_large_runs_first_write_goes_on_beside_the_lanes_and_is_on_disk_before_a_stage_alone(tmp_path,
                                                                                              monkeypatch):
    from aumann.studies.rundir import RunDir

    sync, seen_sync = _study(tmp_path / "sync", monkeypatch, large=False)
    writes: list[str] = []
    real = RunDir.write_run

    def tracked(self, *a, **k):  # which thread writes the run
        writes.append(threading.current_thread().name)
        return real(self, *a, **k)

    monkeypatch.setattr(RunDir, "write_run", tracked)
    result, seen = _study(tmp_path / "async", monkeypatch, large=True)
    assert writes[0].startswith("aumann-write") and not writes[1].startswith("aumann-write")
    assert seen[0]["stages"]["deletion"]["status"] == "ok" and seen[0]["stages"]["peek"]["status"] == "pending"
    assert seen[0]["methods"] == seen_sync[0]["methods"]
    drop = ("checksum", "files_sha256")
    assert {k: v for k, v in result.records[0].items() if k not in drop} == \
        {k: v for k, v in sync.records[0].items() if k not in drop}
    assert result.records[0]["x"] == 1 and result.records[0]["y"] == 2
    assert RunDir(tmp_path / "async").verify_run(0, result.records[0]["digest"])[0] == "done"


def test_a_failing_first_write_is_raised_not_lost(tmp_path, monkeypatch):
    from aumann.studies.rundir import RunDir

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunDir, "save_panel", full)
    with pytest.raises(OSError, match="No space left"):
        _study(tmp_path, monkeypatch, large=True)


def test_tables_and_nested_keys_written_by_two_lanes_are_all_kept_in_serial_order(monkeypatch):
    from aumann.studies.stages import add_table

    a_wrote = threading.Event()

    def ta(ctx):  # lane a: a table of its own, and a key in a dict that was there before the lanes
        add_table(ctx, "ta", [{"a": 1}])
        ctx.rec["methods"]["A"] = 1
        a_wrote.set()

    def tb(ctx):  # lane b: the same, after lane a wrote (add_table made "analysis" in both lanes)
        a_wrote.wait(20)
        add_table(ctx, "tb", [{"b": 2}])
        ctx.rec["methods"]["B"] = 2
        ctx.rec["methods"].pop("gone")

    def todo(lane_a, lane_b):
        return [Stage("ta", ta, lane=lane_a), Stage("tb", tb, lane=lane_b)]

    def ctx():
        c = _ctx()
        c.rec["methods"]["gone"] = 0
        return c

    serial = _run(monkeypatch, todo(None, None), ctx())
    assert list(serial.rec["analysis"]["tables"]) == ["ta", "tb"] and list(serial.rec["methods"]) == ["A", "B"]
    for cores in (2, 1):
        a_wrote.clear()
        monkeypatch.setattr("aumann.attribution.threads.usable_cores", lambda cores=cores: cores)
        lanes = _run(monkeypatch, todo("a", "b"), ctx())
        assert _dump(lanes) == _dump(serial)  # no table lost, the same key order


@pytest.mark.parametrize("cores", [2, 1])
def test_an_interrupt_on_a_lanes_own_thread_is_raised_not_swallowed(monkeypatch, cores):
    monkeypatch.setattr("aumann.attribution.threads.usable_cores", lambda: cores)
    ran: list[str] = []

    def interrupt(ctx):
        raise KeyboardInterrupt

    todo = [Stage("a1", lambda ctx: ran.append("a1"), lane="a"), Stage("b1", interrupt, lane="b"),
            Stage("b2", lambda ctx: ran.append("b2"), lane="b"), Stage("after", lambda ctx: ran.append("after"))]
    with pytest.raises(KeyboardInterrupt):  # on two cores lane b's thread died and the study went on
        _run(monkeypatch, todo, _ctx())
    assert ran in (["a1"], [])  # lane a may see the stop before its stage starts; nothing after b1 runs


@pytest.mark.parametrize("lane", [None, "b"])
def test_sys_exit_in_a_stage_is_a_failure_of_that_stage_not_the_end_of_the_process(monkeypatch, lane):
    import sys

    monkeypatch.setattr("aumann.attribution.threads.usable_cores", lambda: 2)
    todo = [Stage("a1", lambda ctx: ctx.rec.update(a=1), lane="a" if lane else None),
            Stage("quits", lambda ctx: sys.exit(0), lane=lane), Stage("after", lambda ctx: ctx.rec.update(b=2))]
    ctx = _run(monkeypatch, todo, _ctx())
    assert ctx.stages["quits"]["status"] == "failed" and ctx.stages["quits"]["error"] == "StudyError"
    assert "sys.exit(0)" in ctx.stages["quits"]["message"] and ctx.rec["a"] == 1 and ctx.rec["b"] == 2
    with pytest.raises(StudyError, match=r"'quits'.*sys\.exit\(0\)"):
        _run(monkeypatch, todo, _ctx(strict=True))
