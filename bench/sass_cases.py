"""The kernels :mod:`bench.sass_m1` compiles: :data:`CASES`, name -> ``(kind, args)``, each at
lm_head's shape (:data:`N` x :data:`K`). Pure data and configuration: nothing is compiled here."""

from __future__ import annotations

__all__ = ["CASES", "N", "K", "case_config"]

#: lm_head, the issue 19 shape every row is compiled for.
N, K = 151936, 2048


def case_config(dtype, bs, zp, **over):
    """The default tiling's lm_head M = 1 choice for ``dtype``, ``bs``, ``zp``, with ``over``
    (DefaultConfig fields) replacing its fields."""
    from dataclasses import replace

    from int4gemv.kernels.default_config import choose_config
    return replace(choose_config(1, N, K, bs, dtype, zp), **over)


#: name -> (kind, config or args); the rows of issue 19's lm_head analysis.
CASES = {
    "stream 16Bx4 256t 8/SM": ("stream", (16, 4, 256, 8)),
    "single_warp 4x4 fp16": ("single_warp", (4, 4)),
    "default fp16 bs32": ("default", ("float16", 32, False)),
    "default bf16 bs32": ("default", ("bfloat16", 32, False)),
    "default fp16 bs128": ("default", ("float16", 128, False)),
    "default bf16 bs128": ("default", ("bfloat16", 128, False)),
    "default fp16 bs16 zp": ("default", ("float16", 16, True)),
    "default bf16 bs16 zp": ("default", ("bfloat16", 16, True)),
    "default fp16 bs32 c4u1b4": ("default", ("float16", 32, False, dict(unroll=1))),
    "default fp16 bs32 c4u1b5p": ("default", ("float16", 32, False,
                                              dict(unroll=1, blocks_per_sm=5, pipeline=True))),
    "default fp16 bs16 zp c4u1b5p": ("default", ("float16", 16, True,
                                                 dict(unroll=1, blocks_per_sm=5, pipeline=True))),
    "default bf16 bs16 zp c4u1b5p": ("default", ("bfloat16", 16, True,
                                                 dict(unroll=1, blocks_per_sm=5, pipeline=True))),
    "default bf16 bs32 c4u1b5p": ("default", ("bfloat16", 32, False,
                                              dict(unroll=1, blocks_per_sm=5, pipeline=True))),
    "default fp16 bs32 c4u2b4p": ("default", ("float16", 32, False, dict(pipeline=True))),
    "default bf16 bs32 c4u2b4p": ("default", ("bfloat16", 32, False, dict(pipeline=True))),
    "default fp16 bs16 zp c4u1b4p": ("default", ("float16", 16, True, dict(pipeline=True))),
    "default bf16 bs16 zp c4u1b4p": ("default", ("bfloat16", 16, True, dict(pipeline=True))),
    "default fp16 bs32 mma c2l4u2b4": ("default", ("float16", 32, False,
                                                   dict(mma=True, cols=2, lanes=4))),
    "default fp16 bs32 mma c2l4u2b3": ("default", ("float16", 32, False,
                                                   dict(mma=True, cols=2, lanes=4, blocks_per_sm=3))),
    "default fp16 bs32 mma c2l4u2b5": ("default", ("float16", 32, False,
                                                   dict(mma=True, cols=2, lanes=4, blocks_per_sm=5))),
    "default fp16 bs32 mma c2l4u2b6": ("default", ("float16", 32, False,
                                                   dict(mma=True, cols=2, lanes=4, blocks_per_sm=6))),
    "default fp16 bs32 mma c2l4u4b4": ("default", ("float16", 32, False,
                                                   dict(mma=True, cols=2, lanes=4, unroll=4))),
    "default fp16 bs32 mma c2l4u2b5p": ("default", ("float16", 32, False,
                                                    dict(mma=True, cols=2, lanes=4, blocks_per_sm=5,
                                                         pipeline=True))),
    "default bf16 bs32 mma c2l4u2b5": ("default", ("bfloat16", 32, False,
                                                   dict(mma=True, cols=2, lanes=4, blocks_per_sm=5))),
    "default fp16 bs16 zp mma c2l4u1b5": ("default", ("float16", 16, True,
                                                      dict(mma=True, cols=2, lanes=4, unroll=1,
                                                           blocks_per_sm=5))),
    "default bf16 bs32 mma c2l4u2b4": ("default", ("bfloat16", 32, False,
                                                   dict(mma=True, cols=2, lanes=4))),
    "default fp16 bs16 zp mma c2l4u1b4": ("default", ("float16", 16, True,
                                                      dict(mma=True, cols=2, lanes=4))),
    # session 32: the unstaged (direct) mma fold, through the M = 1 K split (never staged)
    "default fp16 bs32 mma c2l4u2b4w4k4": ("default", ("float16", 32, False,
                                                     dict(mma=True, cols=2, lanes=4, ksplit=4))),
    "default bf16 bs32 mma c2l4u2b4w4k4": ("default", ("bfloat16", 32, False,
                                                     dict(mma=True, cols=2, lanes=4, ksplit=4))),
    "default fp16 bs32 mma c2l4u2b2w8k8": ("default", ("float16", 32, False,
                                                     dict(mma=True, cols=2, lanes=4, warps=8, ksplit=8,
                                                          blocks_per_sm=2))),
    "default fp16 bs16 zp mma c2l4u2b4w4k4": ("default", ("float16", 16, True,
                                                        dict(mma=True, cols=2, lanes=4, ksplit=4))),
}


def _case(dtype, bs, zp, M, cols, unroll, blocks, mma=True, warps=4, ksplit=1) -> tuple:
    """A :data:`CASES` entry of the default tiling: ``(name, (kind, args))``."""
    lanes = 4 if mma else 32
    name = (f"default {'fp16' if dtype == 'float16' else 'bf16'} bs{bs}{' zp' if zp else ''}"
            + (f" mma M{M}" if mma else "") + f" c{cols}l{lanes}u{unroll}b{blocks}"
            + (f"w{warps}k{ksplit}" if ksplit > 1 else ""))
    over = dict(M=M, mma=mma, cols=cols, lanes=lanes, unroll=unroll, blocks_per_sm=blocks,
                warps=warps, ksplit=ksplit)
    return name, ("default", (dtype, bs, zp, over))


#: Session 18: M = 1 with zero points at unroll 2 (4 and 3 blocks per SM), and M > 1 on tensor
#: cores (kernels/default_mma_batch.py): (dtype, bs, zp, M, cols, unroll, blocks[, mma]).
CASES.update(_case(*c) for c in [
    ("float16", 128, True, 1, 4, 1, 4, False),
    ("float16", 32, True, 1, 4, 2, 4, False), ("float16", 64, True, 1, 4, 2, 4, False),
    ("bfloat16", 64, True, 1, 4, 2, 4, False), ("float16", 128, True, 1, 4, 2, 4, False),
    ("bfloat16", 128, True, 1, 4, 2, 4, False), ("float16", 64, True, 1, 4, 2, 3, False),
    ("bfloat16", 64, True, 1, 4, 2, 3, False), ("float16", 128, True, 1, 4, 2, 3, False),
    ("bfloat16", 128, True, 1, 4, 2, 3, False),
    ("float16", 32, False, 2, 2, 2, 4), ("float16", 32, False, 2, 2, 4, 4),
    ("float16", 32, False, 8, 2, 2, 4), ("bfloat16", 32, False, 8, 2, 2, 4),
    ("float16", 32, False, 8, 2, 4, 4), ("bfloat16", 32, False, 8, 2, 4, 4),
    ("float16", 32, False, 8, 4, 2, 4), ("float16", 32, False, 8, 4, 4, 3),
    ("float16", 16, True, 8, 2, 2, 4), ("float16", 16, True, 8, 2, 4, 4),
    ("float16", 16, True, 8, 4, 1, 4), ("float16", 16, True, 8, 4, 2, 3),
    ("float16", 32, False, 16, 2, 2, 4), ("float16", 32, False, 16, 2, 4, 4),
    ("float16", 32, False, 16, 4, 2, 4), ("float16", 32, False, 16, 4, 1, 4),
    ("float16", 32, False, 16, 4, 2, 3), ("float16", 32, False, 16, 2, 4, 3),
    ("float16", 32, False, 16, 4, 1, 3), ("bfloat16", 32, False, 16, 4, 1, 3),
    ("bfloat16", 32, False, 16, 4, 2, 3), ("float16", 16, True, 16, 4, 1, 4),
    ("float16", 16, True, 16, 4, 1, 3), ("bfloat16", 16, True, 16, 4, 1, 3),
    ("float16", 16, True, 16, 4, 2, 3),
    # the K split (narrow N: gate/up, down)
    ("float16", 32, False, 8, 2, 4, 4, True, 4, 4), ("float16", 32, False, 8, 2, 2, 2, True, 8, 4),
    ("float16", 32, False, 16, 4, 1, 3, True, 4, 4), ("bfloat16", 32, False, 8, 2, 4, 4, True, 4, 4)])

#: Session 19: the past-8 and zero-point tilings at 3 blocks per SM in every format, rows that
#: are not a multiple of 8, and the K split with zero points and bf16.
CASES.update(_case(*c) for c in [
    ("bfloat16", 16, True, 8, 4, 2, 3), ("float16", 32, True, 8, 4, 2, 3),
    ("float16", 64, True, 8, 4, 2, 3), ("float16", 128, True, 8, 4, 2, 3),
    ("bfloat16", 128, True, 8, 4, 2, 3), ("bfloat16", 16, False, 8, 4, 4, 3),
    ("float16", 128, False, 8, 4, 4, 3), ("float16", 32, False, 5, 4, 4, 3),
    ("float16", 16, False, 16, 4, 2, 3), ("bfloat16", 16, False, 16, 4, 2, 3),
    ("float16", 128, False, 16, 4, 2, 3), ("float16", 32, False, 12, 4, 2, 3),
    ("float16", 16, True, 16, 4, 1, 3, True, 4, 4), ("bfloat16", 32, False, 16, 4, 1, 3, True, 4, 4),
    ("bfloat16", 128, True, 16, 4, 1, 3, True, 4, 4), ("float16", 32, True, 16, 4, 2, 3),
    ("float16", 64, True, 16, 4, 2, 3), ("float16", 128, True, 16, 4, 2, 3),
    ("bfloat16", 32, True, 16, 4, 2, 3), ("bfloat16", 128, True, 16, 4, 2, 3),
    ("float16", 16, True, 16, 4, 2, 2), ("float16", 16, True, 16, 2, 4, 3)])

#: Session 20: the K split with one column tile (16-column groups: twice the groups of narrow N)
#: at 4 and 8 warps per group, at M = 5, 8 and 16, with zero points at unroll 4 and 2.
CASES.update(_case(*c) for c in [
    ("float16", 32, False, 16, 2, 4, 3, True, 4, 4), ("float16", 32, False, 16, 2, 2, 4, True, 4, 4),
    ("bfloat16", 32, False, 16, 2, 4, 3, True, 4, 4), ("float16", 32, False, 16, 2, 2, 2, True, 8, 8),
    ("float16", 32, False, 8, 2, 2, 2, True, 8, 8), ("float16", 32, False, 16, 2, 4, 2, True, 8, 8),
    ("float16", 32, False, 16, 2, 4, 1, True, 8, 8), ("float16", 32, False, 8, 2, 4, 1, True, 8, 8),
    ("bfloat16", 32, False, 16, 2, 4, 1, True, 8, 8),
    ("float16", 16, True, 16, 2, 4, 3, True, 4, 4), ("bfloat16", 16, True, 16, 2, 4, 3, True, 4, 4),
    ("bfloat16", 128, True, 16, 2, 4, 3, True, 4, 4), ("float16", 16, True, 8, 2, 4, 3, True, 4, 4),
    ("float16", 16, True, 16, 2, 2, 3, True, 4, 4), ("bfloat16", 16, True, 16, 2, 2, 3, True, 4, 4),
    ("bfloat16", 128, True, 16, 2, 2, 3, True, 4, 4), ("bfloat16", 16, True, 8, 2, 4, 3, True, 4, 4),
    ("float16", 32, False, 5, 2, 4, 3, True, 4, 4), ("bfloat16", 32, False, 5, 2, 4, 3, True, 4, 4),
    ("bfloat16", 32, False, 8, 2, 4, 3, True, 4, 4), ("float16", 32, False, 8, 2, 4, 3, True, 4, 4)])
