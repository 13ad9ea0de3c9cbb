"""The decode chain's timeline: the ``%globaltimer`` stand-in, stamped kernels on the simulator,
and the host arithmetic of per-kernel spans (``int4gemv.decode.stamps`` / ``timeline``). The
stamped chain itself runs in ``tests/test_chain.py`` (merged eager case); its GPU form in
``bench.decode_chain --timeline``, which checks its logits bit for bit against the unstamped chain."""

import time

import numpy as np
import pytest
from numba import cuda

from int4gemv.decode.stamps import stamp_buffer, stamped
from int4gemv.device import simulated
from int4gemv.decode.timeline import kernel_spans, layer_totals, phase_spans, stamp_granularity
from int4gemv.kernels.global_timer import global_timer


@cuda.jit
def _timed_fill(out, value):
    """out[i] = value + the clock at the element's store (a body whose time the test can see)."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = value + global_timer()


def test_global_timer_is_a_shared_nanosecond_clock():
    """Both forms: one clock for every thread of a launch, counting nanoseconds (two launches
    a host sleep apart differ by that sleep). The stand-in reads ``time.monotonic_ns`` and runs
    blocks and threads in order; the hardware's origin is its own (on the H200 the Unix epoch)."""
    out = cuda.to_device(np.zeros(8, np.uint64))
    before = time.monotonic_ns()
    _timed_fill[2, 4](out, np.uint64(0))
    first = out.copy_to_host()
    after = time.monotonic_ns()
    time.sleep(0.05)
    _timed_fill[2, 4](out, np.uint64(0))
    second = out.copy_to_host()
    assert first.dtype == np.uint64 and np.all(first > 0)
    assert int(first.max() - first.min()) <= after - before  # one launch: one shared clock
    gap = int(second.min()) - int(first.max())
    assert 0.05e9 <= gap <= 5e9, f"{gap} ns across a 50 ms sleep: not a nanosecond clock"
    if simulated():  # the stand-in: monotonic_ns, blocks and threads run in order
        assert np.all((before <= first) & (first <= after))
        assert np.all(np.diff(first.astype(np.int64)) >= 0)


def test_stamped_kernel_runs_the_body_between_its_stamps():
    out = cuda.to_device(np.zeros(12, np.uint64))
    stamps = stamp_buffer(3, 2)  # room for 2 blocks of the 3 launched
    stamped(_timed_fill)[3, 4](out, np.uint64(0), stamps, 1)
    got, s = out.copy_to_host().astype(np.int64), stamps.copy_to_host().astype(np.int64)
    assert np.all(s[0] == 0) and np.all(s[2] == 0)  # other slots untouched
    for b in range(2):
        entry, exit_ = s[1, b]
        assert 0 < entry <= got[4 * b:4 * b + 4].min() and got[4 * b:4 * b + 4].max() <= exit_
    assert np.all(got[8:] > 0)  # the third block ran; it has no stamp row, so it wrote none
    assert stamped(_timed_fill) is stamped(_timed_fill)
    with pytest.raises(TypeError, match="kernel must be a Numba CUDA kernel"):
        stamped(print)
    with pytest.raises(ValueError, match="max_blocks must be a positive int"):
        stamp_buffer(2, 0)


def _stamps(spans_ns):
    """A stamp buffer from ``[(entry, exit) per block] per launch`` (ns)."""
    width = max(len(x) for x in spans_ns)
    s = np.zeros((len(spans_ns), width, 2), np.uint64)
    for i, blocks in enumerate(spans_ns):
        s[i, :len(blocks)] = blocks
    return s


def test_kernel_spans_measure_overlap_and_what_each_kernel_adds():
    # launch 0: blocks 1000-3000 and 1500-4000; launch 1 enters at 3500 (0.5 µs before 0 ends)
    # and ends at 6000; launch 2 enters at 6500 (0.5 µs gap) and ends at 7000.
    s = _stamps([[(1000, 3000), (1500, 4000)], [(3500, 6000)], [(6500, 7000)]])
    kernels = [("qkv", 0, 4_000_000), ("o", 0, 0), ("lm_head", -1, 2_000_000)]
    a, b, c = kernel_spans(s, kernels, copy_bw=4e12)
    assert (a["start"], a["last_entry"], a["first_exit"], a["end"]) == (0.0, 0.5, 2.0, 3.0)
    assert a["adds"] == 3.0 and a["floor"] == 1.0 and a["x_floor"] == 3.0 and a["blocks"] == 2
    assert b["overlap"] == pytest.approx(0.5) and b["adds"] == pytest.approx(2.0) and b["x_floor"] is None
    assert c["overlap"] == pytest.approx(-0.5) and c["adds"] == pytest.approx(1.0)
    totals = layer_totals([a, b, c])
    assert [(t["layer"], t["launches"], t["us"]) for t in totals] == [(0, 2, 5.0), (-1, 1, 1.0)]
    assert sum(t["us"] for t in totals) == c["end"]
    assert stamp_granularity(s) == 500


def test_handoffs_split_what_each_kernel_adds_and_bound_the_step():
    """handoff = first exit − the previous launch's end, drain = end − first exit (they sum to
    ``adds``); the bound takes the kind with the least median hand-off (o: median of 0.5 and 0.3)
    and charges each launch the larger of its floor and that hand-off (with its drain: 0.45), not
    the least drain's kind (gate_up: 0.2)."""
    from bench.decode_timeline import handoffs, kind_summary, overlap_bound

    s = _stamps([[(1000, 3000), (1000, 4000)], [(2000, 4500), (2500, 5000)], [(4200, 7800), (4200, 8000)],
                 [(7500, 8300), (7500, 8700)]])
    kernels = [("qkv", 0, 8_000_000), ("o", 0, 0), ("gate_up", 0, 12_000_000), ("o", 1, 0)]
    spans = kernel_spans(s, kernels, copy_bw=4e12)
    got = handoffs(spans)
    assert [x for pair in got for x in pair] == pytest.approx([2.0, 1.0, 0.5, 0.5, 2.8, 0.2, 0.3, 0.4])
    assert [h + d for h, d in got[1:]] == pytest.approx([r["adds"] for r in spans[1:]])
    o = next(k for k in kind_summary(spans) if k["kind"] == "o")
    assert (o["handoff"], o["drain"]) == pytest.approx((0.4, 0.45))
    b = overlap_bound(spans)
    assert b["kind"] == "o" and (b["handoff"], b["drain"]) == pytest.approx((0.4, 0.45))
    assert (b["floor_us"], b["ideal_us"], b["drained_us"]) == \
        pytest.approx((5.0, 2 + 0.4 + 3 + 0.4, 2 + 0.85 + 3 + 0.85))


def test_kernel_spans_refuse_a_launch_that_did_not_run():
    s = _stamps([[(1000, 2000)], [(0, 0)]])
    with pytest.raises(ValueError, match=r"launch 1 \(o\) wrote no stamp"):
        kernel_spans(s, [("qkv", 0, 1), ("o", 0, 1)], 1e12)
    with pytest.raises(ValueError, match="stamps must have shape"):
        kernel_spans(s, [("qkv", 0, 1)], 1e12)


def test_phase_spans_split_each_phase_into_barrier_staging_work_and_tail():
    # (start, staged, arrived) per block, ns. Phase 0: blocks start 1000/1000/1200, arrive
    # 3000/3000/3400; phase 1 starts 3900/3900/4000 (median 0.5 µs after the last arrival),
    # stages 200 ns, arrives at 5000/5100/5100.
    s = np.array([[(1000, 1500, 3000), (1000, 1400, 3000), (1200, 1500, 3400)],
                  [(3900, 4100, 5000), (3900, 4100, 5100), (4000, 4200, 5100)]], np.uint64)
    a, b = phase_spans(s, [("qkv", 0, 2_000_000), ("o", 0, 0)], copy_bw=1e12)
    assert a["barrier"] == 0.0 and a["stage"] == pytest.approx(0.4) and a["work"] == pytest.approx(1.6)
    assert a["tail"] == pytest.approx(0.4) and a["adds"] == pytest.approx(2.4) and a["x_floor"] == pytest.approx(1.2)
    assert b["barrier"] == pytest.approx(0.5) and b["stage"] == pytest.approx(0.2)
    assert b["work"] == pytest.approx(0.9) and b["tail"] == 0.0 and b["adds"] == pytest.approx(1.7)
    assert b["x_floor"] is None and (b["name"], b["layer"], b["index"]) == ("o", 0, 1)
    s[1, 2, 1] = 0
    with pytest.raises(ValueError, match="did not stamp every phase"):
        phase_spans(s, [("qkv", 0, 1), ("o", 0, 1)], 1e12)
    with pytest.raises(ValueError, match="stamps must have shape"):
        phase_spans(s[:1], [("qkv", 0, 1), ("o", 0, 1)], 1e12)


def test_bench_configurations_parse_to_chain_keywords():
    from bench.decode_configs import kind_tunings, parse_config

    cfg = parse_config("merged:single_warp+pdl:qkv=4x4s:down=1x8:bps=8:silu=plain")
    assert (cfg["layout"], cfg["tuning"], cfg["blocks_per_sm"], cfg["silu_pdl"]) == \
        ("merged", "single_warp+pdl", 8, False)
    tunings = kind_tunings(cfg)
    assert tunings["qkv"].activations == "streaming" and tunings["qkv"].pdl
    assert (tunings["down"].cols, tunings["down"].unroll, tunings["down"].activations) == (1, 8, None)
    assert {t.variant for t in tunings.values()} == {"single_warp"}
    # dCxU: that kind on the default tiling at cols C, unroll U, with the chain tuning's pdl
    tunings = kind_tunings(parse_config("merged:default+pdl:o=d1x2:qkv=2x4s"))
    assert (tunings["o"].variant, tunings["o"].cols, tunings["o"].unroll, tunings["o"].pdl) == ("default", 1, 2, True)
    assert (tunings["o"].activations, tunings["qkv"].variant) == (None, "single_warp")
    assert (parse_config("persistent:")["warps"], parse_config("persistent:warps=4")["label"]) == (16, "warps=4")
    for bad in ("merged:fast", "diagonal:auto", "merged:auto:bps=0", "merged:auto:mlp=4x4", "merged:auto:o=d1x2s",
                "merged:auto:o=x1x2", "persistent:warps=x",
                "persistent:auto", "persistent:warps=8:bps=2"):
        with pytest.raises(ValueError, match="configuration"):
            parse_config(bad)


def test_kernel_launch_geometry_is_checked():
    from int4gemv.decode.launches import KernelLaunch

    out = cuda.to_device(np.zeros(4, np.uint64))
    with pytest.raises(ValueError, match="grid must be a 1-D launch"):
        KernelLaunch(_timed_fill, (1, 2), 4, out, np.uint64(0))
    with pytest.raises(ValueError, match="block must be a positive int"):
        KernelLaunch(_timed_fill, 1, 0, out, np.uint64(0))
    KernelLaunch(_timed_fill, 1, 4, out, np.uint64(0))()
    assert np.all(out.copy_to_host() > 0)


def test_grid_cap_only_for_persistent_kernels(rng, monkeypatch):
    import int4gemv as ig
    from int4gemv.decode import launches

    w = ig.quantize(rng.standard_normal((8, 32)).astype(np.float32), 32)
    a, out = cuda.to_device(np.ones(32, np.float16)), cuda.to_device(np.zeros(8, np.float16))
    assert launches.GemvLaunch(a, w, out, options={"variant": "single_warp"}, max_blocks=1).grid[0] == 1
    monkeypatch.setattr(launches, "PERSISTENT_KERNELS", ("default",))
    with pytest.raises(ValueError, match="max_blocks needs a persistent kernel"):
        launches.GemvLaunch(a, w, out, options={"variant": "single_warp"}, max_blocks=1)
    with pytest.raises(TypeError, match="exactly one of options= and tuning="):
        launches.GemvLaunch(a, w, out)


def test_results_render_as_table_rows_and_a_timeline_figure(tmp_path):
    """The README's table rows and figure come from a results file (here the committed run)."""
    import io
    import json
    from pathlib import Path

    from bench.decode_report import HEADER, markdown_rows
    from bench.decode_timeline import kind_summary, overlap_bound, plot, print_timeline

    pytest.importorskip("matplotlib", reason="the figure needs matplotlib")
    path = Path(__file__).resolve().parents[1] / "bench" / "results" / "decode-chain-nvidia-h200-20261203T171020.json"
    report = json.loads(path.read_text())
    rows = markdown_rows(report, "here")
    assert len(rows) == len(report["configs"]) and all(r.count("|") == HEADER.splitlines()[0].count("|") for r in rows)
    kinds = kind_summary(report["configs"][0]["timeline"]["spans"])
    assert [k["kind"] for k in kinds] == ["qkv", "o", "gate_up", "silu_mul", "down", "lm_head"]
    # medians over replays, field by field: their adds sum to the step's end within 1 %
    assert sum(k["adds_total"] for k in kinds) == pytest.approx(report["configs"][0]["timeline"]["spans"][-1]["end"],
                                                                rel=0.01)
    timeline = report["configs"][0]["timeline"]
    bound = overlap_bound(timeline["spans"])   # the step its hand-offs allow
    assert bound["floor_us"] <= bound["ideal_us"] <= bound["drained_us"] <= timeline["us_per_step"]
    text = io.StringIO()
    print_timeline(report["configs"][0], text)
    assert f"{bound['ideal_us']:.1f} µs" in text.getvalue() and text.getvalue().count("\n") == 3 + len(kinds) + 2
    plot(report, tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_persistent_phase_tables_come_from_the_committed_run():
    """The persistent chain's phase table (``bench.decode_chain --timeline`` on a persistent
    configuration): per kind, its phases' medians sum to the stamped step, and it prints."""
    import io
    import json
    from pathlib import Path

    from bench.decode_timeline import phase_kinds, print_phases

    path = (Path(__file__).resolve().parents[1] / "bench" / "results"
            / "decode-chain-persistent-phases-h100-20261206T1927-1997867.json")
    rows = [r for r in json.loads(path.read_text())["configs"] if r.get("phases")]
    assert [r["warps"] for r in rows] == [4, 8, 16]
    for r in rows:
        kinds = r["phases"]["kinds"]
        assert [(k["kind"], k["phases"]) for k in kinds] == [("qkv", 28), ("o", 28), ("gate_up", 28), ("down", 28),
                                                               ("lm_head", 1)]
        assert sum(k["adds"] for k in kinds) == pytest.approx(r["phases"]["us_per_step"], rel=0.05)
        for mine, stored in zip(phase_kinds(r["phases"]["phases"]), kinds, strict=True):  # sums of the medians
            assert mine == pytest.approx(stored)
        text = io.StringIO()
        print_phases(r, text)
        assert text.getvalue().count("\n") == 3 + len(kinds) and f"warps={r['warps']}" in text.getvalue()
