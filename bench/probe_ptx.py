"""Device-only inline PTX for the M = 1 probes (:mod:`bench.probe_bulk`, :mod:`bench.probe_tcm1`),
and their offline SASS (:func:`ptx_to_sass`). Probes, not package kernels: these intrinsics have
no simulator stand-ins."""

from __future__ import annotations

import functools
import os

__all__ = ["probe_intrinsics", "ptx_to_sass"]


@functools.lru_cache(maxsize=None)
def probe_intrinsics():
    """Device-only inline PTX. Shared-memory operands are 32-bit shared addresses (``uint32``),
    computed once from an array by ``smem_base`` and advanced in plain integer arithmetic."""
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    i32, i64 = ir.IntType(32), ir.IntType(64)

    def u32(context, builder, value, ty):
        return context.cast(builder, value, ty, types.uint32)

    def void_call(builder, text, constraints, args, argtypes):
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), argtypes), text,
                           constraints + (",~{memory}" if constraints else "~{memory}"),
                           side_effect=True)
        builder.call(asm, args)

    @intrinsic
    def smem_base(typingctx, array):
        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            generic = builder.ptrtoint(ary.data, i64)
            cvta = ir.InlineAsm(ir.FunctionType(i64, [i64]), "cvta.to.shared.u64 $0, $1;", "=l,l")
            return builder.trunc(builder.call(cvta, [generic]), i32)
        return types.uint32(array), codegen

    def _op1(text):
        def fn(typingctx, a):
            def codegen(context, builder, sig, args):
                void_call(builder, text, "r", [u32(context, builder, args[0], sig.args[0])], [i32])
                return context.get_dummy_value()
            return types.void(a), codegen
        return intrinsic(fn)

    def _op2(text):
        def fn(typingctx, a, b):
            def codegen(context, builder, sig, args):
                vals = [u32(context, builder, v, t) for v, t in zip(args, sig.args)]
                void_call(builder, text, "r,r", vals, [i32, i32])
                return context.get_dummy_value()
            return types.void(a, b), codegen
        return intrinsic(fn)

    mbar_init = _op2("mbarrier.init.shared::cta.b64 [$0], $1;")
    mbar_expect = _op2("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;")
    mbar_arrive = _op1("mbarrier.arrive.shared::cta.b64 _, [$0];")
    mbar_wait = _op2(
        "{\n.reg .pred p;\nLAB_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n"
        "@p bra DONE;\nbra LAB_WAIT;\nDONE:\n}")

    @intrinsic
    def fence_init(typingctx):
        def codegen(context, builder, sig, args):
            void_call(builder, "fence.mbarrier_init.release.cluster; fence.proxy.async.shared::cta;",
                      "", [], [])
            return context.get_dummy_value()
        return types.void(), codegen

    @intrinsic
    def bulk_copy(typingctx, dst, src, src_i, nbytes, bar):
        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[1])(context, builder, args[1])
            idx = context.cast(builder, args[2], sig.args[2], types.int64)
            s = builder.ptrtoint(builder.gep(ary.data, [idx]), i64)
            void_call(builder, "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                      "[$0], [$1], $2, [$3];", "r,l,r,r",
                      [u32(context, builder, args[0], sig.args[0]), s,
                       u32(context, builder, args[3], sig.args[3]),
                       u32(context, builder, args[4], sig.args[4])], [i32, i64, i32, i32])
            return context.get_dummy_value()
        return types.void(dst, src, src_i, nbytes, bar), codegen

    @intrinsic
    def lds128(typingctx, addr):
        ret = types.UniTuple(types.uint32, 4)

        def codegen(context, builder, sig, args):
            st = ir.LiteralStructType([i32] * 4)
            asm = ir.InlineAsm(ir.FunctionType(st, [i32]), "ld.shared.v4.u32 {$0, $1, $2, $3}, [$4];",
                               "=r,=r,=r,=r,r,~{memory}", side_effect=True)
            r = builder.call(asm, [u32(context, builder, args[0], sig.args[0])])
            return context.make_tuple(builder, ret, [builder.extract_value(r, k) for k in range(4)])
        return ret(addr), codegen

    @intrinsic
    def lds16(typingctx, addr):
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(16), [i32]), "ld.shared.u16 $0, [$1];",
                               "=h,r,~{memory}", side_effect=True)
            v = builder.call(asm, [u32(context, builder, args[0], sig.args[0])])
            return builder.zext(v, i32)
        return types.uint32(addr), codegen

    @intrinsic
    def pack_pinned(typingctx, lo, hi):
        """``lo | hi << 16`` (low halves) through a volatile ``prmt``: computed where it is
        written, never re-done inside a loop by the compiler."""
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(i32, [i32, i32]), "prmt.b32 $0, $1, $2, 0x5410;",
                               "=r,r,r", side_effect=True)
            return builder.call(asm, [u32(context, builder, v, t) for v, t in zip(args, sig.args)])
        return types.uint32(lo, hi), codegen

    @intrinsic
    def f16(typingctx, bits):
        """``cvt.f32.f16``: the float32 value of fp16 bits (an fp16 scale)."""
        def codegen(context, builder, sig, args):
            v = builder.trunc(context.cast(builder, args[0], sig.args[0], types.uint32), ir.IntType(16))
            asm = ir.InlineAsm(ir.FunctionType(ir.FloatType(), [ir.IntType(16)]),
                               "cvt.f32.f16 $0, $1;", "=f,h")
            return builder.call(asm, [v])
        return types.float32(bits), codegen

    return dict(f16=f16, pack_pinned=pack_pinned, smem_base=smem_base, mbar_init=mbar_init, fence_init=fence_init, mbar_expect=mbar_expect,
                mbar_arrive=mbar_arrive, mbar_wait=mbar_wait, bulk_copy=bulk_copy, lds128=lds128,
                lds16=lds16)


def ptx_to_sass(py_func, sig, threads: int, blocks_per_sm: int, path: str, hex: bool = False) -> tuple:
    """Offline (no GPU): ``py_func`` compiled to PTX here (compute_90), ``ptxas -arch=sm_90a -v``,
    ``nvdisasm`` (``-hex`` with ``hex``: each instruction's encoding, which
    :func:`bench.sass_control.annotate` decodes); the listing written to ``path``. Returns
    ``(ptxas report lines, listing)``."""
    import subprocess
    import tempfile

    from numba import cuda
    from numba.cuda.cudadrv import nvrtc

    nvrtc.get_arch_option = lambda major, minor: f"compute_{major}{minor}"
    ptx, _ = cuda.compile_ptx(py_func, sig, cc=(9, 0), launch_bounds=(threads, blocks_per_sm))
    p = os.path.join(tempfile.mkdtemp(), "k.ptx")
    with open(p, "w") as f:
        f.write(ptx)
    r = subprocess.run(["ptxas", "-arch=sm_90a", "-v", p, "-o", p + ".cubin"], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    listing = subprocess.run(["nvdisasm"] + ["-hex"] * hex + ["-c", p + ".cubin"], capture_output=True,
                             text=True).stdout
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(listing)
    return r.stderr.strip().splitlines(), listing


def launch_and_time(bench, kernel, args_for, grid: int, threads: int, out, replays: int) -> tuple:
    """A probe kernel bound once per rotated weight copy of ``bench`` (a
    :class:`~int4gemv.benchmark.GemvBench`; ``args_for(device_arrays) -> args``), one launch
    checked first (``out``, a float32 device array, poisoned with NaN), then timed in graph
    replays. Returns ``(output on the host, timing)``."""
    import numpy as np
    from numba import cuda

    from int4gemv.launcher import bind

    launches = [bind(kernel, args_for(q.device_arrays()), (grid, 1, 1), (threads, 1, 1))
                for q in bench.weights]

    def issue(i, stream):
        launches[i % len(launches)].launch(int(stream or 0))

    out.copy_to_device(np.full(out.shape, np.nan, np.float32))
    issue(0, 0)
    cuda.synchronize()
    return out.copy_to_host(), bench.graph_timer(issue, max(len(launches), 20), replays)
