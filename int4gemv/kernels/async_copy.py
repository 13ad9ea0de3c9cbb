"""``cp.async`` (sm_80+): global-to-shared copies that hold bytes in flight without registers,
with faithful stand-ins for Numba's simulator.

- :func:`cp_async16` / :func:`cp_async4`: ``cp.async.cg.shared.global`` (16 bytes, L2 only) /
  ``cp.async.ca.shared.global`` (4 bytes) from byte ``src_index`` of a uint8 array to word
  ``dst_index`` of a uint32 shared array; where ``valid`` is false nothing is read (``src-size``
  0) and the destination is zero-filled. Both addresses must be aligned to the copy's size, and
  the source address must lie in the array even when not ``valid`` (callers clamp it).
- :func:`async_commit`: ``cp.async.commit_group``: the thread's copies issued since the last
  commit form one group.
- ``ASYNC_WAITS[n]()``: ``cp.async.wait_group n`` (n = 0..3, an immediate): returns once at most
  the ``n`` newest committed groups of the thread are pending; the others' bytes are in shared
  memory and visible to the issuing thread (only to it: no barrier is implied). A GPU kernel
  cannot index the tuple: bind the wait it uses to a module-level name first.
- :func:`load16_shared`: ``ld.shared.v4.u32``: 4 words from word ``index`` (16-byte aligned).

The simulator's copies are deferred to the latest moment the hardware allows: a copy is
performed only when a ``wait_group`` retires its group (uncommitted copies never land), so a
kernel that reads a slot before waiting for it, or waits for too few groups, reads stale data.
Its source bytes are read when issued. Each simulator thread keeps its own queue, and a shared
word that two threads of a block copy into raises (the copies carry no barrier; the kernels here
give every thread its own words).
"""

from __future__ import annotations

import threading

import numpy as np

from .intrinsics import SIMULATED

__all__ = ["cp_async16", "cp_async4", "async_commit", "ASYNC_WAITS", "load16_shared"]

if SIMULATED:

    def _queue():
        me = threading.current_thread()
        state = getattr(me, "_int4gemv_cp_async", None)
        if state is None:
            state = me._int4gemv_cp_async = ([], [])     # (open copies, committed groups)
        return state

    def _issue(nbytes, dst, dst_index, src, src_index, valid):
        dst_index, src_index = int(dst_index), int(src_index)
        if dst_index * 4 % nbytes or src_index % nbytes:
            raise ValueError(f"cp.async of {nbytes} bytes: misaligned word {dst_index} / "
                             f"byte {src_index}")
        src[src_index + nbytes - 1]       # the address must lie in the array (raises if not)
        # only the issuing thread may rely on the bytes (no barrier here): the kernels give every
        # thread its own words, and two threads copying into one word is refused
        me = threading.current_thread()
        owners = me._manager.__dict__.setdefault("_int4gemv_cp_async_owners", {})
        for w in range(dst_index, dst_index + nbytes // 4):
            if owners.setdefault((id(dst), w), me.thread_id) != me.thread_id:
                raise RuntimeError(f"cp.async: shared word {w} copied by two threads")
        data = (np.array([src[src_index + i] for i in range(nbytes)], np.uint8) if valid
                else np.zeros(nbytes, np.uint8))
        _queue()[0].append((dst, dst_index, data.view(np.uint32)))

    def cp_async16(dst, dst_index, src, src_index, valid):
        """16 bytes ``src[src_index:]`` -> ``dst[dst_index:dst_index + 4]`` (zeros if not
        ``valid``), performed when a :data:`ASYNC_WAITS` retires its group."""
        _issue(16, dst, dst_index, src, src_index, valid)

    def cp_async4(dst, dst_index, src, src_index, valid):
        """4 bytes ``src[src_index:]`` -> ``dst[dst_index]`` (zero if not ``valid``), performed
        when a :data:`ASYNC_WAITS` retires its group."""
        _issue(4, dst, dst_index, src, src_index, valid)

    def async_commit():
        """The copies issued since the last commit become one group."""
        copies, groups = _queue()
        groups.append(list(copies))
        copies.clear()

    def _wait(pending):
        def wait():
            groups = _queue()[1]
            while len(groups) > pending:
                for dst, index, words in groups.pop(0):
                    for i, word in enumerate(words):
                        dst[index + i] = word
        wait.__doc__ = f"``cp.async.wait_group {pending}``: all but the {pending} newest groups land."
        return wait

    ASYNC_WAITS = tuple(_wait(n) for n in range(4))

    def load16_shared(array, index):
        """4 words from word ``index`` of a shared uint32 array."""
        i = int(index)
        return (np.uint32(array[i]), np.uint32(array[i + 1]), np.uint32(array[i + 2]),
                np.uint32(array[i + 3]))

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    from .inline_ptx import element_address, void_asm

    _I32, _I64 = ir.IntType(32), ir.IntType(64)

    def _copy(nbytes, cache):
        text = ("{ .reg .u64 s; cvta.to.shared.u64 s, $0; "
                f"cp.async.{cache}.shared.global [s], [$1], {nbytes}, $2; }}")

        def copy(typingctx, dst, dst_index, src, src_index, valid):
            if not (isinstance(dst, types.Array) and isinstance(src, types.Array)):
                return None

            def codegen(context, builder, signature, args):
                dt, di, st, si, vt = signature.args
                d = element_address(context, builder, dt, args[0], di, args[1])
                s = element_address(context, builder, st, args[2], si, args[3])
                ok = context.cast(builder, args[4], vt, types.boolean)
                size = builder.select(ok, ir.Constant(_I32, nbytes), ir.Constant(_I32, 0))
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I64, _I64, _I32]), text,
                                   "l,l,r,~{memory}", side_effect=True)
                builder.call(asm, [d, s, size])
                return context.get_dummy_value()
            return types.void(dst, dst_index, src, src_index, valid), codegen
        return copy

    cp_async16 = intrinsic(_copy(16, "cg"))
    cp_async16.__doc__ = "``cp.async.cg.shared.global`` of 16 bytes (``src-size`` 0 if not valid)."
    cp_async4 = intrinsic(_copy(4, "ca"))
    cp_async4.__doc__ = "``cp.async.ca.shared.global`` of 4 bytes (``src-size`` 0 if not valid)."

    async_commit = void_asm("cp.async.commit_group;", "``cp.async.commit_group``.")
    ASYNC_WAITS = tuple(void_asm(f"cp.async.wait_group {n};", f"``cp.async.wait_group {n}``.")
                        for n in range(4))

    @intrinsic
    def load16_shared(typingctx, array, index):
        """``ld.shared.v4.u32``: 4 words from word ``index`` of a shared uint32 array (volatile:
        never moved above a ``cp.async.wait_group``)."""
        if not isinstance(array, types.Array) or array.ndim != 1:
            return None
        ret = types.UniTuple(types.uint32, 4)

        def codegen(context, builder, signature, args):
            address = element_address(context, builder, signature.args[0], args[0], signature.args[1],
                                      args[1])
            asm = ir.InlineAsm(ir.FunctionType(ir.LiteralStructType([_I32] * 4), [_I64]),
                               "{ .reg .u64 s; cvta.to.shared.u64 s, $4; "
                               "ld.shared.v4.u32 {$0, $1, $2, $3}, [s]; }",
                               "=r,=r,=r,=r,l,~{memory}", side_effect=True)
            result = builder.call(asm, [address])
            return context.make_tuple(builder, ret, [builder.extract_value(result, i)
                                                      for i in range(4)])
        return ret(array, index), codegen
