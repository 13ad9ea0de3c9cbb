"""bench.sass_m1's SASS walk (pure functions; no compiler needed)."""

import pytest

from bench.sass_control import annotate
from bench.sass_m1 import is_weight_load, loads_before_first_use, parse, steady_path, weight_scoreboards

# A loop whose step is a warp-uniform if/else: the guard-free side (two unpredicated 16-byte
# loads) and the guarded side (predicated loads and a clamp), then a scale load, the first use
# of a loaded register, and a load after it; a self-branch after EXIT (no weight loads).
LISTING = "\n".join([
    "        /*0000*/                   MOV R1, R2 ;",
    ".L_x_0:",
    "        /*0010*/               @P0 BRA `(.L_x_1) ;",
    "        /*0020*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;",
    "        /*0030*/                   LDG.E.128.CONSTANT R8, desc[UR4][R2.64+0x10] ;",
    "        /*0040*/                   BRA `(.L_x_2) ;",
    ".L_x_1:",
    "        /*0050*/              @!P1 LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;",
    "        /*0060*/                   IMAD R3, R3, 0x2, RZ ;",
    "        /*0070*/              @!P1 LDG.E.128.CONSTANT R8, desc[UR4][R2.64+0x10] ;",
    ".L_x_2:",
    "        /*0080*/                   LDG.E.U16 R12, desc[UR4][R2.64] ;",
    "        /*0090*/                   HFMA2 R13, R5, R9, RZ ;",
    "        /*00a0*/                   LDG.E.128.CONSTANT R16, desc[UR4][R2.64] ;",
    "        /*00b0*/               @P2 BRA `(.L_x_0) ;",
    "        /*00c0*/                   EXIT ;",
    ".L_x_3:",
    "        /*00d0*/                   BRA `(.L_x_3);"])


def test_sass_m1_walks_the_guard_free_side_and_counts_loads_up_to_the_first_use():
    ins = parse(LISTING)
    assert len(ins) == 14 and ins[1][:3] == (".L_x_0", "@P0", "BRA")
    path = steady_path(ins, is_weight_load)
    assert path == [1, 2, 3, 4, 8, 9, 10, 11]          # then-side, not the guarded else-side
    assert steady_path(ins, is_weight_load, outer=True) == path   # no loop around it
    assert loads_before_first_use(ins, path) == {"128": 2, "32": 1}


# bf16's step: a once-per-block stage (an if without else holding a barrier) and a runtime
# choice between the staged fp16 fold (LDS, HFMA2) and the float32 fold (FFMA).
BF16_LISTING = "\n".join([
    ".L_x_0:",
    "        /*0000*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;",
    "        /*0010*/               @P0 BRA `(.L_x_1) ;",
    "        /*0020*/                   STS [R3], R1 ;",
    "        /*0030*/                   BAR.RED.OR.DEFER_BLOCKING 0x0, P1 ;",
    ".L_x_1:",
    "        /*0040*/               @P2 BRA `(.L_x_2) ;",
    "        /*0050*/                   FFMA R8, R4, R9, R8 ;",
    "        /*0060*/                   FFMA R8, R5, R9, R8 ;",
    "        /*0070*/                   BRA `(.L_x_3) ;",
    ".L_x_2:",
    "        /*0080*/                   LDS R10, [R3] ;",
    "        /*0090*/                   HFMA2 R11, R4, R10, RZ ;",
    "        /*00a0*/                   HFMA2 R12, R5, R10, R11 ;",
    ".L_x_3:",
    "        /*00b0*/               @P3 BRA `(.L_x_0) ;"])


def test_sass_m1_skips_the_stage_and_takes_the_staged_fold_over_the_float32_one():
    ins = parse(BF16_LISTING)
    assert steady_path(ins, is_weight_load) == [0, 1, 4, 8, 9, 10, 11]


# Since session 15 the staged and the float32 folds are separate loops (one compiled per fold):
# the shorter one loads its activations (FFMA), the other reads the stage (LDS).
TWO_LOOPS = "\n".join([
    ".L_x_0:",
    "        /*0000*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;",
    "        /*0010*/                   FFMA R8, R4, R9, R8 ;",
    "        /*0020*/               @P0 BRA `(.L_x_0) ;",
    ".L_x_1:",
    "        /*0030*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;",
    "        /*0040*/                   LDS R10, [R3] ;",
    "        /*0050*/                   HFMA2 R11, R4, R10, RZ ;",
    "        /*0060*/               @P1 BRA `(.L_x_1) ;"])


def test_sass_m1_takes_the_loop_that_reads_the_stage():
    assert steady_path(parse(TWO_LOOPS), is_weight_load) == [3, 4, 5, 6]


# The mma kernel (session 16): a back edge from after the step loop to before the stage fill
# (its divergent-shuffle fallback) makes a loop around both, holding one more 16-byte load (the
# fill's activations) than the step loop itself: the step loop is still the one measured.
AROUND = "\n".join([
    ".L_x_0:",
    "        /*0000*/                   LDG.E.128.CONSTANT R20, desc[UR4][R2.64] ;",
    "        /*0010*/                   STS [R3], R20 ;",
    ".L_x_1:",
    "        /*0020*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;",
    "        /*0030*/                   LDS R10, [R3] ;",
    "        /*0040*/                   HMMA.16816.F32 R12, R4, R10, RZ ;",
    "        /*0050*/               @P1 BRA `(.L_x_1) ;",
    "        /*0060*/               @P2 BRA `(.L_x_0) ;"])


def test_sass_m1_takes_the_innermost_loop_with_weight_loads():
    assert steady_path(parse(AROUND), is_weight_load) == [2, 3, 4, 5]


def test_weight_scoreboards_reads_the_write_scoreboard_of_each_weight_load_on_the_path():
    from tests.test_sass_control import LISTING     # two 16-byte loads on scoreboard 5, a use
    ins = parse(LISTING)
    controls = [c for _, c, _ in annotate(LISTING) if c is not None]
    assert [x[2] for x in ins] == ["LDG.E.128.CONSTANT", "LDG.E.128.CONSTANT", "LOP3.LUT"]
    assert weight_scoreboards(ins, controls, [0, 1, 2]) == [5]
    assert weight_scoreboards(ins, controls, [2]) == []
    with pytest.raises(ValueError, match="control codes"):
        weight_scoreboards(ins, controls[:2], [0])
