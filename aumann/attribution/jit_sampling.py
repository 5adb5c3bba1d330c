"""Compiled kernels (numba) for permutation sampling: the draws, the running sums along a permutation,
and the scatter of marginals back to player order.

Loaded like :mod:`aumann.attribution.jit` (lazily; ``AUMANN_NUMBA=0`` switches them off; cached on disk).

* :func:`draw_permutations` — ``rng.permutation(n)`` row after row, the same permutations and the same
  generator state afterwards as numpy's (numpy's Fisher–Yates with its ``random_interval`` draws, which
  numba implements on the generator's own bit stream; tested against numpy on every bit generator), but
  into int32 (half the memory the random swaps touch) and with the draws of a batch of swaps made before
  the swaps, so the swaps' cache misses overlap. About 2× faster than numpy's on 10⁶ players.
* :func:`running_sums_kernel` — g[k] = s₀ + Σ_{l≤k} table[π_l] for each permutation: one random row read
  per player from an (N, P) table (one cache line instead of P), the running sums in registers, written
  in the order ρ reads them. The additions are the ones ``cumsum`` did on the gathered rows, in the same
  order, so the sums are the same bits.
* :func:`scatter_steps` / :func:`scatter_steps_reversed` — marginals v(π_{≤k}) − v(π_{<k}) (and, for the
  reversed permutation, v(π_{≥k}) − v(π_{>k})) written straight to player order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aumann.attribution.jit import built, compile_source, enabled, njit_bound

_MAX_UNROLLED = 8
_CACHE: dict[Any, Any] = {}
_SWAP_BATCH = 1024  # swaps whose random indices are drawn before any of them is made

# The compiled helpers the kernels below call, bound when a kernel is compiled (:func:`.jit.njit_bound`): globals
# of the kernels, not closure variables, so that numba's disk cache finds the kernels again in a new process.
prefetch: Any = None
swap_batch: Any = None
pcg64_step: Any = None


def available() -> bool:
    """Whether the compiled sampling kernels are used (see :func:`aumann.attribution.jit.enabled`)."""
    return enabled()


def _get(key: Any, build: Any) -> Any:
    return built(_CACHE, key, build)


_AHEAD = 32  # positions ahead of the walk whose random row is prefetched


def _prefetch() -> Any:
    """The intrinsic ``prefetch(arr, index, write)``: a hint to bring the cache line of ``arr.flat[index]``
    in (``write``: a literal, 1 when the line will be written). A walk along a permutation reads (or
    writes) one random row per player; the loads themselves wait in the core's reorder buffer, which
    holds only a few dozen positions, while a prefetch retires at once — so prefetching the row
    ``_AHEAD`` positions ahead keeps many more misses in flight. It changes no number."""
    return _get("prefetch", _build_prefetch)


def _build_prefetch() -> Any:
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def prefetch(typingctx: Any, arr: Any, index: Any, write: Any) -> Any:
        if not isinstance(write, types.IntegerLiteral):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            name = "llvm.prefetch.p0"
            fn = builder.module.globals.get(name) or ir.Function(
                builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), name)
            ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
            builder.call(fn, [ptr, ir.Constant(i32, write.literal_value), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.none(arr, types.intp, write), codegen

    return prefetch


def draw_permutations(rng: Any, out: Any) -> None:
    """Fill each row of ``out`` (int32 or int64, (c, n)) with ``rng.permutation(n)``, row after row; ``rng``
    (a :class:`numpy.random.Generator`) advances exactly as numpy's would. Not thread-safe for one ``rng``.

    For numpy's default bit generator (PCG64) the generator itself is compiled in (its 128-bit state read
    from ``rng.bit_generator.state``, stepped inline, and written back; numpy's own step, output function
    and 32-bit buffering, tested against numpy); a draw through numpy's function pointer cost most of a
    permutation's time. Any other bit generator is called through its pointer, as numpy does."""
    bits = rng.bit_generator
    if type(bits) is _pcg64_type():
        with bits.lock:
            state = bits.state
            s, inc = state["state"]["state"], state["state"]["inc"]
            st = np.array([s & _M64, s >> 64, inc & _M64, inc >> 64, state["has_uint32"], state["uinteger"]],
                          dtype=np.uint64)
            _get("draw_pcg64", _build_draw_pcg64)(st, out)
            state["state"] = {"state": int(st[0]) | int(st[1]) << 64, "inc": inc}
            state["has_uint32"], state["uinteger"] = int(st[4]), int(st[5])
            bits.state = state
        return
    _get("draw", _build_draw)(rng, out)


_M64 = (1 << 64) - 1


def _pcg64_type() -> type:
    return np.random.PCG64


def _build_draw_pcg64() -> Any:
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    batch = _SWAP_BATCH

    @intrinsic
    def pcg64_step_(typingctx: Any, lo: Any, hi: Any, inc_lo: Any, inc_hi: Any) -> Any:
        """numpy's pcg_setseq_128_step_r: state = state · M + inc (mod 2¹²⁸), on (low, high) 64-bit halves."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            i64, i128 = ir.IntType(64), ir.IntType(128)

            def wide(lo: Any, hi: Any) -> Any:
                return builder.or_(builder.shl(builder.zext(hi, i128), ir.Constant(i128, 64)), builder.zext(lo, i128))

            state = builder.add(builder.mul(wide(args[0], args[1]), ir.Constant(i128, _PCG_MULTIPLIER)),
                                wide(args[2], args[3]))
            halves = [builder.trunc(state, i64), builder.trunc(builder.lshr(state, ir.Constant(i128, 64)), i64)]
            return context.make_tuple(builder, sig.return_type, halves)

        u64 = types.uint64
        return types.UniTuple(u64, 2)(u64, u64, u64, u64), codegen

    def draw_pcg64(st: Any, out: Any) -> None:
        n = out.shape[1]
        js = np.empty(batch, dtype=np.int64)
        low32 = np.uint64(0xFFFFFFFF)
        lo, hi, inc_lo, inc_hi, has32, buffered = st[0], st[1], st[2], st[3], st[4], st[5]  # in registers
        for r in range(out.shape[0]):
            row = out[r]
            for i in range(n):
                row[i] = i
            top = n - 1  # numpy: for i in reversed(range(1, n)): j = random_interval(i); swap(i, j)
            while top > 0:
                m = min(batch, top)
                for q in range(m):
                    mx = np.uint64(top - q)
                    mask = mx  # numpy's gen_mask: the smallest 2^k − 1 ≥ mx
                    mask |= mask >> np.uint64(1)
                    mask |= mask >> np.uint64(2)
                    mask |= mask >> np.uint64(4)
                    mask |= mask >> np.uint64(8)
                    mask |= mask >> np.uint64(16)
                    mask |= mask >> np.uint64(32)
                    while True:
                        if mx <= low32 and has32 != 0:  # next_uint32: the high half kept from the last output
                            has32 = np.uint64(0)
                            v = buffered
                        else:
                            lo, hi = pcg64_step(lo, hi, inc_lo, inc_hi)
                            x = hi ^ lo  # XSL-RR output of the new state
                            rot = hi >> np.uint64(58)
                            w = (x >> rot) | (x << ((np.uint64(64) - rot) & np.uint64(63)))
                            if mx <= low32:
                                has32 = np.uint64(1)
                                buffered = w >> np.uint64(32)
                                v = w & low32
                            else:
                                v = w
                        v &= mask
                        if v <= mx:
                            break
                    j = types.intp(v)
                    js[q] = j
                    prefetch(row, j, 1)  # the swap's random line, loaded while the next draws are made
                swap_batch(row, js, top, m)
                top -= m
        st[0], st[1], st[4], st[5] = lo, hi, has32, buffered

    return njit_bound(draw_pcg64, prefetch=_prefetch(), swap_batch=_swaps(), pcg64_step=pcg64_step_)


def _swaps() -> Any:
    """``swap_batch(row, js, top, m)``: Fisher–Yates' swaps ``row[top − q] ↔ row[js[q]]`` for q < m, in numpy's
    order (the random indices of a batch are drawn first, so their cache misses overlap; both draws share it)."""
    return _get("swaps", _build_swaps)


def _build_swaps() -> Any:
    import numba

    @numba.njit(nogil=True, cache=True, inline="always")
    def swap_batch(row: Any, js: Any, top: int, m: int) -> None:
        for q in range(m):
            i = top - q
            j = js[q]
            t = row[j]
            row[j] = row[i]
            row[i] = t

    return swap_batch


_PCG_MULTIPLIER = (0x2360ED051FC65DA4 << 64) | 0x4385DF649FCCF645  # PCG_DEFAULT_MULTIPLIER_128


def _build_draw() -> Any:
    import numpy as np
    from numba import types
    from numba.np.random.random_methods import random_interval

    batch = _SWAP_BATCH

    def draw(rng: Any, out: Any) -> None:
        bits = rng.bit_generator
        n = out.shape[1]
        js = np.empty(batch, dtype=np.int64)
        for r in range(out.shape[0]):
            row = out[r]
            for i in range(n):
                row[i] = i
            top = n - 1  # numpy: for i in reversed(range(1, n)): j = random_interval(i); swap(i, j)
            while top > 0:
                m = min(batch, top)
                for q in range(m):
                    j = types.intp(random_interval(bits, types.intp(top - q)))
                    js[q] = j
                    prefetch(row, j, 1)  # the swap's random line, loaded while the next draws are made
                swap_batch(row, js, top, m)
                top -= m

    return njit_bound(draw, prefetch=_prefetch(), swap_batch=_swaps())


def _fetch_row(index: str, p: int, indent: int) -> str:
    """Template lines that prefetch the row ``index`` of an (N, P) float64 table (``flat`` is its flat view): its
    first element and, for P ≥ 2, its last. A row of 8·P bytes can span two 64-byte cache lines (a quarter of
    the rows for P = 3, half for P = 4 in a table whose data starts 16 bytes into a line, as large numpy
    arrays do); fetching only the first line left the second a demand miss in the walk. It changes no number:
    the products kernel on 10⁶ players, P = 3, took 11.1 ms a permutation instead of 13.4 (best of 15), and a
    permutation-step of sampled Shapley on f_heat 37–39 ms of CPU instead of 53–55 (``bench_sampled.py
    --per-step``, the code before this change as ``--src``, load 3). Only prefetches: numba's disk cache keys a
    kernel on its own file, so one compiled elsewhere (:mod:`.jit_controls`) from an older ``_fetch_row`` could
    differ from a fresh one in speed, never in a number."""
    pad = " " * indent
    if p == 1:
        return f"{pad}prefetch(flat, {index}, 0)"
    return (f"{pad}row_at = {index} * {p}\n{pad}prefetch(flat, row_at, 0)\n"
            f"{pad}prefetch(flat, row_at + {p - 1}, 0)")


_SUMS_TEMPLATE = '''
def running_sums_p{p}_{layout}(table, start, perms, out):
    c = perms.shape[0]
    n = perms.shape[1]
    flat = table.reshape(table.size)
    for r in range(c):
{init}
        for k in range(n):
            if k + {ahead} < n:
{fetch}
            i = perms[r, k]
{body}
'''


def running_sums_kernel(p: int, agents_last: bool) -> Any:
    """``kernel(table (N, P) float64, start (P,) float64, perms (c, N) int, out)``: for every row r and
    position k, ``out[..] = start + Σ_{l≤k} table[perms[r, l]]`` (sequential float64 additions, in the order
    ``cumsum`` makes them). ``out`` is (c, N, P) (``agents_last=False``) or (P, c, N) (``agents_last=True``)."""
    layout = "pcn" if agents_last else "cnp"
    return _get(("sums", p, layout), lambda: _build_sums(p, agents_last))


def _build_sums(p: int, agents_last: bool) -> Any:
    layout = "pcn" if agents_last else "cnp"
    if p > _MAX_UNROLLED:
        return _generic_sums(agents_last)

    def at(q: int) -> str:
        return f"out[{q}, r, k]" if agents_last else f"out[r, k, {q}]"

    src = _SUMS_TEMPLATE.format(
        p=p, layout=layout,
        init="\n".join(f"        a{q} = start[{q}]" for q in range(p)),
        body="\n".join(f"            a{q} += table[i, {q}]\n            {at(q)} = a{q}" for q in range(p)),
        ahead=_AHEAD, fetch=_fetch_row(f"perms[r, k + {_AHEAD}]", p, 16))
    return compile_source(src, f"running_sums_p{p}_{layout}", __file__, __name__, prefetch=_prefetch())


def _generic_sums(agents_last: bool) -> Any:
    import numba
    import numpy as np

    @numba.njit(nogil=True, cache=True)
    def running_sums_any(table: Any, start: Any, perms: Any, out: Any, agents_last: bool) -> None:
        c, n = perms.shape
        p = table.shape[1]
        acc = np.empty(p)
        for r in range(c):
            for q in range(p):
                acc[q] = start[q]
            for k in range(n):
                i = perms[r, k]
                for q in range(p):
                    acc[q] += table[i, q]
                    if agents_last:
                        out[q, r, k] = acc[q]
                    else:
                        out[r, k, q] = acc[q]

    return lambda table, start, perms, out: running_sums_any(table, start, perms, out, agents_last)


_PRODUCTS_TEMPLATE = '''
def running_products_p{p}(table, start, total, coef, perms, fwd, rev, reverse):
    c = perms.shape[0]
    n = perms.shape[1]
    flat = table.reshape(table.size)
    for r in range(c):
{init}
        for k in range(n):
            if k + {ahead} < n:
{fetch}
            i = perms[r, k]
{body}
            fwd[r, k] = {product} * coef
            if reverse:
                rev[r, k] = {product_rev} * coef
'''


def running_products_kernel(p: int) -> Any:
    """``kernel(table (N, P), start (P,), total (P,), coef, perms (c, N), fwd (c, N), rev (c, N), reverse)``:
    with the running sums g_k = start + Σ_{l≤k} table[perms[r, l]] (sequential float64 additions),
    ``fwd[r, k] = g_{k,0} · g_{k,1} ⋯ · coef`` and, when ``reverse``, ``rev[r, k] = (total − g_k)_0 ⋯ · coef``
    (products in index order, then the coefficient; the suffix after position k has sums total − g_k).
    The outer function (e.g. log1p) is then applied by numpy to the whole rows, as before."""
    return _get(("products", p), lambda: _build_products(p))


def _build_products(p: int) -> Any:
    return _compile_products(_PRODUCTS_TEMPLATE, f"running_products_p{p}", p, start="start", indent=8,
                             row=f"perms[r, k + {_AHEAD}]")


def _compile_products(template: str, name: str, p: int, *, start: str, indent: int, row: str) -> Any:
    """A running-products template for ``p`` factors (the sums' start read from ``start``; ``indent``: of the
    loop body's outer level; ``row``: the index expression of the row the walk prefetches), compiled."""
    if not 1 <= p <= _MAX_UNROLLED:
        raise ValueError(f"running products are compiled for 1..{_MAX_UNROLLED} factors; got {p}")
    pad, inner = " " * indent, " " * (indent + 4)
    src = template.format(
        p=p,
        init="\n".join(f"{pad}a{q} = {start}[{q}]" for q in range(p)),
        body="\n".join(f"{inner}a{q} += table[i, {q}]" for q in range(p)),
        product=" * ".join(f"a{q}" for q in range(p)),
        product_rev=" * ".join(f"(total[{q}] - a{q})" for q in range(p)),
        store="\n".join(f"{pad}{start}[{q}] = a{q}" for q in range(p)),
        ahead=_AHEAD, fetch=_fetch_row(row, p, indent + 8))
    return compile_source(src, name, __file__, __name__, prefetch=_prefetch())


_SEGMENT_TEMPLATE = '''
def running_products_segment_p{p}(table, state, total, coef, perm, lo, hi, fwd, rev):
    flat = table.reshape(table.size)
{init}
    for k in range(lo, hi):
        if k + {ahead} < hi:
{fetch}
        i = perm[k]
{body}
        fwd[k - lo] = {product} * coef
        rev[k - lo] = {product_rev} * coef
{store}
'''


def running_products_segment(p: int) -> Any:
    """``kernel(table (N, P), state (P,), total (P,), coef, perm (N,), lo, hi, fwd, rev)``: positions
    ``lo … hi − 1`` of :func:`running_products_kernel`'s walk (both directions), the running sums starting
    from ``state`` and left in it for the next segment — so a walk cut into segments makes the same
    additions in the same order (the same bits) with O(segment) scratch instead of two (N,) rows."""
    return _get(("products_segment", p), lambda: _build_products_segment(p))


def _build_products_segment(p: int) -> Any:
    return _compile_products(_SEGMENT_TEMPLATE, f"running_products_segment_p{p}", p, start="state", indent=4,
                             row=f"perm[k + {_AHEAD}]")


def edge_running_sums(order: Any, ei: Any, ej: Any, we: Any, own: Any, q0: float, pos: Any, q: Any,
                      q_rev: Any = None) -> None:
    """The network-quadratic game along ``order`` (players joining one after another): an edge (i, j) with
    weight ``we`` enters when the later of its two endpoints joins; ``q[k] = q0 + Σ_{l≤k} (own[order[l]] +
    weights entering at l)``. The same additions in the same order as ``np.bincount`` + ``cumsum``
    (``pos`` is scratch: the position of each player).

    With ``q_rev``, also the same sums along the reversed order (what ``order[::-1]`` alone would give, bit
    for bit) from the same pass: an edge enters the reversed walk when the earlier of its endpoints joins
    the forward one. The random reads (each edge's endpoint positions, each player's ``own``) are shared,
    and the rows they miss on are prefetched ``_AHEAD`` edges (players) ahead, two stages deep for the
    edges (position, then the sum it adds to). It changes no number; an antithetic pair on 3.3·10⁶ active
    players of a 10⁷-agent network took 268 ms instead of 470 (``benchmarks/bench_network_walk.py``)."""
    both = q_rev is not None
    _get("edges", _build_edges)(order, ei, ej, we, own, q0, pos, q, q_rev if both else q, both)


def _build_edges() -> Any:
    ahead = _AHEAD

    def edges(order: Any, ei: Any, ej: Any, we: Any, own: Any, q0: float, pos: Any, q: Any, qr: Any,
              both: bool) -> None:
        na = order.size
        last = na - 1
        for k in range(na):
            if k + ahead < na:
                prefetch(pos, order[k + ahead], 1)
            pos[order[k]] = k
            q[k] = 0.0
            qr[k] = 0.0
        ne = ei.size
        for e in range(ne):
            if e + 2 * ahead < ne:
                prefetch(pos, ej[e + 2 * ahead], 0)
            if e + ahead < ne:
                a = pos[ei[e + ahead]]
                b = pos[ej[e + ahead]]
                prefetch(q, a if a > b else b, 1)
                if both:
                    prefetch(qr, last - (b if a > b else a), 1)
            a = pos[ei[e]]
            b = pos[ej[e]]
            q[a if a > b else b] += we[e]
            if both:
                qr[last - (b if a > b else a)] += we[e]
        # each player's own term, read once (a random read per player) and used by both walks
        acc = 0.0
        for k in range(na):
            if k + ahead < na:
                prefetch(own, order[k + ahead], 0)
            d = q[k] + own[order[k]]
            acc = d if k == 0 else acc + d
            q[k] = acc + q0
            if both:
                qr[last - k] += own[order[k]]
        if both:
            acc = 0.0
            for k in range(na):
                acc = qr[k] if k == 0 else acc + qr[k]
                qr[k] = acc + q0

    return njit_bound(edges, prefetch=_prefetch())


def scatter_pair(vf: Any, vr: Any, v0: float, order: Any, out: Any) -> None:
    """The antithetic unit in player order: ``out[order[k]] = ((vf[k] − vf[k−1]) + (vr[j] − vr[j−1])) · ½``
    with ``j = n − 1 − k`` (``v0`` before the first): ``vf`` the game along ``order``, ``vr`` along its
    reverse. The same bits as scattering each walk's marginals and then ``fwd += rev; fwd *= 0.5``."""
    _get("pair", _build_pair)(vf, vr, v0, order, out)


def _build_pair() -> Any:
    ahead = _AHEAD

    def pair(vf: Any, vr: Any, v0: float, order: Any, out: Any) -> None:
        n = order.size
        last = n - 1
        for k in range(n):
            if k + ahead < n:
                prefetch(out, order[k + ahead], 1)
            j = last - k
            mf = vf[k] - (vf[k - 1] if k > 0 else v0)
            mr = vr[j] - (vr[j - 1] if j > 0 else v0)
            out[order[k]] = (mf + mr) * 0.5

    return njit_bound(pair, prefetch=_prefetch())


def moments_add(units: Any, shift: Any, s1: Any, s2: Any) -> None:
    """For each row u of ``units`` (c, N), in order: d = u − shift; s1 += d; s2 += d·d (one pass; float64).
    s1 gets the same additions as three torch passes would; s2's d·d is rounded before the addition
    (torch's vectorised addcmul fuses it: standard errors may differ in the last bit)."""
    _get("moments", _build_moments)(units, shift, s1, s2)


def _build_moments() -> Any:
    import numba

    @numba.njit(nogil=True, cache=True)
    def moments(units: Any, shift: Any, s1: Any, s2: Any) -> None:
        c, n = units.shape
        for r in range(c):
            for i in range(n):
                d = units[r, i] - shift[i]
                s1[i] += d
                s2[i] += d * d

    return moments


def masked_sums(masks: Any, delta: Any, out: Any) -> None:
    """``out[r, p] = Σ_j masks[r, j] · delta[j, p]``, the players added in order j = 0, 1, … (products then sums,
    as ``torch.cumsum(m * delta[:, p], dim=1)[:, -1]``: the same bits), a row at a time, so a coalition's sums
    never depend on the other rows of its batch. ``masks`` (c, N) bool, ``delta`` (N, P) and ``out`` (c, P)
    float64."""
    _get("masked_sums", _build_masked_sums)(masks, delta, out)


def _build_masked_sums() -> Any:
    import numba

    @numba.njit(nogil=True, cache=True)
    def sums(masks: Any, delta: Any, out: Any) -> None:
        c, n = masks.shape
        p_n = delta.shape[1]
        for r in range(c):
            for p in range(p_n):
                out[r, p] = (1.0 if masks[r, 0] else 0.0) * delta[0, p]
            for j in range(1, n):
                m = 1.0 if masks[r, j] else 0.0
                for p in range(p_n):
                    out[r, p] += m * delta[j, p]

    return sums


def msr_add(masks: Any, d: Any, s_in: Any, q_in: Any) -> None:
    """For each sample r in order: ``s_in += masks[r] · d[r]``, ``q_in += masks[r] · d[r]²`` (d² rounded first;
    the same bits as ``np.add.accumulate`` over the rows ``d[:, None] · masks`` and ``(d · d)[:, None] · masks``)."""
    _get("msr_add", _build_msr_add)(masks, d, s_in, q_in)


def _build_msr_add() -> Any:
    import numba

    @numba.njit(nogil=True, cache=True)
    def add(masks: Any, d: Any, s_in: Any, q_in: Any) -> None:
        c, n = masks.shape
        for r in range(c):
            dr = d[r]
            dd = dr * dr
            for j in range(n):
                m = 1.0 if masks[r, j] else 0.0
                s_in[j] += m * dr
                q_in[j] += m * dd

    return add


def scatter_steps(vals: Any, v0: float, perms: Any, out: Any) -> None:
    """``out[r, perms[r, k]] = vals[r, k] − vals[r, k − 1]`` (``v0`` before the first)."""
    _get("steps", _build_steps)(vals, v0, perms, out)


def scatter_steps_reversed(u: Any, v_full: float, perms: Any, out: Any) -> None:
    """The reversed permutation's marginals from ``u[r, k] = v(perms[r, k+1:])``: player ``perms[r, k]`` joins
    the suffix after it, ``out[r, perms[r, k]] = u[r, k − 1] − u[r, k]`` (``v_full`` before the first)."""
    _get("steps_rev", _build_steps_reversed)(u, v_full, perms, out)


def scatter_antithetic(vals: Any, u: Any, v0: float, v_full: float, perms: Any, out: Any) -> None:
    """The antithetic unit in player order from a walk's prefix values ``vals[r, k] = v(π[:k+1])`` and suffix
    values ``u[r, k] = v(π[k+1:])``: ``out[r, π_k] = ((vals[r, k] − vals[r, k − 1]) + (u[r, k − 1] − u[r, k]))
    · ½`` (``v0`` / ``v_full`` before the first). The same bits as :func:`scatter_steps` and
    :func:`scatter_steps_reversed` into two arrays, then ``fwd += rev; fwd *= 0.5``; one random write per
    player instead of two and no second array."""
    _get("steps_anti", _build_steps_antithetic)(vals, u, v0, v_full, perms, out)


def _build_steps_antithetic() -> Any:
    ahead = _AHEAD

    def steps_antithetic(vals: Any, u: Any, v0: float, v_full: float, perms: Any, out: Any) -> None:
        c, n = perms.shape
        for r in range(c):
            prev = v0
            prev_u = v_full
            row = out[r]
            for k in range(n):
                if k + ahead < n:
                    prefetch(row, perms[r, k + ahead], 1)
                v = vals[r, k]
                w = u[r, k]
                out[r, perms[r, k]] = ((v - prev) + (prev_u - w)) * 0.5
                prev = v
                prev_u = w

    return njit_bound(steps_antithetic, prefetch=_prefetch())


def _build_steps() -> Any:
    ahead = _AHEAD

    def steps(vals: Any, v0: float, perms: Any, out: Any) -> None:
        c, n = perms.shape
        for r in range(c):
            prev = v0
            row = out[r]
            for k in range(n):
                if k + ahead < n:
                    prefetch(row, perms[r, k + ahead], 1)
                v = vals[r, k]
                out[r, perms[r, k]] = v - prev
                prev = v

    return njit_bound(steps, prefetch=_prefetch())


def _build_steps_reversed() -> Any:
    ahead = _AHEAD

    def steps_reversed(u: Any, v_full: float, perms: Any, out: Any) -> None:
        c, n = perms.shape
        for r in range(c):
            prev = v_full
            row = out[r]
            for k in range(n):
                if k + ahead < n:
                    prefetch(row, perms[r, k + ahead], 1)
                v = u[r, k]
                out[r, perms[r, k]] = prev - v
                prev = v

    return njit_bound(steps_reversed, prefetch=_prefetch())


__all__ = ["available", "draw_permutations", "edge_running_sums", "moments_add", "running_products_kernel",
           "running_products_segment", "running_sums_kernel", "scatter_antithetic", "scatter_pair", "scatter_steps",
           "scatter_steps_reversed"]
