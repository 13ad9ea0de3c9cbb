"""The host half of the timeline: per-kernel spans of one replayed step, from its block stamps.

A stamped chain (``DecodeChain(timeline=True)``) writes, per launch ``i`` and block ``b``, the
``%globaltimer`` at block entry and after the block's last store (:mod:`.stamps`). From one
replay's buffer :func:`kernel_spans` derives, per launch, in µs from the step's first stamp:

* ``start`` — the first block's entry; ``last_entry`` — the last block's entry (how long the
  grid took to become resident); ``end`` — the last block's exit;
* ``overlap`` — ``previous end − start``: > 0 when this kernel's first blocks were resident (and,
  with PDL, issuing weight loads) before the previous kernel's last block finished;
* ``adds`` — ``end − previous end``: what the kernel adds to the step (the first launch: its
  span). The ``adds`` of all launches sum to the step;
* ``floor`` — the launch's weight bytes at the copy bandwidth, and ``x_floor = adds / floor``.

:func:`layer_totals` sums ``adds`` and bytes per layer; :func:`stamp_granularity` is the
smallest step between distinct stamps (the clock's visible resolution).

The persistent chain (``PersistentChain(timeline=True)``) stamps each block's phases instead
(:mod:`.persistent_kernel`: start, staged, arrived); :func:`phase_spans` splits each phase's
``adds`` into the barrier, the activation staging, the GEMV work and the slowest block's tail.
"""

from __future__ import annotations

import numpy as np

from .stamps import ENTRY, EXIT

__all__ = ["kernel_spans", "phase_spans", "layer_totals", "stamp_granularity"]


def _check(stamps, kernels):
    stamps = np.asarray(stamps)
    if stamps.ndim != 3 or stamps.shape[2] != 2 or stamps.shape[0] != len(kernels):
        raise ValueError(f"stamps must have shape [{len(kernels)}, blocks, 2]; got {stamps.shape}")
    return stamps.astype(np.int64)


def kernel_spans(stamps, kernels, copy_bw: float) -> list:
    """One dict per launch (see the module docstring) from a stamp buffer ``[launches, blocks, 2]``
    (uint64 ns, 0 = never written) and ``kernels``, one ``(name, layer, weight_bytes)`` per launch
    (layer −1: not in a layer). ``copy_bw`` in bytes/s. A launch none of whose blocks stamped
    raises ValueError (it did not run)."""
    stamps = _check(stamps, kernels)
    if not copy_bw > 0:
        raise ValueError(f"copy_bw must be positive bytes/s; got {copy_bw!r}")
    rows, prev_end = [], None
    run = stamps[:, :, ENTRY] > 0
    if not run.any():
        raise ValueError("no block of any launch wrote a stamp")
    t0 = stamps[:, :, ENTRY][run].min()
    for i, (name, layer, nbytes) in enumerate(kernels):
        ok = run[i]
        if not ok.any():
            raise ValueError(f"launch {i} ({name}) wrote no stamp: it did not run")
        entry, exit_ = stamps[i, ok, ENTRY] - t0, stamps[i, ok, EXIT] - t0
        start, end = float(entry.min()) / 1e3, float(exit_.max()) / 1e3
        adds = end - (start if prev_end is None else prev_end)
        floor = nbytes / copy_bw * 1e6
        rows.append(dict(index=i, name=name, layer=int(layer), blocks=int(ok.sum()), start=start,
                         last_entry=float(entry.max()) / 1e3, first_exit=float(exit_.min()) / 1e3, end=end,
                         overlap=0.0 if prev_end is None else prev_end - start, adds=adds,
                         bytes=int(nbytes), floor=floor, x_floor=adds / floor if floor else None))
        prev_end = end
    return rows


def phase_spans(stamps, phases, copy_bw: float) -> list:
    """One dict per phase of a persistent chain from its stamp buffer ``[phases, blocks, 3]``
    (``start, staged, arrived`` per block, uint64 ns) and ``phases``, one ``(name, layer,
    weight_bytes)`` each; in µs: ``barrier`` (the median block's start after the previous
    phase's last arrival), ``stage`` and ``work`` (the median block's staging and GEMV time),
    ``tail`` (the last arrival after the median one), ``adds`` (last arrival after the previous
    phase's; the first phase: after the first start), ``floor``, ``x_floor``. Every block must
    have stamped every phase (ValueError otherwise)."""
    stamps = np.asarray(stamps)
    if stamps.ndim != 3 or stamps.shape[2] != 3 or stamps.shape[0] != len(phases):
        raise ValueError(f"stamps must have shape [{len(phases)}, blocks, 3]; got {stamps.shape}")
    if not (stamps > 0).all():
        raise ValueError("a block did not stamp every phase: the chain did not run to its end")
    if not copy_bw > 0:
        raise ValueError(f"copy_bw must be positive bytes/s; got {copy_bw!r}")
    t = stamps.astype(np.int64) / 1e3
    start, staged, arrived = t[:, :, 0], t[:, :, 1], t[:, :, 2]
    rows, prev = [], start[0].min()
    for p, (name, layer, nbytes) in enumerate(phases):
        last = arrived[p].max()
        floor = nbytes / copy_bw * 1e6
        rows.append(dict(index=p, name=name, layer=int(layer), bytes=int(nbytes),
                         barrier=float(np.median(start[p]) - prev),
                         stage=float(np.median(staged[p] - start[p])), work=float(np.median(arrived[p] - staged[p])),
                         tail=float(last - np.median(arrived[p])), adds=float(last - prev), floor=floor,
                         x_floor=float(last - prev) / floor if floor else None))
        prev = last
    return rows


def layer_totals(spans) -> list:
    """Per layer (in order of first appearance): ``layer``, ``us`` (sum of ``adds``), ``bytes``,
    ``floor``, ``x_floor``, ``launches``."""
    out = {}
    for r in spans:
        t = out.setdefault(r["layer"], dict(layer=r["layer"], us=0.0, bytes=0, floor=0.0, launches=0))
        t["us"] += r["adds"]
        t["bytes"] += r["bytes"]
        t["floor"] += r["floor"]
        t["launches"] += 1
    for t in out.values():
        t["x_floor"] = t["us"] / t["floor"] if t["floor"] else None
    return list(out.values())


def stamp_granularity(stamps) -> float:
    """The smallest positive difference between distinct stamps, in ns (``inf`` with fewer than
    two distinct stamps): the resolution at which the clock was seen to advance."""
    s = np.unique(np.asarray(stamps, np.int64)[np.asarray(stamps) > 0])
    return float(np.diff(s).min()) if s.size > 1 else float("inf")
