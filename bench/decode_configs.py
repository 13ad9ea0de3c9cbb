"""The decode-chain bench's configurations: ``layout:tuning[:bps=N][:silu=pdl|plain|fused][:KIND=[d]CxU[s|r]][:down=CxUkP][:handoff=words]``,
or ``persistent:[warps=W]`` (the persistent chain with ``W`` warps a block, default 16).

``bps``: grid cap in blocks per SM; ``silu``: silu·mul as a programmatic launch or not (default
as the tuning), or ``fused`` into the split-K down kernel; ``KIND=CxU``: that GEMV kind on the
single-warp kernel at that shape (``s``/``r``: streamed or register activations), ``KIND=dCxU`` on
the default tiling at ``cols=C, unroll=U`` (its other fields its own choice); ``down=CxUkP``:
the split-K down kernel, ``P`` column warps per K chunk; ``handoff=words``: the GEMVs poll their
activations for sentinels instead of waiting for the previous grid. Pure functions: no GPU work.
"""

from __future__ import annotations

import re

__all__ = ["LAYOUTS", "parse_config", "kind_tunings", "chain_options"]

LAYOUTS = ("merged", "separate")


def parse_config(text: str) -> dict:
    """``"merged:auto+pdl:bps=8:silu=plain:down=1x8s"`` → the DecodeChain keywords and a label
    (``down=1x8s``: the down projections run the single-warp kernel at 1 column x unroll 8 with
    streamed activations — ``r``: registers, neither: the kernel's choice — and the tuning's
    ``pdl``/``prefetch``; ``down=4x4k4``: the split-K down kernel, 4 columns x unroll 4 per warp,
    4 column warps per K chunk; ``silu=fused`` needs it)."""
    from int4gemv.decode.chain import GEMV_KINDS, TUNINGS

    layout, _, rest = text.partition(":")
    tuning, *extras = rest.split(":") if rest else [""]
    if layout not in LAYOUTS + ("persistent",) or (layout != "persistent" and tuning not in TUNINGS):
        raise ValueError(f"configuration {text!r}: expected layout:tuning with layout in {LAYOUTS} "
                         f"and tuning in {TUNINGS}")
    cfg = dict(layout=layout, tuning=tuning, blocks_per_sm=None, silu_pdl=None, kind_tunings={}, label=tuning,
               down_split=None, fuse_silu=False, handoff="grid")
    if layout == "persistent":   # persistent:[warps=W]
        warps = re.fullmatch(r"(?:warps=(\d+))?", tuning)
        if warps is None or extras:
            raise ValueError(f"configuration {text!r}: expected persistent: or persistent:warps=W")
        return dict(cfg, tuning="persistent", warps=int(warps[1] or 16), label=f"warps={warps[1] or 16}")
    for e in extras:
        key, _, value = e.partition("=")
        shape = re.fullmatch(r"(d?)(\d+)x(\d+)([sr]?)", value)
        split = re.fullmatch(r"(\d+)x(\d+)k(\d+)", value)
        if key == "bps" and value.isdigit() and int(value) > 0:
            cfg["blocks_per_sm"] = int(value)
        elif key == "silu" and value in ("pdl", "plain"):
            cfg["silu_pdl"] = value == "pdl"
        elif key == "silu" and value == "fused":
            cfg["fuse_silu"] = True
        elif key == "down" and split:
            cfg["down_split"] = dict(cols=int(split[1]), unroll=int(split[2]), col_warps=int(split[3]))
        elif key == "handoff" and value == "words":
            cfg["handoff"] = "words"
        elif key in GEMV_KINDS and shape and not (shape[1] and shape[4]):   # no s/r on the default tiling
            cfg["kind_tunings"][key] = dict(variant="default" if shape[1] else "single_warp", cols=int(shape[2]),
                                            unroll=int(shape[3]),
                                            activations={"s": "streaming", "r": "registers"}.get(shape[4]))
        else:
            raise ValueError(f"configuration {text!r}: unknown option {e!r} (bps=N, silu=pdl|plain|fused, "
                             f"KIND=CxU[s|r] or KIND=dCxU with KIND in {GEMV_KINDS}, down=CxUkP, handoff=words)")
        cfg["label"] += f" {e}"
    if cfg["fuse_silu"] and cfg["down_split"] is None:
        raise ValueError(f"configuration {text!r}: silu=fused needs down=CxUkP (the split-K down kernel)")
    return cfg


def kind_tunings(cfg) -> dict:
    """``{kind: int4gemv.Tuning}`` of a parsed configuration: the single-warp kernel or the
    default tiling at the given shape, with the chain tuning's ``pdl`` and ``prefetch``."""
    from int4gemv import Tuning
    from int4gemv.decode import launch_options

    flags = launch_options(cfg["tuning"])
    return {k: Tuning(pdl=flags["pdl"], prefetch=flags["prefetch"], **v)
            for k, v in cfg["kind_tunings"].items()}


def chain_options(cfg) -> dict:
    """The :class:`~int4gemv.decode.DecodeChain` keywords of a parsed configuration."""
    from int4gemv.decode import SplitK

    return dict(merged=cfg["layout"] == "merged", tuning=cfg["tuning"], blocks_per_sm=cfg["blocks_per_sm"],
                silu_pdl=cfg["silu_pdl"], kind_tunings=kind_tunings(cfg), fuse_silu=cfg["fuse_silu"],
                handoff=cfg["handoff"],
                down_split=None if cfg["down_split"] is None else SplitK(**cfg["down_split"]))
