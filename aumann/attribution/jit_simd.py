"""Explicit vector code (LLVM IR through numba intrinsics) for the weighted row sums of the closed forms.

The loop φ_i = Σ_d z_{i,d} c_d followed by the row sum Σ_i φ_i in ``_LANES`` side-by-side accumulators is
what :mod:`aumann.attribution.jit` computes; written in Python, LLVM vectorises the first half but leaves
the accumulators scalar (their additions are a dependency chain the vectoriser will not reorder, rightly:
reordering would change the rounding). Here a group of 8 agents is one load of 8·D consecutive values,
split into D vectors of 8 lanes (one per feature) by shuffles; φ of the 8 agents is one vector, computed
with the same multiplications and additions in the same order as the scalar code (no fused multiply–add,
no reassociation), stored, and added lane-wise to one vector accumulator — lane l holds exactly the sum
the scalar accumulator ``a_l`` held. The results are the same bits; the tests compare both.

Where the output starts on a vector boundary (:func:`aumann.attribution.streaming.fresh` aligns big
outputs to 64 bytes), φ is written with streaming (non-temporal) stores: φ is not read again soon, and a
normal store first reads each output line from memory — a third of a pass over a 3-feature panel, for
nothing. The kernel ends with an ``sfence``, so the stores are visible before it returns. Measured on
the 2-core machines: the φ pass at 10⁶ × 1 from 1.16–1.20 to 0.91–0.98 ``np.sum`` passes.

Only imported by the kernel builders in :mod:`aumann.attribution.jit` (numba is imported here at once).
"""

from __future__ import annotations

import platform
import threading
from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

LANES = 8  # agents per vector (the row kernels' _LANES)
_LOCK = threading.Lock()
# streaming stores where the output is aligned (x86-64 only: the sfence after them is an x86 instruction)
NONTEMPORAL = platform.machine().lower() in ("x86_64", "amd64")
_BLOCKS: dict[int, Any] = {}


def rows_block(d: int) -> Any:
    """The intrinsic ``rows_block(flat, start, coef, out, ostart, groups) -> float64`` for D = ``d``: for
    g < groups and l < 8, with i = 8g + l, ``out[ostart + i] = ((flat[start + d·i]·coef[0] +
    flat[start + d·i + 1]·coef[1]) + …)`` (computed in float64, rounded once to out's dtype), and returns
    Σ_l (Σ_g out[ostart + 8g + l]) — the inner sums sequential in g, the lanes then added in order 0…7.
    ``flat`` and ``out`` 1-D contiguous arrays of float32/float64, ``coef`` a float64 array of length ≥ d."""
    fn = _BLOCKS.get(d)
    if fn is None:
        with _LOCK:
            fn = _BLOCKS.get(d)
            if fn is None:
                fn = _BLOCKS[d] = _make_rows_block(d)
    return fn


def _make_rows_block(d: int) -> Any:
    width = LANES * d

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        xty, _, cty, oty, _, _ = sig.args
        xs = context.make_array(xty)(context, builder, args[0])
        cs = context.make_array(cty)(context, builder, args[2])
        outs = context.make_array(oty)(context, builder, args[3])
        start, ostart, groups = args[1], args[4], args[5]
        i64, i32, f64 = ir.IntType(64), ir.IntType(32), ir.DoubleType()
        xel, oel = context.get_value_type(xty.dtype), context.get_value_type(oty.dtype)
        vin, vd, vout = ir.VectorType(xel, width), ir.VectorType(f64, LANES), ir.VectorType(oel, LANES)
        undef = ir.Constant(vd, ir.Undefined)
        coefs = []
        for k in range(d):  # splat c_k across the 8 lanes
            ck = builder.load(builder.gep(cs.data, [ir.Constant(i64, k)]))
            coefs.append(builder.shuffle_vector(builder.insert_element(undef, ck, ir.Constant(i32, 0)), undef,
                                                ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)))
        xbase = builder.gep(xs.data, [start])
        obase = builder.gep(outs.data, [ostart])
        osize = oty.dtype.bitwidth // 8
        # φ is written once and not read again here: where the output is aligned to its vector size, the
        # stores bypass the cache (non-temporal), which spares the read of each output line before its write
        aligned = builder.icmp_unsigned("==", builder.and_(builder.ptrtoint(obase, i64),
                                                           ir.Constant(i64, LANES * osize - 1)), ir.Constant(i64, 0))
        if not NONTEMPORAL:
            aligned = ir.Constant(ir.IntType(1), 0)
        entry = builder.block
        done = builder.append_basic_block("rows.done")
        results = []
        heads = []
        for streaming in (True, False):
            head = builder.append_basic_block("rows.head")
            body = builder.append_basic_block("rows.body")
            exit_ = builder.append_basic_block("rows.exit")
            heads.append(head)
            builder.position_at_end(head)
            g = builder.phi(i64)
            acc = builder.phi(vd)
            g.add_incoming(ir.Constant(i64, 0), entry)
            acc.add_incoming(ir.Constant(vd, [0.0] * LANES), entry)
            builder.cbranch(builder.icmp_signed("<", g, groups), body, exit_)
            builder.position_at_end(body)
            src = builder.bitcast(builder.gep(xbase, [builder.mul(g, ir.Constant(i64, width))]), vin.as_pointer())
            vals = builder.load(src, align=xty.dtype.bitwidth // 8)  # element alignment only
            phi = None
            for k in range(d):  # feature k of the 8 agents: elements k, k + d, …, k + 7d
                col = builder.shuffle_vector(vals, ir.Constant(vin, ir.Undefined),
                                             ir.Constant(ir.VectorType(i32, LANES),
                                                         [k + d * lane for lane in range(LANES)]))
                if xel != f64:
                    col = builder.fpext(col, vd)
                term = builder.fmul(col, coefs[k])
                phi = term if phi is None else builder.fadd(phi, term)
            stored = phi if oel == f64 else builder.fptrunc(phi, vout)
            dst = builder.bitcast(builder.gep(obase, [builder.mul(g, ir.Constant(i64, LANES))]), vout.as_pointer())
            if streaming:
                st = builder.store(stored, dst, align=LANES * osize)
                st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(i32, 1)]))
            else:
                builder.store(stored, dst, align=osize)
            back = stored if oel == f64 else builder.fpext(stored, vd)  # the sums add the stored (rounded) values
            acc.add_incoming(builder.fadd(acc, back), body)
            g.add_incoming(builder.add(g, ir.Constant(i64, 1)), body)
            builder.branch(head)
            builder.position_at_end(exit_)
            tot = builder.extract_element(acc, ir.Constant(i32, 0))
            for lane in range(1, LANES):
                tot = builder.fadd(tot, builder.extract_element(acc, ir.Constant(i32, lane)))
            results.append((tot, exit_))
            builder.branch(done)
        builder.position_at_end(entry)
        builder.cbranch(aligned, heads[0], heads[1])
        builder.position_at_end(done)
        out = builder.phi(f64)
        for tot, block in results:
            out.add_incoming(tot, block)
        if NONTEMPORAL:  # non-temporal stores are weakly ordered: an sfence makes them visible before returning
            sfence = builder.module.declare_intrinsic("llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), []))
            builder.call(sfence, [])
        return out

    @intrinsic
    def rows_block_d(typingctx: Any, flat: Any, start: Any, coef: Any, out: Any, ostart: Any, groups: Any) -> Any:
        for arr in (flat, out):
            if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"
                    and arr.dtype in (types.float32, types.float64)):
                return None
        if not (isinstance(coef, types.Array) and coef.dtype == types.float64 and coef.layout == "C"):
            return None
        return types.float64(flat, types.intp, coef, out, types.intp, types.intp), codegen

    rows_block_d.__name__ = f"rows_block_d{d}"
    return rows_block_d


_ROWS_TEMPLATE = '''
def rows_blocks_d{d}(x, c, g0, g1, nblk, out, R):
    n = x.shape[1]
    body = n // {lanes} * {lanes}
    coef = np.empty({d})
    t_prev = -1
    for g in range(g0, g1):
        t = g // nblk
        j = g - t * nblk
        if t != t_prev:
            for k in range({d}):
                coef[k] = c[t, k]
            t_prev = t
        i = j * {block}
        end = min(body, i + {block})
        R[t, j] = rows_block(x[t].reshape(n * {d}), {d} * i, coef, out[t], i, (end - i) // {lanes})
'''


def rows_blocks_source(d: int, block: int) -> tuple[str, str, dict[str, Any]]:
    """The source of :func:`aumann.attribution.jit.rows_blocks_kernel` for D = ``d`` and blocks of ``block``
    agents (a multiple of ``LANES``): a loop over blocks calling :func:`rows_block`; its function's name
    and the globals it needs."""
    return _ROWS_TEMPLATE.format(d=d, lanes=LANES, block=block), f"rows_blocks_d{d}", {"rows_block": rows_block(d)}


__all__ = ["rows_block", "rows_blocks_source"]
