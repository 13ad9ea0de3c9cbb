#!/usr/bin/env bash
# One device call's worth of GPU evidence, most important first, each stage bounded so that a
# short lease still returns the earlier stages (everything is written under $OUT as it goes):
#   1. the whole test suite on the GPU (every GPU test, the lifecycle race loop and the timed
#      stress on the real driver, the notebook from notebooks/);
#   2. bench.eager_latency (host cost per call form, prepare() and tinygemm in the same run);
#   3. bench.targets at M = 1 (quick formats; floors and tinygemm in the same run);
#   4. bench.targets, tensor cores at M = 2, 8, 16 on gate/up, down, lm_head.
# Usage (repository root, CUDA machine): OUT=DIR BENCH_GIT_COMMIT=<sha> bench/gpu_evidence.sh
# STAGES (default "tests eager m1 batch") picks the stages to run, in that order.
# SHARD=i/n runs the test files whose index in the sorted list is i mod n (i = 0..n-1), so that
# the suite (about 500 s on 14 workers) can be split over device commands of at most 600 s and
# each part still prints pytest's summary; the log is then pytest-gpu-h200-shard<i>of<n>.log.
# The machine has no network: carry what the suite needs as wheels, gemlite among them (its peer
# rows skip without it; PyPI has only its sdist: `pip wheel --no-deps gemlite==0.6.0.post2`).
set -uo pipefail
out=${OUT:?set OUT to the folder for logs and results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 LIFECYCLE_REQUIRE_GPU=1 LIFECYCLE_RACE_LOOPS=${LIFECYCLE_RACE_LOOPS:-50} \
       LIFECYCLE_STRESS_SECONDS=${LIFECYCLE_STRESS_SECONDS:-12}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
stages=" ${STAGES:-tests eager m1 batch} "
want() { [[ $stages == *" $1 "* ]]; }
workers=$(python3 -c "import os; print(min(14, max(1, (os.cpu_count() or 2) - 2)))")

# The bound leaves room for the summary: at 250 s (2026-12-03) the run was cut at 99 % before
# pytest printed any traceback. A per-test bound (pytest-timeout, where installed) names a hang.
per_test=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout=240")
targets=tests log="$out/pytest-gpu-h200.log"
if [[ -n ${SHARD:-} ]]; then
    targets=$(python3 - "$SHARD" <<'PY'
import pathlib, sys
i, n = (int(v) for v in sys.argv[1].split("/"))
files = sorted(str(p) for p in pathlib.Path("tests").rglob("test_*.py"))
print(" ".join(f for k, f in enumerate(files) if k % n == i))
PY
)
    log="$out/pytest-gpu-h200-shard${SHARD%/*}of${SHARD#*/}.log"
fi
want tests && { PYTEST_REPORT_DIR="$out/pytest-reports" timeout "${TESTS_S:-500}" python3 -m pytest -v -rs --tb=short --durations=25 -p no:cacheprovider \
    -n "$workers" --dist loadgroup $per_test $targets > "$log" 2>&1
echo "pytest exit $?"; grep -v PASSED "$log" | tail -25
sort -rn "$out/pytest-reports/slow.log" 2>/dev/null | head -12; }

want eager && { timeout "${EAGER_S:-50}" python3 -m bench.eager_latency --out "$out" > "$out/eager.log" 2>&1
echo "eager exit $?"; tail -14 "$out/eager.log"; }

want m1 && { timeout "${M1_S:-120}" python3 -m bench.targets --out "$out" --quick --m 1 \
    --variants default,single_warp,auto,env > "$out/targets-m1.log" 2>&1
echo "targets M=1 exit $?"; tail -22 "$out/targets-m1.log"; }

want batch && { timeout "${BATCH_S:-100}" python3 -m bench.targets --out "$out" --quick --m 2,8,16 \
    --shapes gate/up,down,lm_head --formats 32 --variants tensor_core > "$out/targets-batch.log" 2>&1
echo "targets batch exit $?"; tail -16 "$out/targets-batch.log"; }
