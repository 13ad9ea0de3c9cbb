"""What reading a torch tensor's launch-cache key costs, attribute by attribute (CUDA machine).

    python -m bench.torch_key_cost

Prints ns per expression (best of 5 ``timeit`` repeats; the loop's own ~15 ns included) for each
torch attribute the eager path could read, then the call key the eager path reads
(``array_keys.call_key``, through its per-class reader) of a 2048×2048 fp16 call's ``a`` and
``out``. Host-side only. The figures of 2026-12-03 are in ``bench/NOTES.md`` ("Eager host
cost: where a torch call's time goes").
"""

from __future__ import annotations

import timeit

import numpy as np

__all__ = ["main"]

ATTRIBUTES = ("x.shape", "x.stride()", "x.data_ptr()", "x.dtype", "x.is_cuda", "x._version",
              "x.is_contiguous()", "x.storage_offset()", "x.device", "x.size()", "x.ndim",
              "x.__class__", "x.numel()",
              "(x.__class__, x.data_ptr(), x.shape, x.stride(), x.dtype, x.is_cuda)",
              "torch.Tensor.data_ptr(x)", "torch.Tensor.is_contiguous(x)")


def _ns(stmt, env, number):
    return min(timeit.repeat(stmt, globals=env, number=number, repeat=5)) / number * 1e9


def main():
    import torch

    from int4gemv.array_keys import call_key_reader

    x = torch.empty(2048, dtype=torch.float16, device="cuda")
    for stmt in ATTRIBUTES:
        print(f"{stmt:70} {_ns(stmt, {'x': x, 'torch': torch}, 200_000):7.1f} ns")
    a = torch.from_numpy(np.random.default_rng(0).standard_normal(2048).astype(np.float16)).cuda()
    out = torch.empty(2048, dtype=torch.float16, device="cuda")
    env = {"reader": call_key_reader(a), "a": a, "out": out}
    stmt = "reader(a, out, None, None, 0)"
    print(f"{stmt:70} {_ns(stmt, env, 100_000):7.1f} ns")


if __name__ == "__main__":
    main()
