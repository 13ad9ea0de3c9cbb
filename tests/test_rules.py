"""Three rules that had no test (issue 22, item 6): the 16-byte alignment that switches the
default tiling's vector activation loads off, the legacy/primary environment disagreement check
(compared as parsed values, not raw strings), and ``from_device``'s 16-byte alignment of
``packed``."""

import warnings

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
from int4gemv.arrays import describe


def _offset_view(host, offset_bytes, alignment=16):
    """A device copy of ``host`` whose data starts ``offset_bytes`` past a ``alignment``-byte
    boundary (a view into a larger device buffer)."""
    nbytes = host.nbytes
    buf = cuda.to_device(np.zeros(nbytes + 2 * alignment, np.uint8))
    base = describe("buf", buf).pointer
    start = (-base) % alignment + offset_bytes
    view = buf[start:start + nbytes].view(host.dtype)
    view.copy_to_device(np.ascontiguousarray(host).reshape(-1))
    assert describe("view", view).pointer % alignment == offset_bytes
    return view, buf


@pytest.mark.parametrize("offset, vector", [(0, True), (2, False), (4, False), (8, False)])
def test_activations_off_16_byte_alignment_switch_vector_loads_off(rng, offset, vector):
    N, K = 5, 200
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32)
    a = rng.standard_normal(K).astype(np.float16)
    d_a, keep = _offset_view(a, offset)
    plan = ig.explain(d_a, w)
    assert plan.kernel == "default" and plan.problem.act_align == (16 if offset == 0 else offset)
    assert plan.config.act_vector is vector
    out = cuda.to_device(np.full(N, np.nan, np.float16))
    ig.gemv(d_a, w, out=out)
    y = out.copy_to_host().astype(np.float64)
    ref = ig.reference_gemv(a, w)
    terms = np.abs(a.astype(np.float64)) @ np.abs(w.dequantize(np.float64)).T
    assert np.all(np.isfinite(y)) and np.max(np.abs(y - ref) / terms) <= 2.0 ** -11 + 2.0 ** -13


@pytest.mark.parametrize("primary, legacy, warns", [
    ("1 ", "1", False), ("1", " 1", False), ("0", "0\t", False), ("AUTO", "1", True),
    ("1", "0", True), ("0 ", "1", True),
])
def test_primary_and_legacy_disagree_only_when_their_values_do(rng, monkeypatch, primary, legacy,
                                                               warns):
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP", primary)
    monkeypatch.setenv("INT4GEMV_ENABLE_SINGLE_WARP_GEMV", legacy)
    w = ig.quantize(rng.standard_normal((4, 64)).astype(np.float32), 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ig.explain(np.zeros(64, np.float16), w)
    disagree = [c for c in caught if "disagree" in str(c.message)]
    assert bool(disagree) is warns, [str(c.message) for c in caught]
    if warns:
        assert "INT4GEMV_SINGLE_WARP" in str(disagree[0].message)
        assert "INT4GEMV_ENABLE_SINGLE_WARP_GEMV" in str(disagree[0].message)


@pytest.mark.parametrize("offset", [0, 8, 4, 1])
def test_from_device_packed_must_be_16_byte_aligned(rng, offset):
    w = ig.quantize(rng.standard_normal((4, 64)).astype(np.float32), 32)
    packed, keep = _offset_view(np.ascontiguousarray(w.packed), offset)
    scales = cuda.to_device(np.ascontiguousarray(w.scales))
    if offset:
        with pytest.raises(ValueError, match="packed is misaligned: its data must start on a 16-byte"):
            ig.QuantizedWeight.from_device(packed.reshape(w.packed.shape), scales, K=64, N=4, block_size=32)
    else:
        dw = ig.QuantizedWeight.from_device(packed.reshape(w.packed.shape), scales, K=64, N=4,
                                            block_size=32)
        np.testing.assert_array_equal(dw.dequantize(), w.dequantize())
