"""Benchmarks for int4gemv: ``python -m bench`` and helpers for the notebooks.

Importing this package touches no GPU and imports neither torch nor Numba's CUDA driver.

Modules (one concept each):

* :mod:`bench.workloads`      shapes of a decode step (the committed workload JSON), merged groups
* :mod:`bench.device_weights` random INT4 weights generated on the device, torch views, reference
* :mod:`bench.merge`          concatenating QuantizedWeights along N (merged projections)
* :mod:`bench.methods`        the int4gemv variants and tunings a run measures; env controls
* :mod:`bench.peers`          peers measured in the same process (torch.mv, tinygemm, ...)
* :mod:`bench.timing`         CUDA-event timing of graph replays, eager latency, copy bandwidth
* :mod:`bench.owned_graph`    int4gemv launches captured into lifecycle's owned graphs
* :mod:`bench.decode_step`    a whole decode step as one owned graph, separate and merged
* :mod:`bench.kernels_run`    the per-shape measurements on a GPU
* :mod:`bench.gpu_run`        the whole command on a GPU (copy bandwidth, shapes, decode step)
* :mod:`bench.simulated`      the same command on Numba's simulator (tiny, timing nothing)
* :mod:`bench.report`         terminal table, JSON and PNG files
* :mod:`bench.results_io`     loading and plotting results (for notebooks)
* :mod:`bench.autotune`       the ``int4gemv/autotune_table.json`` writer
* :mod:`bench.environment`    device, driver, versions, git commit, date, command
* :mod:`bench.progress`       a progress bar (tqdm when installed)
* :mod:`bench.probe_kernels`  per-tuning kernel probe: timings, registers, SASS mix (GPU)
* :mod:`bench.eager_latency`  eager per-call cost against the driver's launch floor (GPU)
"""
