"""Benchmark suites and the ``python -m bench`` command, run from a checkout.

The timing library they use ships with the package: :mod:`int4gemv.benchmark` (graph-replay and
eager timers, L2 rotation, copy bandwidth, peers, workloads, ``time_gemv`` and ``compare``). This
folder holds what a checkout adds on top of it; importing it touches no GPU and imports neither
torch nor Numba's CUDA driver.

Modules (one concept each):

* :mod:`bench.methods`        the int4gemv configurations a run measures (tunings as data)
* :mod:`bench.kernels`        suite: every method and peer on each shape of the workload
* :mod:`bench.merge`          concatenating QuantizedWeights along N (merged projections)
* :mod:`bench.owned_graph`    int4gemv launches captured into lifecycle's owned graphs
* :mod:`bench.decode_step`    suite: a whole decode step as one owned graph, separate and merged
* :mod:`bench.gpu_run`        the whole command on a GPU (copy bandwidth, shapes, decode step)
* :mod:`bench.simulated`      the same command on Numba's simulator (tiny, timing nothing)
* :mod:`bench.autotune`       suite output: the ``int4gemv/autotune_table.json`` writer
* :mod:`bench.eager_latency`  suite: eager per-call cost against the driver's launch floor (GPU)
* :mod:`bench.eager_host_cost` the eager path's Python cost with the launch a no-op (simulator)
* :mod:`bench.torch_key_cost` what each torch attribute read of the eager path costs (GPU)
* :mod:`bench.probe_kernels`  suite: per-tuning timings, registers and SASS mix (GPU)
* :mod:`bench.ncu_probe`      one checked kernel launch for Nsight Compute to profile (GPU)
* :mod:`bench.offline_sass`   the tensor-core kernel's registers, spills and SASS on a CPU (no GPU)
* :mod:`bench.gpu_lifecycle_check` suite: lifecycle's tests on the real driver, then timings (GPU)
* :mod:`bench.report`         reporting: terminal table and summary, JSON / text / PNG files
* :mod:`bench.chart`          reporting: the PNG chart of a results document
* :mod:`bench.results_io`     reporting: loading and describing committed results
* :mod:`bench.environment`    device, driver, versions, git commit, date, command
* :mod:`bench.progress`       a progress bar (tqdm when installed)
"""
