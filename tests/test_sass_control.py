"""bench.sass_control's control-code decoding (pure functions; no compiler needed)."""

import pytest

from bench.sass_control import Control, annotate, decode

# Three instructions of a real listing (ptxas 13.0, sm_90a, `nvdisasm -hex -c`): a software-
# pipelined loop whose next-step load goes on scoreboard 5, then the current step's first use,
# which waits on scoreboard 5 too (so on the load just issued); a load with a read scoreboard.
LISTING = "\n".join([
    "        /*00f0*/                   LDG.E.128.CONSTANT R20, desc[UR6][R6.64] ;"
    "        /* 0x0000000606147981 */",
    "                                                                                     "
    "/* 0x000168000c1e9d00 */",
    ".L_x_3:",
    "        /*0740*/                   LDG.E.128.CONSTANT R20, desc[UR6][R6.64] ;"
    "        /* 0x0000000606147981 */",
    "                                                                                     "
    "/* 0x000f64000c1e9d00 */",
    "        /*0760*/                   LOP3.LUT R24, R28, R12, RZ, 0x3c, !PT ;"
    "           /* 0x0000000c1c187212 */",
    "                                                                                     "
    "/* 0x020fe200078e3cff */"])


def test_decode_reads_stall_yield_scoreboards_and_wait_mask():
    load = decode(0x000f64000c1e9d00)
    assert load == Control(stall=2, yield_bit=1, write=5, read=None, wait=(), reuse=0)
    use = decode(0x020fe200078e3cff)
    assert use == Control(stall=1, yield_bit=1, write=None, read=None, wait=(5,), reuse=0)
    assert str(use) == "S01 Y W- R- wait100000"
    first = decode(0x000168000c1e9d00)
    assert (first.stall, first.write, first.read, first.wait) == (4, 5, 0, ())
    # every field at its own bits: a one-bit change moves exactly that field
    assert decode(1 << 41).stall == 1 and decode(1 << 45).yield_bit == 1
    assert decode(3 << 46).write == 3 and decode(3 << 49).read == 3
    assert decode(0b100001 << 52).wait == (0, 5) and decode(0b1010 << 58).reuse == 0b1010
    assert decode(0).write == 0 and decode(7 << 46).write is None


def test_decode_refuses_a_word_that_is_not_64_bits():
    with pytest.raises(ValueError, match="high"):
        decode(1 << 64)
    with pytest.raises(ValueError, match="high"):
        decode(-1)


def test_annotate_pairs_each_instruction_with_its_second_word_and_keeps_labels():
    rows = annotate(LISTING)
    assert [r[0] for r in rows] == ["00f0", ".L_x_3", "0740", "0760"]
    assert rows[1][1] is None
    assert rows[2][1].write == 5 and rows[3][1].wait == (5,)
    assert rows[3][2] == "LOP3.LUT R24, R28, R12, RZ, 0x3c, !PT"
