"""Warp-level tensor-core product ``mma.sync.aligned.m16n8k16`` (fp32 accumulate), with a faithful
stand-in for Numba's simulator.

``mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)`` (and ``mma_bf16``) is one
``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32``: ``D = A · B + C`` with
``A`` 16×16 (row-major), ``B`` 16×8 (column-major), ``C``/``D`` 16×8 float32, spread over the 32
lanes of a warp. ``a*``/``b*`` are uint32 holding two 16-bit values (low half = the smaller
column/row index); the result is a tuple of four float32. Lane ``l`` has ``g = l // 4``,
``t = l % 4`` and holds (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type")::

    a0: A[g,     2t : 2t+2]      a1: A[g + 8, 2t : 2t+2]
    a2: A[g,     2t+8 : 2t+10]   a3: A[g + 8, 2t+8 : 2t+10]
    b0: B[2t : 2t+2,    g]       b1: B[2t+8 : 2t+10, g]
    c0, c1: C[g, 2t], C[g, 2t+1]   c2, c3: C[g + 8, 2t], C[g + 8, 2t+1]   (D likewise)

Every lane of the warp must execute the same ``mma`` (``.sync.aligned``). On hardware it is
inline PTX through an llvmlite intrinsic (the four results come back as a literal struct). On the
simulator each thread publishes its registers to its warp (a per-warp barrier: the simulator runs
every CUDA thread as a Python thread and has no warp primitives), every lane assembles ``A``,
``B`` and ``C`` from the 32 lanes with the mapping above, computes ``A · B + C`` in float64 and
keeps its own four results rounded to float32 (the hardware's fp32 accumulation order is
unspecified; float64 is its exact limit). ``tests/test_tensor_core.py`` checks this mapping
against a float64 product with fragments loaded by an independent kernel, on the simulator and on
the GPU alike.
"""

from __future__ import annotations

import threading

import numpy as np

from .intrinsics import SIMULATED

__all__ = ["mma_f16", "mma_bf16", "WARP"]

WARP = 32

if SIMULATED:
    import ml_dtypes

    #: Seconds a lane waits for the rest of its warp: a lane that never arrives (divergent
    #: ``mma``, an exception) fails the launch instead of hanging it.
    _BARRIER_TIMEOUT_S = 120
    _SETUP_LOCK = threading.Lock()

    def _warp_exchange(value):
        """Every lane's ``value`` for the caller's warp (a list of 32), once all 32 lanes called."""
        me = threading.current_thread()
        manager = me._manager
        warp, lane = divmod(me.thread_id, WARP)
        with _SETUP_LOCK:
            if int(np.prod(manager._block_dim)) % WARP:
                raise RuntimeError("mma needs whole warps: the block size must be a multiple of 32")
            warps = manager.__dict__.setdefault("_int4gemv_mma_warps", {})
            if warp not in warps:
                warps[warp] = (threading.Barrier(WARP, timeout=_BARRIER_TIMEOUT_S), [None] * WARP)
        barrier, slots = warps[warp]
        slots[lane] = value
        barrier.wait()          # every lane has published
        snapshot = list(slots)
        barrier.wait()          # every lane has read before any publishes again
        return snapshot

    def _fragment_indices():
        """Row and column of every half each lane holds, in register order (module docstring)."""
        lane = np.arange(WARP)
        g, t = lane // 4, lane % 4
        pair = np.array([0, 1])
        a_rows = np.concatenate([np.repeat(r[:, None], 2, 1) for r in (g, g + 8, g, g + 8)], 1)
        a_cols = np.concatenate([c[:, None] + pair for c in (2 * t, 2 * t, 2 * t + 8, 2 * t + 8)], 1)
        b_rows = np.concatenate([c[:, None] + pair for c in (2 * t, 2 * t + 8)], 1)
        b_cols = np.repeat(g[:, None], 4, 1)
        c_rows = np.stack([g, g, g + 8, g + 8], 1)
        c_cols = np.stack([2 * t, 2 * t + 1, 2 * t, 2 * t + 1], 1)
        return a_rows, a_cols, b_rows, b_cols, c_rows, c_cols

    _INDEX = _fragment_indices()

    def _mma(dtype, regs):
        lanes = _warp_exchange(tuple(regs))
        words = np.array([r[:6] for r in lanes], dtype=np.int64).astype(np.uint32)
        halves = words.view(dtype).astype(np.float64)            # [32, 12]
        a_rows, a_cols, b_rows, b_cols, c_rows, c_cols = _INDEX
        A, B, C = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
        A[a_rows, a_cols] = halves[:, :8]
        B[b_rows, b_cols] = halves[:, 8:]
        C[c_rows, c_cols] = np.array([r[6:] for r in lanes], dtype=np.float32)
        D = (A @ B + C).astype(np.float32)
        lane = threading.current_thread().thread_id % WARP
        return tuple(D[c_rows[lane], c_cols[lane]])

    def mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` of one warp (see the module)."""
        return _mma(np.float16, (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3))

    def mma_bf16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`` of one warp (see the module)."""
        return _mma(ml_dtypes.bfloat16, (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3))

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    _I32, _F32 = ir.IntType(32), ir.FloatType()
    _RESULT = types.UniTuple(types.float32, 4)

    def _mma_intrinsic(kind):
        text = (f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 "
                "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
        constraints = ",".join(["=f"] * 4 + ["r"] * 6 + ["f"] * 4)

        def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
            def codegen(context, builder, signature, args):
                regs = [context.cast(builder, v, t, types.uint32)
                        for v, t in zip(args[:6], signature.args[:6])]
                accs = [context.cast(builder, v, t, types.float32)
                        for v, t in zip(args[6:], signature.args[6:])]
                asm = ir.InlineAsm(ir.FunctionType(ir.LiteralStructType([_F32] * 4),
                                                   [_I32] * 6 + [_F32] * 4), text, constraints)
                result = builder.call(asm, regs + accs)
                return context.make_tuple(builder, _RESULT,
                                          [builder.extract_value(result, i) for i in range(4)])
            return _RESULT(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3), codegen
        return intrinsic(mma)

    mma_f16 = _mma_intrinsic("f16")
    mma_f16.__doc__ = "``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` (see the module)."
    mma_bf16 = _mma_intrinsic("bf16")
    mma_bf16.__doc__ = "``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`` (see the module)."
