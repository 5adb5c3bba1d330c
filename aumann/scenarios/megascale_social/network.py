"""Follower networks in numpy: a vectorised linear-time preferential-attachment generator and loaders.

A :class:`Network` is a compressed-sparse-row (CSR) *follow* matrix F with F[i, j] = 1 when agent i
follows agent j, i.e. i sees j's posts. Exposure is one sparse mat-vec ``F @ posted``; an agent's
follower count is a column sum of F. Every source ends up here:

* :func:`barabasi_albert` — Batagelj & Brandes (2005), "Efficient generation of large random
  networks", Phys. Rev. E 71, 036113, Algorithm "preferential attachment", vectorised. Edge k
  (k = 0 … m·n − 1) has source k // m; its target copies slot r_k, drawn uniformly from the 2k + 1
  slots filled so far (the 2k endpoints of the earlier edges and the current source). Even slots are
  sources (known at once: slot 2j holds j // m); odd slots are earlier targets, so a target is the end
  of a chain of pointers to earlier edges, resolved for all edges at once by pointer jumping
  (O(log chain length) vectorised rounds). Self-loops and repeated pairs are dropped and each
  remaining pair is a mutual follow (BA graphs are undirected). Seeded by a numpy Generator: the
  same seed gives the same graph bit for bit; no networkx.
* :meth:`Network.from_networkx` — any networkx graph (small or user-supplied; a directed edge u → v
  means u follows v, an undirected edge is a mutual follow). Nodes are relabelled 0 … n − 1 in
  sorted order (the mapping is kept in ``node_ids``).
* :meth:`Network.from_edges` / :func:`read_edge_list` — a real follower edge list (follower,
  followee) as arrays or as a text/CSV file of two integer columns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from aumann.errors import ConfigError


@dataclass(frozen=True, eq=False)
class Network:
    """A follow graph on agents 0 … n − 1 as CSR arrays (F[i, j] = 1: i follows j).

    Attributes:
        n: number of agents.
        indptr, indices: CSR of F (int64 / int32); row i lists the accounts i follows, ascending.
        node_ids: the original node labels (for graphs loaded from networkx or an edge list).
        source: how the network was made (for provenance).
        mutual: every follow is reciprocated (F = Fᵀ): set when the edges were made mutual on construction.
    """

    n: int
    indptr: np.ndarray
    indices: np.ndarray
    node_ids: np.ndarray | None = None
    source: str = ""
    mutual: bool = False  # every follow is reciprocated (F symmetric), e.g. preferential-attachment graphs
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def nnz(self) -> int:
        """Number of follow relations (directed edges)."""
        return int(self.indices.shape[0])

    def follows(self) -> sp.csr_matrix:
        """F as a float32 ``scipy.sparse.csr_matrix`` (cached)."""
        if "F" not in self._cache:
            data = np.ones(self.nnz, dtype=np.float32)
            self._cache["F"] = sp.csr_matrix((data, self.indices, self.indptr), shape=(self.n, self.n))
        return self._cache["F"]

    def following_count(self) -> np.ndarray:
        """How many accounts each agent follows (row sums of F), int64 (n,)."""
        return np.diff(self.indptr)

    def followers_of(self, agents: np.ndarray) -> np.ndarray:
        """The agents that follow any of ``agents`` (sorted, unique): the rows of F with a 1 in those columns."""
        if "FT" not in self._cache:
            self._cache["FT"] = self.follows().T.tocsr()  # row j of Fᵀ: j's followers
        FT = self._cache["FT"]
        a = np.asarray(agents, dtype=np.int64)
        starts, ends = FT.indptr[a], FT.indptr[a + 1]
        if not a.size:
            return np.zeros(0, dtype=np.int64)
        lengths = ends - starts
        total = int(lengths.sum())
        # every agent's slice of FT.indices at once (no Python loop over the agents: 300k of them took 1.3 s)
        at = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total, dtype=np.int64)
        found = FT.indices[at]
        if total * 16 < self.n:  # few followers: sort them
            return np.unique(found.astype(np.int64))
        seen = np.zeros(self.n, dtype=bool)  # many (a deletion set of influencers): mark, no sort; same ids, same order
        seen[found] = True
        return np.flatnonzero(seen).astype(np.int64)

    def follower_count(self) -> np.ndarray:
        """How many followers each agent has (column sums of F), int64 (n,)."""
        if "followers" not in self._cache:
            self._cache["followers"] = np.bincount(self.indices, minlength=self.n).astype(np.int64)
        return self._cache["followers"]

    def symmetric(self) -> sp.csr_matrix:
        """A = (F + Fᵀ)/2 in float64 CSR without self-loops (cached): the interaction matrix of the
        cascade indicator (only the symmetric part of F enters a quadratic form)."""
        if "A" not in self._cache:
            F = self.follows().astype(np.float64)
            if self.mutual:  # F is symmetric and has no self-loops already
                self._cache["A"] = F
                return F
            A = ((F + F.T) * 0.5).tocsr()
            A.setdiag(0.0)
            A.eliminate_zeros()
            A.sort_indices()
            self._cache["A"] = A
        return self._cache["A"]

    def __deepcopy__(self, memo: dict) -> Network:
        return self  # immutable: forks share it

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_edges(cls, follower: Any, followee: Any, n: int | None = None, *, mutual: bool = False,
                   node_ids: Any = None, source: str = "edges") -> Network:
        """A network from edge arrays (``follower[k]`` follows ``followee[k]``), node labels 0 … n − 1.

        Self-loops and repeated edges are dropped. ``mutual=True`` adds the reverse of every edge.

        Raises:
            ConfigError: arrays of different lengths, negative or non-integer labels, labels ≥ n.
        """
        u = np.asarray(follower)
        v = np.asarray(followee)
        if u.shape != v.shape or u.ndim != 1:
            raise ConfigError(f"edge arrays must be 1-D and of equal length; got shapes {u.shape} and {v.shape}")
        for name, arr in (("follower", u), ("followee", v)):
            if arr.size and not np.issubdtype(arr.dtype, np.integer):
                raise ConfigError(f"{name} labels must be integers; got dtype {arr.dtype}")
            if arr.size and int(arr.min()) < 0:
                raise ConfigError(f"{name} labels must be ≥ 0; got {int(arr.min())}")
        u = u.astype(np.int64, copy=False)
        v = v.astype(np.int64, copy=False)
        top = int(max(u.max(initial=-1), v.max(initial=-1))) + 1
        n = top if n is None else int(n)
        if top > n:
            raise ConfigError(f"edge list names agent {top - 1} but the network has n = {n} agents")
        if n < 1:
            raise ConfigError("a network needs at least one agent")
        if mutual:
            u, v = np.concatenate([u, v]), np.concatenate([v, u])
        keep = u != v
        code = u[keep] * n + v[keep]
        code.sort()  # (follower, followee) order = CSR order; a plain sort (np.unique hashes first: far slower)
        if code.size:
            code = code[np.concatenate(([True], code[1:] != code[:-1]))]
        rows, cols = code // n, code % n
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        idx_dtype = np.int32 if n < 2**31 else np.int64
        return cls(n=n, indptr=indptr, indices=cols.astype(idx_dtype), node_ids=node_ids, source=source,
                   mutual=mutual)

    @classmethod
    def from_networkx(cls, graph: Any) -> Network:
        """A network from a networkx graph (directed u → v: u follows v; undirected: mutual follow)."""
        try:
            nodes = sorted(graph.nodes())
        except TypeError:
            nodes = list(graph.nodes())
        except AttributeError:
            raise ConfigError(f"from_networkx needs a networkx graph; got {type(graph).__name__}") from None
        if not nodes:
            raise ConfigError("the networkx graph has no nodes")
        index = {node: k for k, node in enumerate(nodes)}
        edges = np.array([(index[a], index[b]) for a, b in graph.edges()], dtype=np.int64).reshape(-1, 2)
        ids = np.asarray(nodes) if not all(isinstance(x, int | np.integer) for x in nodes) else np.asarray(nodes,
                                                                                                           np.int64)
        return cls.from_edges(edges[:, 0], edges[:, 1], len(nodes), mutual=not graph.is_directed(), node_ids=ids,
                              source=f"networkx {type(graph).__name__} ({len(nodes)} nodes)")


def barabasi_albert(n: int, m: int, rng: np.random.Generator) -> Network:
    """Preferential attachment (Batagelj–Brandes, vectorised): n agents, m edges per new agent,
    every edge a mutual follow. Same ``rng`` state → the same network bit for bit.

    Raises:
        ConfigError: n < 2 or m < 1.
    """
    n, m = int(n), int(m)
    if n < 2 or m < 1:
        raise ConfigError(f"barabasi_albert needs n ≥ 2 and m ≥ 1; got n = {n}, m = {m}")
    E = n * m
    k = np.arange(E, dtype=np.int64)
    # slot r_k uniform on {0, …, 2k}: floor(u · (2k + 1)) (u < 1, so r_k ≤ 2k)
    r = (rng.random(E) * (2 * k + 1)).astype(np.int64)
    del k
    target = np.full(E, -1, dtype=np.int64)
    even = (r & 1) == 0
    target[even] = (r[even] >> 1) // m
    ptr = (r - 1) >> 1  # for odd slots: the earlier edge whose target slot r_k is
    del r
    pending = np.flatnonzero(~even)
    del even
    while pending.size:  # pointer jumping: resolve from a resolved pointee, else jump two links
        p = ptr[pending]
        tp = target[p]
        ok = tp >= 0
        target[pending[ok]] = tp[ok]
        pending = pending[~ok]
        ptr[pending] = ptr[p[~ok]]
    source = np.repeat(np.arange(n, dtype=np.int64), m)
    return Network.from_edges(source, target, n, mutual=True, source=f"barabasi_albert(n={n}, m={m})")


#: the largest node label an edge list may hold (an int64)
_LABEL_MAX = 2**63 - 1


def read_edge_list(path: str | os.PathLike[str], *, n: int | None = None, mutual: bool = False,
                   delimiter: str | None = None) -> Network:
    """A follower network from a text file of two integer columns ``follower followee`` (whitespace or
    comma separated; lines starting with ``#`` and a non-numeric header line are skipped).

    Raises:
        ConfigError: the file cannot be read, or a line does not hold two integer labels (the message
            names the file and the first bad line).
    """
    src = Path(path)
    if src.exists() and not src.is_file():  # a FIFO waited for a writer for ever, /dev/zero filled the memory
        raise ConfigError(f"follower edge list {str(src)!r} is not a regular file (a directory, pipe, socket or "
                          "device)")
    try:
        raw = src.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read follower edge list {str(src)!r}: {exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # was the bare UnicodeDecodeError, a traceback out of aumann run
        raise ConfigError(f"follower edge list {str(src)!r} is not UTF-8 text (byte {exc.start}); is it a binary "
                          "file?") from None
    rows: list[tuple[int, int]] = []
    header_ok = True  # the first non-comment line may be a header
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        parts = s.replace(",", " ").split() if delimiter is None else s.split(delimiter)
        try:
            if len(parts) < 2:
                raise ValueError
            pair = (int(parts[0]), int(parts[1]))
        except ValueError:
            if header_ok:
                header_ok = False
                continue
            raise ConfigError(f"{str(src)!r} line {lineno}: expected two integer labels 'follower followee'; "
                              f"got {line[:80]!r}") from None
        if max(pair) > _LABEL_MAX:  # numpy's int64 array raised a bare OverflowError for it
            raise ConfigError(f"{str(src)!r} line {lineno}: label {max(pair)} is larger than 2⁶³ − 1")
        rows.append(pair)
        header_ok = False
    if not rows:
        raise ConfigError(f"follower edge list {str(src)!r} holds no edges")
    arr = np.asarray(rows, dtype=np.int64)
    if int(arr.min()) < 0:
        raise ConfigError(f"{str(src)!r}: labels must be ≥ 0; got {int(arr.min())}")
    labels, inv = np.unique(arr.ravel(), return_inverse=True)
    inv = inv.reshape(-1, 2)
    if n is not None and labels.shape[0] > n:
        raise ConfigError(f"{str(src)!r} names {labels.shape[0]} agents but n = {n}")
    size = labels.shape[0] if n is None else int(n)
    return Network.from_edges(inv[:, 0], inv[:, 1], size, mutual=mutual, node_ids=labels,
                              source=f"edge list {src.name} ({arr.shape[0]} edges)")


__all__ = ["Network", "barabasi_albert", "read_edge_list"]
