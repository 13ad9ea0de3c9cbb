"""SASS control codes (sm_70 and later): which scoreboard each load sets and each instruction waits on.

    python -m bench.sass_control CUBIN [--grep REGEX]

Every sm_70+ instruction is 128 bits; its top 23 bits are the scheduler's control code, which
``nvdisasm -hex`` prints (the second 64-bit word) but does not decode. Bit positions counted in
the 128-bit word (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
Microbenchmarking", 2018, section 2.1; the same on Hopper):

    105-108 stall cycles   109 yield   110-112 write scoreboard   113-115 read scoreboard
    116-121 wait mask (one bit per scoreboard 0-5)   122-125 operand reuse

A variable-latency instruction (a load) increments its write scoreboard on issue and decrements
it when its result lands; an instruction whose wait mask names a scoreboard stalls until that
scoreboard's count is zero, i.e. until *every* load on it has landed. So two loads on one
scoreboard cannot be consumed one at a time. Write / read scoreboard 7 means none.

Prints each instruction as ``offset  S<stall> <yield> W<write> R<read> wait<mask 5..0>  text``
(``-`` for no scoreboard). Needs ``nvdisasm`` on ``PATH`` or in ``$NVDISASM``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass

__all__ = ["Control", "decode", "annotate", "main"]

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/")
_SECOND_WORD = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/\s*$")
_NONE = 7


@dataclass(frozen=True)
class Control:
    """One instruction's control code. ``write``/``read``: scoreboard 0-5 or None; ``wait``:
    the scoreboards it waits on (ascending)."""

    stall: int
    yield_bit: int
    write: int | None
    read: int | None
    wait: tuple
    reuse: int

    def __str__(self) -> str:
        mask = "".join("1" if b in self.wait else "0" for b in range(5, -1, -1))
        w = "-" if self.write is None else self.write
        r = "-" if self.read is None else self.read
        return f"S{self.stall:02d} {'Y' if self.yield_bit else '-'} W{w} R{r} wait{mask}"


def decode(high: int) -> Control:
    """The control code in the high 64-bit word of an instruction (bits 64-127)."""
    if not 0 <= high < 1 << 64:
        raise ValueError(f"high must be a 64-bit word; got {high!r}")
    bits = high >> 41                      # bit 105 of the instruction
    write, read = (bits >> 5) & 7, (bits >> 8) & 7
    return Control(stall=bits & 0xF, yield_bit=(bits >> 4) & 1,
                   write=None if write == _NONE else write, read=None if read == _NONE else read,
                   wait=tuple(b for b in range(6) if (bits >> 11) & (1 << b)),
                   reuse=(bits >> 17) & 0xF)


def annotate(listing: str) -> list:
    """``[(offset, Control, text)]`` for each instruction of an ``nvdisasm -hex`` listing, and
    ``(label, None, "")`` for each label line."""
    rows, pending = [], None
    for line in listing.splitlines():
        m = _INSTRUCTION.search(line)
        if m:
            pending = (m.group(1), m.group(2))
            continue
        second = _SECOND_WORD.match(line)
        if second and pending:
            rows.append((pending[0], decode(int(second.group(1), 16)), pending[1]))
            pending = None
        elif re.match(r"^\s*\.L_x_\d+:", line):
            rows.append((line.strip()[:-1], None, ""))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sass_control", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cubin")
    ap.add_argument("--grep", help="print only instructions whose text matches this regex, "
                                   "and those that wait on a scoreboard")
    args = ap.parse_args(argv)
    listing = subprocess.run([os.environ.get("NVDISASM", "nvdisasm"), "-hex", "-c", args.cubin],
                             capture_output=True, text=True, check=True).stdout
    pattern = re.compile(args.grep) if args.grep else None
    for offset, control, text in annotate(listing):
        if control is None:
            print(f"{offset}:")
        elif pattern is None or pattern.search(text) or control.wait:
            print(f"{offset} {control}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
