"""Attribution: the one result type (φ over steps × agents, with Δv, efficiency gap and provenance).

φ_{i,t} is agent i's share of the macro change Δv_t = f(z_t) − f(z⁰_t) at step t. Methods that
satisfy efficiency (Aumann–Shapley, Shapley) give Σ_i φ_{i,t} = Δv_t; the efficiency gap
|Σ_i φ_{i,t} − Δv_t| is the practical diagnostic (quadrature error for the path integral, Monte-Carlo
error for nothing — sampled Shapley is efficient per permutation). Aggregations follow by
linearity: Φ_i = Σ_t φ_{i,t} (*who drove it*), Φ_t = Σ_i φ_{i,t} (*when did it turn*), and the
group share R_G = Σ_{i∈G} φ̃_i with φ̃ = φ/Δv.
"""

from __future__ import annotations

import math
import os
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aumann.checks import as_path, refuse_mixed_labels
from aumann.errors import (
    AttributionFileError,
    AumannError,
    IndicatorError,
    OutputError,
    PanelError,
    ShapeError,
    UnknownFeatureError,
    ZeroDeltaVError,
)
from aumann.io import atomic_path, read_npz, safe_component, saved_npz, write_npz
from aumann.labels import plain_labels, refuse_missing_group_labels, unique_labels
from aumann.panel import by_agent_id

_FORMAT = "aumann.attribution/1"


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, str | int | float | bool) or v is None:
        return v
    return repr(v)


#: an efficient method's Σφ missing Δv by more than this share of |Δv| is warned about and flagged in reports
EFFICIENCY_WARN_SHARE = 0.01


@dataclass(frozen=True, eq=False, init=False)
class Attribution:
    """Per-step, per-agent attributions with named axes, diagnostics and provenance.

    Attributes:
        phi: (T, N) attributions φ_{i,t} (axes ``("step", "agent")``).
        delta_v: (T,) Δv_t = f(z_t) − f(z⁰_t).
        f_values: (T,) f(z_t).
        f_baseline: (T,) f(z⁰_t).
        agent_ids, steps, features: axis labels.
        phi_features: (T, N, D) per-feature attributions when asked for, else ``None``.
        stderr: (T, N) standard errors for sampled methods, else ``None``.
        n_evals: evaluations of the value function spent (coalition methods), else ``None``.
        satisfies_efficiency: whether the method satisfies Σ_i φ = Δv by construction.
        method: method name (``"aumann_shapley"``, ``"sampled_shapley"``, ...).
        provenance: method parameters (K, quadrature rule, substitution power, baseline, seed,
            dtype, closed form or path integral, ...).
        groups: agent groups carried over from the panel.
        phi_sums: (T,) Σ_i φ_{i,t}, when the method computed it anyway (the closed forms, the path
            integral): the finiteness check, ``by_step()`` and ``efficiency_gap`` then reuse it instead of
            another pass over φ. Not stored as a field (``dataclasses.replace`` never carries a stale one).

    The arrays are not copied and must not be modified in place.
    """

    phi: np.ndarray
    delta_v: np.ndarray
    f_values: np.ndarray
    f_baseline: np.ndarray
    agent_ids: np.ndarray
    steps: np.ndarray
    features: tuple[str, ...]
    phi_features: np.ndarray | None = None
    stderr: np.ndarray | None = None
    n_evals: int | None = None
    satisfies_efficiency: bool = True
    method: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, np.ndarray] = field(default_factory=dict)
    phi_sums: InitVar[np.ndarray | None] = None
    _phi_sums: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    dims = ("step", "agent")

    def __init__(self, phi: np.ndarray, delta_v: np.ndarray, f_values: np.ndarray, f_baseline: np.ndarray,
                 agent_ids: np.ndarray, steps: np.ndarray, features: tuple[str, ...],
                 phi_features: np.ndarray | None = None, stderr: np.ndarray | None = None, n_evals: int | None = None,
                 satisfies_efficiency: bool = True, method: str = "", provenance: dict[str, Any] | None = None,
                 groups: dict[str, np.ndarray] | None = None, phi_sums: np.ndarray | None = None) -> None:
        # the dataclass's own __init__ for a frozen class sets the 16 fields one object.__setattr__ at a time
        # (~a third of a small attribute() call); one dict update sets the same fields
        self.__dict__.update(
            phi=phi, delta_v=delta_v, f_values=f_values, f_baseline=f_baseline, agent_ids=agent_ids, steps=steps,
            features=features, phi_features=phi_features, stderr=stderr, n_evals=n_evals,
            satisfies_efficiency=satisfies_efficiency, method=method,
            provenance={} if provenance is None else provenance, groups={} if groups is None else groups,
            _phi_sums=None)
        self.__post_init__(phi_sums)

    def __post_init__(self, phi_sums: np.ndarray | None) -> None:
        vectors = (("delta_v", self.delta_v), ("f_values", self.f_values), ("f_baseline", self.f_baseline))
        for name, arr in (("phi", self.phi), *vectors, ("phi_features", self.phi_features), ("stderr", self.stderr)):
            if arr is None:
                continue
            dtype = arr.dtype if arr.__class__ is np.ndarray else np.asarray(arr).dtype
            if dtype.kind not in "fiu":  # complex (the imaginary part would be dropped), strings, objects, bools
                raise ShapeError(f"{name} must hold real numbers; got dtype {dtype}")
        phi = self.phi if isinstance(self.phi, np.ndarray) else np.asarray(self.phi)
        if phi.ndim != 2:
            raise ShapeError(f"phi must have dims {self.dims} (2-D); got shape {phi.shape}")
        T, N = phi.shape
        for name, v in vectors:
            shape = v.shape if isinstance(v, np.ndarray) else np.shape(v)
            if shape != (T,):
                raise ShapeError(f"{name} must have shape (T,) = ({T},); got {shape}")
        if len(self.agent_ids) != N or len(self.steps) != T:
            raise ShapeError(f"labels do not match phi {phi.shape}: {len(self.steps)} steps, "
                             f"{len(self.agent_ids)} agent ids")
        if self.phi_features is not None and self.phi_features.shape != (T, N, len(self.features)):
            raise ShapeError(f"phi_features must be (T, N, D) = {(T, N, len(self.features))}; "
                             f"got {self.phi_features.shape}")
        if self.stderr is not None and np.shape(self.stderr) != (T, N):
            raise ShapeError(f"stderr must be (T, N) = {(T, N)}; got {np.shape(self.stderr)}")
        if phi_sums is not None:
            sums = phi_sums if phi_sums.__class__ is np.ndarray and phi_sums.dtype == np.float64 \
                else np.asarray(phi_sums, dtype=np.float64)
            if sums.shape != (T,):
                raise ShapeError(f"phi_sums must have shape (T,) = ({T},); got {sums.shape}")
            object.__setattr__(self, "_phi_sums", sums)
        self._check_finite()

    def _check_finite(self) -> None:
        """Every method's result passes here: f(z), f(z⁰), Δv, φ (and per-feature φ, standard errors) must be
        finite, else :class:`IndicatorError` naming the indicator and the first bad step."""
        if self._finite_fast():
            return
        parts = [("f(z)", self.f_values), ("f(z⁰)", self.f_baseline), ("Δv", self.delta_v), ("φ", self.phi),
                 ("per-feature φ", self.phi_features), ("stderr", self.stderr)]
        with np.errstate(over="ignore", invalid="ignore"):  # one context for all parts: small calls pay it once
            for label, arr in parts:
                if arr is None:
                    continue
                if label == "φ" and self._phi_sums is not None:
                    arr_sum = self._phi_sums.sum()  # the method's own Σ_i φ: no second pass over φ
                    if np.isfinite(arr_sum):
                        continue
                a = np.asarray(arr)
                total = a.sum() if a.dtype.kind in "fc" else 0.0
                if np.isfinite(total):
                    continue  # a sum is finite only if every element is (NaN and ±inf propagate)
                bad = ~np.isfinite(a)
                if not bad.any():
                    continue  # only the sum overflowed
                self._raise_non_finite(label, bad)

    def _finite_fast(self) -> bool:
        """The common case of :meth:`_check_finite` in a few operations: True when f(z), f(z⁰), Δv and
        Σ_i φ (the method's own sums) are finite Python floats — a float is finite only if every term
        of the sum it came from is — and there are no per-feature φ or standard errors to look at.
        False means "not shown here": the full check then decides (and names what is not finite)."""
        sums = self._phi_sums
        if sums is None or self.phi_features is not None or self.stderr is not None or len(sums) > 64:
            return False
        fv, fb, dv = self.f_values, self.f_baseline, self.delta_v
        if fv.__class__ is not np.ndarray or fb.__class__ is not np.ndarray or dv.__class__ is not np.ndarray:
            return False
        # real dtypes only (checked above): the values are Python floats or ints
        return all(map(math.isfinite, [*fv.tolist(), *fb.tolist(), *dv.tolist(), *sums.tolist()]))

    def _raise_non_finite(self, label: str, bad: np.ndarray) -> None:
        prov = self.provenance or {}
        kind, name = ("indicator", prov["indicator"]) if prov.get("indicator") else ("game", prov.get("game", "?"))
        t = int(np.argwhere(bad)[0][0])
        step = self.steps[t].item() if hasattr(self.steps[t], "item") else self.steps[t]
        where = f"step {step!r}"
        if bad.ndim >= 2:
            i = int(np.argwhere(bad)[0][1])
            agent = self.agent_ids[i].item() if hasattr(self.agent_ids[i], "item") else self.agent_ids[i]
            where += f", agent {agent!r}"
        fv, fb = float(np.asarray(self.f_values)[t]), float(np.asarray(self.f_baseline)[t])
        raise IndicatorError(
            f"{self.method or 'attribution'} of {kind} {name!r}: {label} is NaN/inf at {where} "
            f"({int(bad.sum())} non-finite value(s); f(z) = {fv!r}, f(z⁰) = {fb!r} at that step). The indicator "
            "overflows or is undefined on this input (features near 1e300? heat with Π_d m_d ≤ −1?); rescale the "
            "features or change the baseline"
        )

    # ------------------------------------------------------------------ diagnostics
    @property
    def T(self) -> int:
        return self.phi.shape[0]

    @property
    def N(self) -> int:
        return self.phi.shape[1]

    @property
    def efficiency_gap(self) -> np.ndarray:
        """(T,) |Σ_i φ_{i,t} − Δv_t|."""
        return np.abs(self._step_sums() - self.delta_v)

    def _step_sums(self) -> np.ndarray:
        return self.phi.sum(axis=1) if self._phi_sums is None else self._phi_sums

    @property
    def max_efficiency_gap(self) -> float:
        """The worst step's efficiency gap."""
        return float(self.efficiency_gap.max())

    @property
    def relative_efficiency_gap(self) -> np.ndarray:
        """(T,) |Σ_i φ − Δv| / max(|Δv|, tiny); the diagnostic for choosing K."""
        scale = np.maximum(np.abs(self.delta_v), np.finfo(np.float64).tiny)
        return self.efficiency_gap / scale

    def large_efficiency_gap(self, share: float = EFFICIENCY_WARN_SHARE) -> np.ndarray:
        """(T,) bool: the steps where an efficient method's Σ_i φ misses Δv by more than ``share`` of |Δv|
        (and by more than round-off, 1e-9 of |f|); all False for methods that are not efficient."""
        if not self.satisfies_efficiency:
            return np.zeros(self.T, dtype=bool)
        roundoff = 1e-9 * np.maximum(np.abs(self.f_values), np.abs(self.f_baseline))
        gap = self.efficiency_gap
        return (gap > share * np.abs(self.delta_v)) & (gap > roundoff)

    # ------------------------------------------------------------------ normalisation and aggregation
    def shares(self) -> np.ndarray:
        """(T, N) normalised attributions φ̃ = φ / Δv (sum to one per step for efficient methods).

        Raises:
            ZeroDeltaVError: at steps where Δv = 0 (nothing to normalise by).
        """
        zero = self.delta_v == 0
        if np.any(zero):
            bad = [self.steps[t].item() if hasattr(self.steps[t], "item") else self.steps[t]
                   for t in np.nonzero(zero)[0][:5]]
            raise ZeroDeltaVError(
                f"cannot normalise by Δv = f(z) − f(z⁰) = 0 at {int(zero.sum())} step(s), e.g. {bad}; "
                "use .phi (unnormalised) or another baseline"
            )
        return self.phi / self.delta_v[:, None]

    def by_agent(self, labels: bool = False):
        """(N,) Φ_i = Σ_t φ_{i,t}: who drove it; ``labels=True``: a pandas Series indexed by agent id."""
        out = self.phi.sum(axis=0)
        if not labels:
            return out
        import pandas as pd

        return pd.Series(out, index=pd.Index(self.agent_ids, name="agent"), name="phi")

    def by_step(self, labels: bool = False):
        """(T,) Φ_t = Σ_i φ_{i,t}: when did it turn; ``labels=True``: a pandas Series indexed by step label."""
        out = self._step_sums().copy()
        if not labels:
            return out
        import pandas as pd

        return pd.Series(out, index=pd.Index(self.steps, name="step"), name="phi")

    def _group_labels(self, group: str | np.ndarray) -> np.ndarray:
        if isinstance(group, str):
            if group not in self.groups:
                raise UnknownFeatureError(f"unknown group {group!r}; this result has groups {list(self.groups)}")
            return self.groups[group]
        if np.ndim(group) == 0 or isinstance(group, Mapping):  # group_shares(3), group_shares({"a": 1})
            raise ShapeError(f"group must be the name (text) of one of this result's groups "
                             f"{list(self.groups)} or one label per agent (N = {self.N}); got "
                             f"{type(group).__name__} {str(group)[:80]!r}")
        group = by_agent_id(group, self.agent_ids, "group labels")
        try:
            labels = np.asarray(group)
        except (ValueError, TypeError) as exc:
            raise ShapeError(f"group labels must be one label per agent (N = {self.N}): {exc}") from exc
        if labels.shape != (self.N,):
            raise ShapeError(f"group labels must have shape (N,) = ({self.N},); got {labels.shape}")
        # the rule of Panel(groups=...): a missing label (None, NaN) is refused naming its agents; a NaN label is not
        # equal to itself (its agents dropped out of every share, which then summed to < 1), None became a group
        # 'None'; labels of other mixed types (a date among text) are compared as text
        refuse_missing_group_labels(group, labels, "group labels", self.agent_ids)
        plain_labels(labels, "group labels")
        # 1 and '1' are two groups, not one
        refuse_mixed_labels(group, labels, "group labels", error=PanelError, numbers_only=True)
        return labels.astype(str) if labels.dtype == object else labels

    def group_shares(self, group: str | np.ndarray, *, per_step: bool = False) -> dict[Hashable, Any]:
        """R_G: the share of the normalised attribution carried by each group label.

        With ``per_step=False`` (default) the shares are of the whole run, Σ_{t, i∈G} φ / Σ_t Δv;
        with ``per_step=True`` each label maps to a (T,) array of per-step shares. Shares of
        signed indicators (var, gini) are net shares and may leave [0, 1].
        """
        labels = self._group_labels(group)
        if per_step:
            shares = self.shares()
            return {_key(g): shares[:, idx].sum(axis=1) for g, idx in group_members(labels)}
        total = float(self.delta_v.sum())
        if total == 0:
            raise ZeroDeltaVError("cannot normalise group shares: Σ_t Δv_t = 0")
        return group_shares(self.by_agent(), labels, total=total)

    def group_totals(self, group: str | np.ndarray) -> dict[Hashable, np.ndarray]:
        """Unnormalised per-step group sums Σ_{i∈G} φ_{i,t}, as (T,) arrays."""
        labels = self._group_labels(group)
        return {_key(g): self.phi[:, idx].sum(axis=1) for g, idx in group_members(labels)}

    def feature_phi(self, name: str) -> np.ndarray:
        """(T, N) attributions of one feature (needs ``per_feature=True``)."""
        if self.phi_features is None:
            raise UnknownFeatureError("per-feature attributions were not computed; call attribute(..., "
                                      "per_feature=True)")
        if name not in self.features:
            raise UnknownFeatureError(f"unknown feature {name!r}; features are {list(self.features)}")
        return self.phi_features[:, :, self.features.index(name)]

    # ------------------------------------------------------------------ export
    def to_pandas(self, *, include_ids: bool = True):
        """Long table: one row per (step, agent) with φ (and stderr, per-feature φ, groups)."""
        import pandas as pd

        T, N = self.phi.shape
        cols: dict[str, Any] = {
            "step": np.repeat(self.steps, N),
            "agent": np.tile(self.agent_ids if include_ids else np.arange(N), T),
            "phi": self.phi.reshape(-1),
        }
        if self.stderr is not None:
            cols["stderr"] = np.asarray(self.stderr).reshape(-1)
        if self.phi_features is not None:
            for d, name in enumerate(self.features):
                cols[f"phi_{name}"] = self.phi_features[:, :, d].reshape(-1)
        for g, labels in self.groups.items():
            cols[f"group_{g}"] = np.tile(labels, T)
        return pd.DataFrame(cols)

    def to_xarray(self):
        """An ``xarray.Dataset``: ``phi`` (step, agent), ``stderr`` (step, agent) for sampled methods,
        ``phi_features`` (step, agent, feature) when computed, ``delta_v``, ``f_values`` and
        ``f_baseline`` (step); groups as ``group_<name>`` coordinates on agent; method, n_evals and
        provenance (JSON) in ``attrs``. Needs the ``xarray`` extra."""
        import json

        from aumann.panel import xarray_module

        xr = xarray_module()
        data: dict[str, Any] = {"phi": (("step", "agent"), self.phi), "delta_v": ("step", self.delta_v),
                                "f_values": ("step", self.f_values), "f_baseline": ("step", self.f_baseline)}
        if self.stderr is not None:
            data["stderr"] = (("step", "agent"), np.asarray(self.stderr))
        coords: dict[str, Any] = {"step": self.steps, "agent": self.agent_ids}
        if self.phi_features is not None:
            data["phi_features"] = (("step", "agent", "feature"), self.phi_features)
        if self.phi_features is not None or self.features:
            coords["feature"] = list(self.features)
        coords.update({f"group_{g}": ("agent", v) for g, v in self.groups.items()})
        attrs = {"method": self.method, "satisfies_efficiency": int(self.satisfies_efficiency),
                 "n_evals": -1 if self.n_evals is None else int(self.n_evals),
                 "provenance": json.dumps(_jsonable(self.provenance))}
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def to_parquet(self, path: str | os.PathLike[str], *, include_ids: bool = True) -> Path:
        path = Path(path)
        df = self.to_pandas(include_ids=include_ids)
        df.attrs = {}
        with atomic_path(path) as tmp:
            df.to_parquet(tmp, index=False)
        return path

    def summary(self) -> dict[str, Any]:
        """A small JSON-able summary: method, provenance, Δv, worst gap, shape."""
        return {
            "method": self.method, "T": self.T, "N": self.N, "features": list(self.features),
            "delta_v": self.delta_v.tolist(), "max_efficiency_gap": self.max_efficiency_gap,
            "satisfies_efficiency": self.satisfies_efficiency, "n_evals": self.n_evals,
            "provenance": _jsonable(self.provenance),
        }

    def save(self, path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None) -> Path:
        """Save losslessly to one ``.npz`` file (``within``: the run directory it must stay in)."""
        path = as_path(path, "attribution file", error=OutputError)
        if path.is_dir():
            raise OutputError(f"cannot save an attribution to {str(path)!r}: it is an existing directory (give a "
                              "file name such as attribution.npz)")
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        arrays = {"phi": self.phi, "delta_v": self.delta_v, "f_values": self.f_values,
                  "f_baseline": self.f_baseline, "agent_ids": self.agent_ids, "steps": self.steps}
        if self.phi_features is not None:
            arrays["phi_features"] = self.phi_features
        if self.stderr is not None:
            arrays["stderr"] = np.asarray(self.stderr)
        for k, v in self.groups.items():
            arrays[f"group::{safe_component(str(k), 'group name')}"] = v
        meta = {"format": _FORMAT, "features": list(self.features), "n_evals": self.n_evals,
                "satisfies_efficiency": self.satisfies_efficiency, "method": self.method,
                "provenance": _jsonable(self.provenance)}
        return write_npz(path, arrays, meta=meta, within=within)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None) -> Attribution:
        """Load an attribution written by :meth:`save` (``within``: the run directory the file must stay in).

        The archive's declared shapes are checked before anything is read: ``phi`` (T, N), ``delta_v``,
        ``f_values``, ``f_baseline``, ``steps`` (T,), ``agent_ids`` (N,), ``stderr`` (T, N),
        ``phi_features`` (T, N, D), ``group::*`` (N,).
        """

        def check(members: Any, meta: Any) -> None:
            phi = members.get("phi")
            if phi is None:
                return
            if len(phi.shape) != 2:
                raise AttributionFileError(f"attribution file {str(path)!r} is damaged: phi has shape {phi.shape}, "
                                           "not (T, N)")
            T, N = phi.shape
            want = {"delta_v": (T,), "f_values": (T,), "f_baseline": (T,), "steps": (T,), "agent_ids": (N,),
                    "stderr": (T, N)}
            for k, m in members.items():
                shape = want.get(k) or ((N,) if k.startswith("group::") else None)
                if k == "phi_features":
                    bad = len(m.shape) != 3 or m.shape[:2] != (T, N)
                else:
                    bad = shape is not None and m.shape != shape
                if bad:
                    raise AttributionFileError(f"attribution file {str(path)!r} is damaged: {k} has shape {m.shape} "
                                               f"but phi is (T, N) = {(T, N)}")

        path = saved_npz(path, what="attribution file", error=AttributionFileError)  # the name given to save()
        data, meta = read_npz(path, error=AttributionFileError, what="attribution file", check=check, within=within)
        if meta is None or meta.get("format") != _FORMAT:
            found = None if meta is None else meta.get("format")
            what = " (it is a panel file: read it with Panel.load)" if str(found).startswith("aumann.panel/") else ""
            raise AttributionFileError(f"{str(path)!r} is not an aumann attribution file{what}")
        missing = [k for k in ("phi", "delta_v", "f_values", "f_baseline", "agent_ids", "steps") if k not in data]
        missing += [k for k in ("features", "n_evals", "satisfies_efficiency", "method", "provenance") if k not in meta]
        if missing:
            raise AttributionFileError(f"attribution file {str(path)!r} is incomplete: it lacks {missing}")
        if not isinstance(meta["features"], list) or not isinstance(meta["provenance"], dict):
            raise AttributionFileError(f"attribution file {str(path)!r} has malformed metadata")
        _check_loaded_meta(meta, str(path))
        groups = {k.split("::", 1)[1]: v for k, v in data.items() if k.startswith("group::")}
        try:
            # the labels a Panel would accept (unique, no NaN/NaT), the group labels likewise
            unique_labels(data["agent_ids"], "agent_ids", len(data["agent_ids"]))
            unique_labels(data["steps"], "steps", len(data["steps"]))
            for k, v in groups.items():
                plain_labels(v, f"group {k!r} labels")
            return cls(
                phi=data["phi"], delta_v=data["delta_v"], f_values=data["f_values"], f_baseline=data["f_baseline"],
                agent_ids=data["agent_ids"], steps=data["steps"], features=tuple(map(str, meta["features"])),
                phi_features=data.get("phi_features"), stderr=data.get("stderr"), n_evals=meta["n_evals"],
                satisfies_efficiency=bool(meta["satisfies_efficiency"]), method=str(meta["method"]),
                provenance=meta["provenance"], groups=groups,
            )
        except AumannError as exc:
            raise AttributionFileError(f"attribution file {str(path)!r} holds an invalid attribution: {exc}") from exc

    def __repr__(self) -> str:
        extra = f", n_evals={self.n_evals}" if self.n_evals is not None else ""
        return (f"Attribution(method={self.method!r}, T={self.T}, N={self.N}, "
                f"max_efficiency_gap={self.max_efficiency_gap:.3g}{extra})")



def _check_loaded_meta(meta: dict[str, Any], path: str) -> None:
    """The metadata :meth:`Attribution.save` writes, read back: a file edited to hold ``"satisfies_efficiency":
    "no"`` (``bool("no")`` is True), ``"n_evals": "abc"`` or repeated feature names is damaged, not loaded."""
    problems = []
    if not isinstance(meta["satisfies_efficiency"], bool):
        problems.append(f"satisfies_efficiency must be true or false, got {meta['satisfies_efficiency']!r}")
    n = meta["n_evals"]
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        problems.append(f"n_evals must be null or an integer ≥ 0, got {n!r}")
    if not isinstance(meta["method"], str):
        problems.append(f"method must be a string, got {meta['method']!r}")
    feats = meta["features"]
    if not all(isinstance(f, str) for f in feats):
        problems.append(f"features must be names (strings), got {feats[:5]!r}")
    elif len(set(feats)) != len(feats):
        problems.append(f"feature names must be unique, got {feats[:10]!r}")
    if problems:
        raise AttributionFileError(f"attribution file {path!r} has malformed metadata: {'; '.join(problems)}")


def group_shares(phi: np.ndarray, labels: np.ndarray, *, total: float | None = None,
                 groups: Sequence[Hashable] | None = None) -> dict[Hashable, float]:
    """R_G = Σ_{i∈G} φ_i / total for each group label G — the one group share.

    Args:
        phi: per-agent values (N,) (e.g. Φ_i = Σ_t φ_i,t, or shares φ̃ = φ/Δv with ``total=1``).
        labels: each agent's group label (N,).
        total: the normaliser (default Σ_i φ_i); a zero total gives NaN shares.
        groups: the labels to report, in this order (default: those present, sorted); an absent one gets 0.
    """
    phi, labels = np.asarray(phi), np.asarray(labels)
    total = float(phi.sum()) if total is None else float(total)
    sums = {_key(g): phi[idx].sum() for g, idx in group_members(labels)}
    keys = list(sums) if groups is None else [_key(g) for g in groups]
    zero = phi[:0].sum()
    return {g: float(sums.get(g, zero) / total) if total != 0 else math.nan for g in keys}


def _key(g: Any) -> Hashable:
    return g.item() if hasattr(g, "item") else g


def group_members(labels: np.ndarray) -> list[tuple[Any, np.ndarray]]:
    """``[(label, indices of its agents in order), ...]`` for each distinct label, sorted as :func:`numpy.unique`
    sorts them: one sort for all groups (the indices of a label are those of ``labels == label``, in the same
    order, so a sum over them is the same sum to the bit); a mask per group made one group per agent quadratic
    (8,000 groups 1.5 s; 10⁵ did not finish)."""
    labels = np.asarray(labels)
    uniq, inv = np.unique(labels, return_inverse=True)
    order = np.argsort(inv.reshape(-1), kind="stable")
    bounds = np.searchsorted(inv.reshape(-1)[order], np.arange(uniq.size + 1))
    return [(uniq[k], order[bounds[k]:bounds[k + 1]]) for k in range(uniq.size)]

__all__ = ["EFFICIENCY_WARN_SHARE", "Attribution", "group_shares"]
