"""Events → dense per-agent, per-step features and the alive mask (the one builder every reader feeds).

:class:`PanelBuilder` takes :class:`~aumann.data.traces.events.EventBatch` es in log order and keeps
dense accumulators of shape (steps × agents × k) that grow as new agents and steps appear (memory is
that of the panel it will return, plus the agent-id map); :meth:`PanelBuilder.finish` turns them into
a :class:`~aumann.panel.Panel`:

* ``count`` / ``count_each`` / ``sum``: totals per (step, agent); ``mean``: sum / number of events with
  a value (0 where none); ``last``: the value of the agent's last event in the step in log order (with
  ``fill = "carry"``, the default for ``last``, earlier values carry forward); ``cumulative``: running
  totals over steps;
* ``exposure``: Σ over the agent's edge targets j (edges with ``since`` ≤ t) of feature ``of`` of j at t;
* ``alive``: :meth:`alive_mask` (the rule of :class:`~aumann.data.traces.spec.AliveSpec`).

The panel's steps run from the first to the last step seen (or ``step.start`` … ``step.stop``), every
step in between included: a step without events is a step where nothing happened. Agents are
sorted by id.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from aumann.data.traces.events import EventBatch, StepCoder
from aumann.data.traces.idtext import id_text
from aumann.data.traces.spec import TraceSpec
from aumann.errors import TraceError, TraceSpecError


class _Grid:
    """Growable dense arrays [T, N, k] sharing one step offset and one agent capacity."""

    def __init__(self) -> None:
        self.t0: int | None = None  # raw step of row 0
        self.T = 0
        self.N = 0
        self.arrays: dict[str, np.ndarray] = {}
        self.fill: dict[str, Any] = {}

    def add_array(self, name: str, k: int, dtype: Any, fill: Any = 0) -> None:
        self.arrays[name] = np.full((max(self.T, 1), max(self.N, 1), k), fill, dtype=dtype)
        self.fill[name] = fill

    def grow_k(self, name: str, k: int) -> None:
        a = self.arrays[name]
        if a.shape[2] >= k:
            return
        new = np.full((a.shape[0], a.shape[1], max(k, 2 * a.shape[2])), self.fill[name], dtype=a.dtype)
        new[:, :, : a.shape[2]] = a
        self.arrays[name] = new

    def ensure(self, lo: int, hi: int, n: int) -> None:
        """Room for raw steps lo … hi (besides those already held) and n agents."""
        if self.t0 is None:
            self.t0, self.T = lo, 0
        cap_t, cap_n = next(iter(self.arrays.values())).shape[:2]
        front = max(0, self.t0 - lo)
        new_t0 = self.t0 - front
        need_t = max(self.t0 + self.T, hi + 1) - new_t0
        if front or need_t > cap_t or n > cap_n:
            new_cap_t = max(need_t, front + cap_t)
            if need_t > cap_t:
                new_cap_t = max(new_cap_t, int(cap_t * 1.5) + 1)
            new_cap_n = cap_n if n <= cap_n else max(n, 2 * cap_n)
            for name, a in self.arrays.items():
                b = np.full((new_cap_t, new_cap_n, a.shape[2]), self.fill[name], dtype=a.dtype)
                b[front: front + a.shape[0], : a.shape[1]] = a
                self.arrays[name] = b
            self.t0 = new_t0
        self.T = need_t
        self.N = max(self.N, n)


class PanelBuilder:
    """Accumulate events by the spec; :meth:`finish` returns the panel (see the module docstring)."""

    def __init__(self, spec: TraceSpec) -> None:
        self.spec = spec
        self.coder = StepCoder(spec)
        self.ids: dict[Any, int] = {}
        self.id_list: list[Any] = []
        self._known: pd.Index | None = None
        self.actions: dict[str, int] = {}
        self.events = 0
        self.merged_ids = 0  # ids written two ways (1 and "1"), read as one agent (finish)
        self.used = 0
        self.no_action = 0  # events without a value in the action field
        self.valued = {f: 0 for f in spec.fields()}  # events with a value in each numeric field
        self.grid = _Grid()
        g = self.grid
        g.add_array("present", 1, np.int32)
        self.leave_codes = set(spec.alive.leave_actions)
        if self.leave_codes:
            g.add_array("leave", 1, np.bool_, False)
        self.plan: list[tuple[int, Any]] = []  # (feature index, spec) of accumulated features
        for j, f in enumerate(spec.features):
            if f.kind == "exposure":
                continue
            if f.kind == "count_each":
                g.add_array(f"f{j}", 8, np.float64)
            elif f.kind == "mean":
                g.add_array(f"f{j}", 1, np.float64)
                g.add_array(f"n{j}", 1, np.float64)
            elif f.kind == "last":
                g.add_array(f"f{j}", 1, np.float64)
                g.add_array(f"k{j}", 1, np.float64, -1.0)
            else:
                g.add_array(f"f{j}", 1, np.float64)
            self.plan.append((j, f))
        #: count_each action labels spelling a BLOB's literal (X'FF01'): the bytes of the BLOB they came from, or None
        #: where they came from text
        self._x_actions: dict[str, bytes | None] = {}
        act = spec.action
        self.include = None if act is None or act.include is None else set(act.include)
        self.exclude = set() if act is None else set(act.exclude)

    # ------------------------------------------------------------------ ingest
    def _agent_index(self, agent: np.ndarray) -> np.ndarray:
        """Panel positions of a batch's agent ids (new ids get the next positions, in order of appearance)."""
        codes, uniq = _factorize(agent)
        if self._known is None or len(self._known) != len(self.id_list):
            self._known = pd.Index(self.id_list, dtype=object)
        pos = self._known.get_indexer(pd.Index(uniq, dtype=object))  # hashed lookups in C
        new = np.flatnonzero(pos < 0)
        if new.size:
            ids, lst = self.ids, self.id_list
            for u in new.tolist():
                v = uniq[u]
                v = v.item() if hasattr(v, "item") else v
                i = ids.get(v)
                if i is None:
                    i = len(lst)
                    if i >= self.spec.max_agents:
                        raise TraceError(f"more than max_agents = {self.spec.max_agents:,} distinct agents; raise "
                                         "max_agents in the spec if you mean it (is the agent field right?)")
                    ids[v] = i
                    lst.append(v)
                pos[u] = i
        return pos.astype(np.int64)[codes]

    def _blob_or_text(self, name: str, batch: EventBatch, action: np.ndarray, sel: np.ndarray) -> None:
        """Refuse a count_each action label ``X'FF01'`` that both a BLOB action (bytes that are no UTF-8 text, labelled
        by SQLite's literal of them) and a text action spelling that literal give, in this batch or across batches:
        they were one feature, their events added up, silently (as such an agent id and its text are refused)."""
        blob = None
        if batch.blob_actions is not None and name in batch.blob_actions[1]:
            mask, raw = batch.blob_actions
            here = sel & (action == name)
            if (here & mask).any():
                blob = raw[name]
                if (here & ~mask).any():  # both in this batch
                    self._blob_action_twin(blob, name)
        seen = self._x_actions.setdefault(name, blob)
        if (seen is None) != (blob is None):
            self._blob_action_twin(seen if blob is None else blob, name)

    def _blob_action_twin(self, blob: bytes | None, name: str) -> None:
        field = None if self.spec.action is None else self.spec.action.field
        raise TraceError(f"actions {blob!r} (bytes that are no UTF-8 text) and {name!r} (text) in field {field!r} "
                         f"would be one count_each feature {name!r}: bytes that are no UTF-8 text are labelled by "
                         "SQLite's literal of them, X'...', and an action written as that text is another action; "
                         "rewrite one of them")

    def add(self, batch: EventBatch | None) -> None:
        if batch is None or len(batch) == 0:
            return
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum is refused in finish, by its place
            self._add(batch)

    def _add(self, batch: EventBatch) -> None:
        n = len(batch)
        a = self._agent_index(batch.agent)
        lo, hi = int(batch.step.min()), int(batch.step.max())
        g = self.grid
        t0 = g.t0 if g.t0 is not None else lo
        self._check_span(min(lo, t0), max(hi, t0 + g.T - 1))
        g.ensure(lo, hi, len(self.id_list))
        t = batch.step - g.t0
        self.events += n
        pres = g.arrays["present"]
        np.add.at(pres[:, :, 0], (t, a), 1)
        action = batch.action
        if self.leave_codes and action is not None:
            lv = np.fromiter((x in self.leave_codes for x in action), dtype=bool, count=n)
            if lv.any():
                g.arrays["leave"][t[lv], a[lv], 0] = True
        usable = np.ones(n, dtype=bool)
        if action is not None and (self.include is not None or self.exclude):
            usable = np.fromiter(((x is not None and (self.include is None or x in self.include)
                                   and x not in self.exclude) for x in action), dtype=bool, count=n)
        self.used += int(usable.sum())
        if action is not None:
            self.no_action += int((action == None).sum())  # noqa: E711
        for name, v in batch.values.items():
            self.valued[name] = self.valued.get(name, 0) + int(n - np.isnan(v).sum())
        for j, f in self.plan:
            sel = usable
            if f.actions is not None:
                wanted = set(f.actions)
                sel = sel & np.fromiter((x in wanted for x in action), dtype=bool, count=n)
            if f.kind == "count":
                if sel.any():
                    np.add.at(g.arrays[f"f{j}"][:, :, 0], (t[sel], a[sel]), 1.0)
            elif f.kind == "count_each":
                sel = sel & (action != None)  # noqa: E711
                if not sel.any():
                    continue
                codes, uniq = _factorize(action[sel])
                col = np.empty(len(uniq), dtype=np.int64)
                known = len(self.actions)
                for u, name in enumerate(uniq.tolist()):
                    k = self.actions.get(name)
                    if k is None:
                        k = self.actions[name] = len(self.actions)
                    col[u] = k
                    if name[:2] == "X'":  # (a label a BLOB action gets: per distinct action, not per event)
                        self._blob_or_text(name, batch, action, sel)
                if len(self.actions) > known:  # new features: the panel widens (a bare MemoryError for 32 GiB, or
                    self._check_span(g.t0, g.t0 + g.T - 1)  # the memory taken, where max_cells said 16 GB at most)
                g.grow_k(f"f{j}", len(self.actions))
                np.add.at(g.arrays[f"f{j}"], (t[sel], a[sel], col[codes]), 1.0)
            else:
                v = batch.values[f.field]
                sel = sel & ~np.isnan(v)
                if not sel.any():
                    continue
                ts, as_, vs = t[sel], a[sel], v[sel]
                if f.kind in ("sum", "mean"):
                    np.add.at(g.arrays[f"f{j}"][:, :, 0], (ts, as_), vs)
                    if f.kind == "mean":
                        np.add.at(g.arrays[f"n{j}"][:, :, 0], (ts, as_), 1.0)
                else:  # last: the last event of the cell in log order wins
                    flat = ts * g.arrays[f"f{j}"].shape[1] + as_
                    if batch.order is None:  # the batch, and the batches, in log order
                        _, last = np.unique(flat[::-1], return_index=True)
                        keep = len(flat) - 1 - last
                        seq = float(self.events - n) + keep.astype(np.float64)  # the event's place in the log
                    else:  # events handed over out of log order (spans that waited for their trace's step)
                        order = batch.order[sel]
                        idx = np.lexsort((order, flat))
                        fl = flat[idx]
                        keep = idx[np.r_[fl[1:] != fl[:-1], True]]
                        seq = order[keep]
                        keep = keep[seq >= g.arrays[f"k{j}"][ts[keep], as_[keep], 0]]  # later than what is held
                        seq = order[keep]
                    g.arrays[f"f{j}"][ts[keep], as_[keep], 0] = vs[keep]
                    g.arrays[f"k{j}"][ts[keep], as_[keep], 0] = seq

    def _check_span(self, lo: int, hi: int) -> None:
        """Refuse, before anything is allocated, a panel over steps ``lo`` … ``hi`` (widened to step.start /
        step.stop, which stretch the panel too) beyond max_steps or max_cells."""
        st = self.spec.step
        lo = lo if st.start is None else min(lo, st.start)
        hi = hi if st.stop is None else max(hi, st.stop)
        span = hi - lo + 1
        bounds = "" if st.start is None and st.stop is None else " with step.start / step.stop"
        if span > self.spec.max_steps:
            raise TraceError(f"the trace spans {span:,} steps{bounds}, more than max_steps = {self.spec.max_steps:,} "
                             f"(steps {lo} … {hi}): is step.bin too small, step.start / step.stop too wide, or the "
                             "step field not a step? Raise max_steps in the spec if you mean it")
        cells = span * len(self.id_list) * max(1, self._width())
        if cells > self.spec.max_cells:
            each = (f" (count_each makes one feature per distinct action: {len(self.actions):,} so far; is the "
                    "[action] field an action?)" if any(f.kind == "count_each" for f in self.spec.features) else "")
            raise TraceError(f"the panel would hold {cells:,} values (steps × agents × features), more than "
                             f"max_cells = {self.spec.max_cells:,}; bin coarser, build fewer features or raise "
                             f"max_cells in the spec{each}")

    def _width(self) -> int:
        w = 0
        for f in self.spec.features:
            w += max(1, len(self.actions)) if f.kind == "count_each" else 1
        return w

    # ------------------------------------------------------------------ finish
    def alive_mask(self, present: np.ndarray) -> np.ndarray:
        """alive[t, i] by the spec's [alive] rule (docs/traces.md); ``present`` = events per (t, i)."""
        T, N = present.shape
        al = self.spec.alive
        has = present > 0
        seen = np.logical_or.accumulate(has, axis=0)
        alive = np.ones((T, N), dtype=bool) if al.born == "start" else seen.copy()
        if self.leave_codes:
            leave = self.grid.arrays["leave"][: T, : N, 0]
            gone = np.zeros(N, dtype=bool)
            for t in range(T):
                if t > 0:
                    gone = (gone | leave[t - 1]) & ~has[t]
                alive[t] &= ~gone
        if al.inactive_after is not None:
            k = al.inactive_after
            c = np.cumsum(has, axis=0, dtype=np.int64)
            window = c - np.concatenate([np.zeros((k, N), dtype=np.int64), c[:-k]])[: T] if T > k else c
            alive &= window > 0
        return alive

    def _check_finite(self, values: np.ndarray, names: list[str], lo: int, dtype: str) -> None:
        """Refuse a panel value beyond the dtype's range by its feature, agent and step: the values read are finite
        (an infinite one is refused as it is read), so it is a sum, running total or exposure that overflows
        float64, or a value beyond float32 (``dtype = "float32"``). The panel's 'NaN/inf value(s) in live rows'
        said the trace held such values, and numpy warned of an overflow in ``add.at``."""
        bad = ~np.isfinite(values)
        if not bad.any():
            return
        t, i, k = (int(x) for x in np.argwhere(bad)[0])
        who = f"agent #{i} (real_people: ids are not shown)" if self.spec.real_people else \
            f"agent {self.id_list[i]!r}"
        where = (f"feature {names[k]!r} of {who} at step {self.coder.label(lo + t)!r} ({int(bad.sum()):,} value(s) "
                 "in all)")
        if dtype == "float32":
            raise TraceError(f"{where} is beyond float32's range (±3.4e38): dtype = 'float64' in the spec holds it")
        raise TraceError(f"{where} is beyond float64's range (±1.8e308): the values read are finite, but their sum, "
                         "running total or exposure overflows; scale the field down")

    def _merge_same_labels(self) -> int:
        """Merge the agents whose ids are one label in the panel: an id written as a number in some records and as
        text in others (``1`` and ``"1"``, an OpenTelemetry intValue and stringValue) was two agents, both labelled
        ``"1"``, and the panel refused the repeated id. The number is kept as the id where there is one; counts and
        sums add up, ``last`` takes the later event in log order, a leave action of either counts. Returns how many
        ids were merged into another. Ids that are one label but two agents are a :class:`TraceError`: ``'a'`` and
        ``'a\\0'`` (numpy's text drops trailing NULs), and bytes that are no UTF-8 text beside the text of their
        label (``b'\\xff\\x01'`` and ``"X'FF01'"``)."""
        ids = _plain_ids(self.id_list)
        if len(np.unique(ids)) == len(ids):
            return 0
        groups: dict[Any, list[int]] = {}
        for i, label in enumerate(ids.tolist()):
            groups.setdefault(label, []).append(i)
        g = self.grid
        lasts = {f"f{j}": f"k{j}" for j, f in self.plan if f.kind == "last"}
        target_of = np.arange(len(ids))
        drop: list[int] = []
        for label, members in groups.items():
            if len(members) == 1:
                continue
            if len({id_text(self.id_list[i]) for i in members}) > 1:  # numpy's text drops trailing NULs: 'a' and 'a\0'
                shown = "not shown (real_people)" if self.spec.real_people else \
                    " and ".join(repr(self.id_list[i]) for i in members)
                one = "one label" if self.spec.real_people else f"one label {label!r}"  # (the id itself, less NULs)
                raise TraceError(f"agent ids {shown} in field {self.spec.agent.field!r} would be {one} in the panel: "
                                 "an id cannot end with a NUL character")
            blobs = [i for i in members if isinstance(self.id_list[i], bytes | bytearray)]
            if blobs and len(blobs) < len(members):
                # a BLOB that is no UTF-8 text is labelled X'FF01'; text spelling that label is another id (both were
                # one agent, their events added up and counted as merged_ids, "a number and text", silently)
                text = next(i for i in members if i not in blobs)
                shown = "not shown (real_people)" if self.spec.real_people else (
                    f"{bytes(self.id_list[blobs[0]])!r} (bytes that are no UTF-8 text) and {self.id_list[text]!r} "
                    "(text)")
                one = "one label" if self.spec.real_people else f"one label {label!r}"
                raise TraceError(f"agent ids {shown} in field {self.spec.agent.field!r} would be {one} in the panel: "
                                 "bytes that are no UTF-8 text are labelled by SQLite's literal of them, X'...', and "
                                 "an id written as that text is another agent; rewrite one of them")
            t = next((i for i in members if not isinstance(self.id_list[i], str)), members[0])
            for o in members:
                if o == t:
                    continue
                for name, a in g.arrays.items():
                    if name in lasts.values():
                        continue
                    if name in lasts:
                        k = g.arrays[lasts[name]]
                        later = k[:, o] > k[:, t]
                        a[:, t] = np.where(later, a[:, o], a[:, t])
                        k[:, t] = np.maximum(k[:, t], k[:, o])
                    elif a.dtype == np.bool_:
                        a[:, t] |= a[:, o]
                    else:
                        a[:, t] += a[:, o]
                target_of[o] = t
                drop.append(o)
        keep = np.ones(next(iter(g.arrays.values())).shape[1], dtype=bool)
        keep[drop] = False
        for name in g.arrays:
            g.arrays[name] = g.arrays[name][:, keep]
        position = np.cumsum(keep) - 1
        self.ids = {v: int(position[target_of[i]]) for v, i in self.ids.items()}
        self.id_list = [v for i, v in enumerate(self.id_list) if keep[i]]
        self._known = None
        g.N = len(self.id_list)
        return len(drop)

    def finish(self, *, edges: Any = None, meta: dict[str, Any] | None = None):
        """The panel. ``edges(ids, coder) -> (source positions, target positions, since steps or None)`` gives
        the edges of each exposure feature (called once per distinct edges spec)."""
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowing total is refused by its place
            return self._finish(edges=edges, meta=meta)

    def _no_actions(self) -> None:
        """Refuse a count_each feature that counted no action: a misspelled [action] field (no event holds it) or an
        include list that matches nothing made it build no feature at all (alone, numpy's bare "need at least one
        array to stack"; beside other features, the per-action counts were missing without a word)."""
        act = self.spec.action
        field = act.field if act is not None else "?"
        if self.no_action == self.events:
            why = (f"none of the {self.events:,} event(s) has a value in the action field {field!r} (is the field "
                   "right?)")
        else:
            lists = ", ".join(f"{k} = {v}" for k, v in (("include", act.include if act else None),
                                                        ("exclude", act.exclude if act else None)) if v)
            why = (f"[action] {lists} left out every action of the {self.events - self.no_action:,} event(s) with "
                   f"one in field {field!r}" if lists else
                   f"no action of the {self.events:,} event(s) is counted (every event with one has a feature's "
                   "actions list?)")
        raise TraceSpecError(f"the count_each feature counted no action, so it builds no feature: {why}")

    def _finish(self, *, edges: Any, meta: dict[str, Any] | None):
        from aumann.panel import Panel

        g = self.grid
        if self.events == 0 or g.t0 is None:
            raise TraceError("no usable events: every record was skipped or filtered (see the counts above)")
        self.merged_ids = self._merge_same_labels()
        st = self.spec.step
        lo = g.t0 if st.start is None else st.start
        hi = g.t0 + g.T - 1 if st.stop is None else st.stop
        self._check_span(min(lo, g.t0), max(hi, g.t0 + g.T - 1))
        g.ensure(min(lo, g.t0), max(hi, g.t0 + g.T - 1), len(self.id_list))
        rows = slice(lo - g.t0, hi - g.t0 + 1)
        N = len(self.id_list)
        T = hi - lo + 1
        present = g.arrays["present"][rows, :N, 0]
        names: list[str] = []
        cols: list[np.ndarray] = []
        by_name: dict[str, np.ndarray] = {}
        exposures: list[tuple[int, Any]] = []
        for j, f in enumerate(self.spec.features):
            if f.kind == "exposure":
                names.append(f.label())
                cols.append(np.zeros((T, N)))
                exposures.append((len(cols) - 1, f))
                continue
            a = g.arrays[f"f{j}"][rows, :N]
            if f.kind == "count_each":
                order = sorted(self.actions)
                if not order:
                    self._no_actions()
                for name in order:
                    x = a[:, :, self.actions[name]]
                    x = np.cumsum(x, axis=0) if f.cumulative else x
                    names.append(f"{f.prefix}{name}")
                    cols.append(x)
                    by_name[names[-1]] = x
                continue
            x = a[:, :, 0]
            if f.kind == "mean":
                cnt = g.arrays[f"n{j}"][rows, :N, 0]
                x = np.divide(x, cnt, out=np.zeros_like(x), where=cnt > 0)
            elif f.kind == "last" and (f.fill or "carry") == "carry":
                has = g.arrays[f"k{j}"][rows, :N, 0] >= 0
                src = np.where(has, np.arange(T)[:, None], -1)
                src = np.maximum.accumulate(src, axis=0)
                x = np.where(src >= 0, x[np.clip(src, 0, None), np.arange(N)[None, :]], 0.0)
            elif f.cumulative:
                x = np.cumsum(x, axis=0)
            names.append(f.label())
            cols.append(x)
            by_name[names[-1]] = x
        dup = sorted(n for n, k in Counter(names).items() if k > 1)  # (names.count per name: O(D²), 50,000: 26 s)
        if dup:
            raise TraceSpecError(f"features {dup} are built twice (a count_each action named like another feature?); "
                                 "set a count_each prefix or rename the feature")
        edge_counts: dict[str, Any] = {}
        read_edges: dict[str, Any] = {}
        for pos, f in exposures:
            src = by_name.get(f.of)
            if src is None:
                raise TraceSpecError(f"exposure feature {f.label()!r}: of = {f.of!r} names no built feature; the "
                                     f"features are {sorted(by_name)}")
            if edges is None:
                raise TraceSpecError(f"exposure feature {f.label()!r}: this reader has no edges")
            key = f.edges.model_dump_json()  # one read per distinct edges spec: its bad rows counted once
            if key not in read_edges:
                read_edges[key] = edges(f.edges, self.ids, self.coder)
            s, t_, since, info = read_edges[key]
            cols[pos] = _exposure(src, s, t_, since, lo)
            edge_counts[f.label()] = info
        dtype = np.float32 if self.spec.dtype == "float32" else np.float64
        values = np.stack(cols, axis=2)
        self._check_finite(values, names, lo, "float64")
        if dtype != values.dtype:
            with np.errstate(over="ignore"):
                values = values.astype(dtype)
            self._check_finite(values, names, lo, "float32")
        alive = self.alive_mask(present)
        ids = _plain_ids(self.id_list)
        order = np.argsort(ids, kind="stable")  # agents sorted by id: the same panel whatever the file order
        if not np.array_equal(order, np.arange(N)):
            ids, values, alive = ids[order], values[:, order], alive[:, order]
        steps = [self.coder.label(s) for s in range(lo, hi + 1)]
        m = dict(meta or {})
        if edge_counts:
            m["edges"] = edge_counts
        return Panel(values, features=names, agent_ids=ids, steps=steps,
                     alive=None if alive.all() else alive, meta=m)


def _exposure(x: np.ndarray, src: np.ndarray, tgt: np.ndarray, since: np.ndarray | None, lo: int) -> np.ndarray:
    """E[t, i] = Σ_{edges i→j, since ≤ t} x[t, j] (steps relative to ``lo``)."""
    from scipy import sparse

    T, N = x.shape
    out = np.zeros((T, N))
    if src.size == 0:
        return out
    if since is None:
        A = sparse.csr_matrix((np.ones(src.size), (src, tgt)), shape=(N, N))
        return np.asarray((A @ x.T).T)
    start = np.clip(since - lo, 0, None)
    order = np.argsort(start, kind="stable")
    src, tgt, start = src[order], tgt[order], start[order]
    bounds = np.searchsorted(start, np.arange(T), side="right")
    for t in range(T):
        k = int(bounds[t])
        if k == 0:
            continue
        out[t] = np.bincount(src[:k], weights=x[t, tgt[:k]], minlength=N)
    return out


def _text_merges_at_nul() -> bool:
    """Whether this pandas' ``factorize`` takes text that differs only after a NUL character as one value (pandas
    2.x and 3.0.x hash an array of only strings as C strings, which end at the first NUL: ``'a'`` and ``'a\\0'``,
    ``'a\\0b'`` and ``'a\\0c'`` one value). Asked of pandas itself, once, rather than read off its version."""
    return len(pd.factorize(np.array(["a", "a\0b"], dtype=object))[1]) == 1


_NUL_MERGES = _text_merges_at_nul()
#: a value that is no string: appended to an array of text, it makes pandas hash the Python objects (exact equality)
_NOT_TEXT = object()


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, uniques in order of appearance) of ``values``, every distinct value its own code (``None`` one too):
    ``pd.factorize``, except that where this pandas merges text at a NUL character (:func:`_text_merges_at_nul`)
    an object array is factorized with one non-string value appended, which pandas hashes as Python objects, and
    that value's code is dropped again (it is the last to appear: the last unique)."""
    if not (_NUL_MERGES and values.dtype == object):
        return pd.factorize(values, use_na_sentinel=False)
    codes, uniq = pd.factorize(np.append(values, np.array([_NOT_TEXT], dtype=object)), use_na_sentinel=False)
    return codes[:-1], uniq[:-1]


_INT64 = np.iinfo(np.int64)
#: the most a panel's text ids may take as numpy stores them (each at the width of the longest, 4 bytes a character)
#: where that is also over 16 times their own text: one overlong id among many agents
_ID_PAD_BYTES = 256 * 2**20


def _plain_ids(ids: list[Any]) -> np.ndarray:
    """Agent ids as one numpy type: integers that all fit an int64 stay integers; mixed types, and integers
    beyond int64 (a 2⁷⁰ in a span, a uint64 column holding 2⁶⁴ − 1, which made ``np.asarray(ids, int64)`` raise
    a bare OverflowError), become text, every digit kept.

    Raises:
        TraceError: the text ids would take more than :data:`_ID_PAD_BYTES` and 16 times their own text: numpy
            stores every id at the width of the longest, so one id of 50,000 characters among 20,000 agents (a
            300 kB CSV) asked for 3.7 GiB, twice over, and ended in numpy's MemoryError (or the machine's OOM).
    """
    if all(isinstance(v, int | np.integer) and not isinstance(v, bool) and _INT64.min <= v <= _INT64.max
           for v in ids):
        return np.asarray(ids, dtype=np.int64)
    texts = [id_text(v) for v in ids]  # bytes that are no UTF-8 text as X'FF01', not Python's "b'\\xff\\x01'"
    sizes = [len(t) for t in texts]
    longest = max(sizes, default=0)
    fixed, own = 4 * longest * len(texts), 4 * sum(sizes)
    if fixed > _ID_PAD_BYTES and fixed > 16 * own:
        raise TraceError(f"the {len(texts):,} agent ids would take {fixed / 2**30:.1f} GiB in the panel, which stores "
                         f"each at the width of the longest ({longest:,} characters; their own text is "
                         f"{own / 2**20:.1f} MiB): an id that long is no agent id (is the agent field right?)")
    return np.asarray(texts, dtype=object).astype(str)


__all__ = ["PanelBuilder"]
