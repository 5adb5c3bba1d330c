"""MegaScale-Social networks: the vectorised Batagelj–Brandes generator against the sequential
algorithm, determinism, and the networkx / edge-list loaders with their errors."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from aumann.errors import ConfigError
from aumann.scenarios.megascale_social.network import Network, barabasi_albert, read_edge_list


def _sequential_bb(n: int, m: int, seed: int) -> set[tuple[int, int]]:
    """Batagelj & Brandes (2005), Algorithm 'preferential attachment', as the paper writes it: a loop
    over edges filling the endpoint array M, with the same uniform draws as the vectorised code."""
    u = np.random.default_rng(seed).random(n * m)
    M = np.empty(2 * n * m, dtype=np.int64)
    for v in range(n):
        for i in range(m):
            k = v * m + i
            M[2 * k] = v
            r = int(u[k] * (2 * k + 1))
            M[2 * k + 1] = M[r]
    edges = set()
    for k in range(n * m):
        a, b = int(M[2 * k]), int(M[2 * k + 1])
        if a != b:
            edges.add((min(a, b), max(a, b)))
    return edges


def _edge_set(net: Network) -> set[tuple[int, int]]:
    rows = np.repeat(np.arange(net.n), np.diff(net.indptr))
    return {(int(a), int(b)) for a, b in zip(rows, net.indices) if a < b}


@pytest.mark.parametrize(("n", "m", "seed"), [(50, 1, 0), (300, 3, 7), (2000, 4, 11)])
def test_vectorised_generator_equals_the_sequential_algorithm(n, m, seed):
    net = barabasi_albert(n, m, np.random.default_rng(seed))
    assert _edge_set(net) == _sequential_bb(n, m, seed)


def test_generator_is_seeded_symmetric_and_heavy_tailed():
    a = barabasi_albert(20_000, 3, np.random.default_rng(5))
    b = barabasi_albert(20_000, 3, np.random.default_rng(5))
    assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
    assert not np.array_equal(a.indices, barabasi_albert(20_000, 3, np.random.default_rng(6)).indices)
    F = a.follows()
    assert (F != F.T).nnz == 0 and F.diagonal().sum() == 0 and a.mutual
    deg = a.follower_count()
    assert 5.5 < deg.mean() < 6.0 and deg.max() > 100  # a few self-loops/duplicates are dropped; hubs exist
    assert np.array_equal(np.sort(a.symmetric().indices), np.sort(a.indices))


def test_from_networkx_directed_and_undirected():
    g = nx.DiGraph([("a", "b"), ("b", "c"), ("a", "c")])
    net = Network.from_networkx(g)
    assert net.n == 3 and net.nnz == 3 and list(net.node_ids) == ["a", "b", "c"]
    assert net.follower_count().tolist() == [0, 1, 2] and net.following_count().tolist() == [2, 1, 0]
    A = net.symmetric().toarray()
    assert np.allclose(A, A.T) and A[0, 1] == 0.5
    und = Network.from_networkx(nx.path_graph(4))
    assert und.nnz == 6 and und.mutual and und.follower_count().tolist() == [1, 2, 2, 1]


def test_edge_list_file_with_header_comments_and_labels(tmp_path):
    p = tmp_path / "follows.csv"
    p.write_text("follower,followee\n# a comment\n10,20\n20,30\n10,30\n10,30\n30,30\n")
    net = read_edge_list(p)
    assert net.n == 3 and net.nnz == 3 and list(net.node_ids) == [10, 20, 30]  # duplicate and self-loop dropped
    assert read_edge_list(p, mutual=True).nnz == 6


@pytest.mark.parametrize(("text", "match"), [("1 2\nx y\n", "line 2"), ("# nothing\n", "no edges"),
                                             ("1 -2\n", "≥ 0")])
def test_bad_edge_lists_name_the_problem(tmp_path, text, match):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match):
        read_edge_list(p)
    with pytest.raises(ConfigError, match="cannot read"):
        read_edge_list(tmp_path / "missing.txt")


def test_bad_edge_arrays_are_rejected():
    with pytest.raises(ConfigError, match="equal length"):
        Network.from_edges(np.array([0, 1]), np.array([1]))
    with pytest.raises(ConfigError, match="integers"):
        Network.from_edges(np.array([0.5]), np.array([1.0]))
    with pytest.raises(ConfigError, match="n = 2"):
        Network.from_edges(np.array([0]), np.array([5]), n=2)
    with pytest.raises(ConfigError, match="n ≥ 2"):
        barabasi_albert(1, 3, np.random.default_rng(0))


@pytest.mark.parametrize("k", [0, 1, 5, 300, 4000])
def test_followers_of_is_every_follower_sorted_and_unique(k):
    """followers_of(agents): the rows of F with a 1 in any of those columns — for a few agents (sorted) and for
    thousands (marked), from one gather of every agent's slice of Fᵀ."""
    net = barabasi_albert(5000, 3, np.random.default_rng(7))
    agents = np.random.default_rng(k).choice(5000, k, replace=False)
    F = net.follows().tocsc()
    want = np.unique(F[:, agents].tocoo().row) if k else np.zeros(0, dtype=np.int64)
    got = net.followers_of(agents)
    assert got.dtype == np.int64 and np.array_equal(got, want)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["binary", "fifo", "device", "folder", "huge label"])
def test_an_edge_list_that_is_no_text_file_of_labels_is_a_config_error(tmp_path, kind):
    """A binary file raised the bare UnicodeDecodeError and a label past int64 numpy's OverflowError (tracebacks out
    of aumann run); a FIFO waited for a writer for ever and /dev/zero was read until the memory ran out."""
    import os

    p = tmp_path / "edges.txt"
    if kind == "binary":
        p.write_bytes(b"1 2\n\xfa\xfb\xfc 3\n")
        needle = r"'.*edges\.txt' is not UTF-8 text \(byte 4\)"
    elif kind == "fifo":
        os.mkfifo(p)
        needle = "is not a regular file"
    elif kind == "device":
        p = "/dev/zero"
        needle = "'/dev/zero' is not a regular file"
    elif kind == "folder":
        p = tmp_path
        needle = "is not a regular file"
    else:
        p.write_text("1 2\n2 3\n99999999999999999999999 1\n")
        needle = r"line 3: label 99999999999999999999999 is larger than 2⁶³ − 1"
    with pytest.raises(ConfigError, match=needle):
        read_edge_list(p)
    ok = tmp_path / "ok.txt"
    ok.write_text(f"1 2\n2 {2**63 - 1}\n")
    assert read_edge_list(ok).node_ids.tolist() == [1, 2, 2**63 - 1]


@pytest.mark.timeout(120)
def test_a_binary_network_file_is_an_exit_2_of_aumann_run(tmp_path, capsys):
    from aumann.cli import main

    p = tmp_path / "edges.txt"
    p.write_bytes(b"\xfa\xfb\xfc 3\n")
    rc = main(["run", "megascale-social", "--agents", "50", "--steps", "3", "--runs", "1", "--set", f"network={p}",
               "--out", str(tmp_path / "run")])
    assert rc == 2 and "is not UTF-8 text (byte 0)" in capsys.readouterr().err
