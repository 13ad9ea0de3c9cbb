#!/usr/bin/env bash
# One device call for issue 19's M = 1 work (bench/NOTES.md, sessions 13-14), most important
# first, each stage bounded so that a short lease still returns the earlier ones (everything
# under $OUT):
#   1. only with $SMALL set: the small shapes ($SMALL_SHAPES, fp16 bs 32), the default rows
#      against the probes $SMALL;
#   2. bench.targets at M = 1 on lm_head (formats $FORMATS, dtypes $LMHEAD_DTYPES, default fp16 +
#      bf16): the default tiling as chosen against the stream floor, and the configurations
#      $CONFIGS as probe rows, in ONE process (two processes sharing the GPU starved the default
#      rows in session 14);
#   3. the GPU tests of the mma fold (session 16: its offset pairs have run only on the
#      simulator) and of the decode-shape choices (pytest -n 12), last: a pytest cut by its
#      bound may leave xdist workers on the GPU, so they are killed after it.
# Usage (repository root, CUDA machine): OUT=DIR BENCH_GIT_COMMIT=<sha> bench/m1_mma_device.sh
# (LMHEAD=0 / TESTS=0: skip stage 2 / 3; TEST_FILES, TEST_K, TEST_WORKERS: stage 3's selection;
# the defaults fill about 580 s: each mma configuration compiles in ~25-45 s, so
# LMHEAD_DTYPES=float16 for a shorter call). BENCH_GIT_COMMIT names the tree's commit in the
# results files: the device copy's own git metadata may be stale (session 14's files all read
# efa897a).
set -uo pipefail
out=${OUT:?set OUT to the folder for logs and results}
[ -n "${BENCH_GIT_COMMIT:-}" ] || echo "warning: BENCH_GIT_COMMIT unset; the results name the device copy's git HEAD" >&2
mkdir -p "$out/lmhead" "$out/small"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/device.txt"


if [ -n "${SMALL:-}" ]; then   # stage 1 only when probes are named (session 16: the 600 s call)
timeout "${SMALL_S:-150}" python3 -m bench.targets --out "$out/small" --quick --m 1 \
    --shapes "${SMALL_SHAPES:-gate_up,down,gate/up}" --dtypes float16 --variants default --no-tinygemm \
    --configs "$SMALL" --config-shapes "${SMALL_SHAPES:-gate_up,down,gate/up}" \
    > "$out/targets-m1-small.log" 2>&1
echo "small shapes exit $?"; grep -h "^floor\|^default\|^probe" "$out/targets-m1-small.log"
fi

if [ "${LMHEAD:-1}" = 1 ]; then
timeout "${M1_S:-330}" python3 -m bench.targets --out "$out/lmhead" --quick --m 1 --shapes lm_head \
    --formats "${FORMATS:-32,16+zp}" --dtypes "${LMHEAD_DTYPES:-float16,bfloat16}" --variants default --no-tinygemm \
    --configs "${CONFIGS:-c2l4u4b4m,c2l4u2b6m,c2l4u2b4m}" > "$out/targets-m1-lmhead.log" 2>&1
echo "lm_head exit $?"; grep -h "^floor\|^default\|^probe" "$out/targets-m1-lmhead.log"
fi

if [ "${TESTS:-1}" = 1 ]; then
# shellcheck disable=SC2086  # TEST_FILES is a list of paths
timeout "${TESTS_S:-230}" python3 -m pytest -v -p no:cacheprovider -n "${TEST_WORKERS:-12}" --tb=short \
    ${TEST_FILES:-tests/test_default_kernel.py tests/test_configurations.py tests/test_tuning.py tests/test_fold_probe.py tests/test_intrinsics.py} \
    -k "${TEST_K:-mma or decode_shapes or lm_head or halves_columns or halved or fold or offset}" \
    > "$out/pytest-mma.log" 2>&1
echo "pytest exit $?"; pkill -f "pytest.*-n ${TEST_WORKERS:-12}" || true
echo "passed $(grep -c " PASSED " "$out/pytest-mma.log")"; grep " FAILED \| ERROR " "$out/pytest-mma.log" | head -20
tail -2 "$out/pytest-mma.log"
fi
