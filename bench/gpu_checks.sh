#!/usr/bin/env bash
# The GPU evidence in one command (run from the repository root on a CUDA machine):
# the whole test suite (no simulator: every GPU test runs), then the real-driver lifecycle stress.
# Logs go to ${OUT:-bench/runs} (git-ignored; OUT=bench/results to commit them). Usage: [PYTEST_TIMEOUT=S] [STRESS=0] bench/gpu_checks.sh [pytest args...]
set -uo pipefail
out=${OUT:-bench/runs}
stamp=$(date -u +%Y%m%dT%H%M)
mkdir -p "$out"
workers=$(python3 -c "import os; print(min(14, max(1, (os.cpu_count() or 2) - 2)))")
LIFECYCLE_REQUIRE_GPU=1 timeout "${PYTEST_TIMEOUT:-900}" python3 -m pytest -v -rs --durations=30 -p no:cacheprovider -n "$workers" --dist loadgroup \
    tests "$@" 2>&1 | tee "$out/pytest-gpu-h200-$stamp.log" | grep -v PASSED | tail -60
if [ "${STRESS:-1}" != 0 ]; then   # STRESS=0: pytest only (its test_stress has a real-driver case too)
    timeout 90 python3 bench/gpu_lifecycle_check.py --stress --stress-seconds 12 2>&1 \
        | tee "$out/lifecycle-stress-h200-$stamp.log" | tail -8
fi
