#!/usr/bin/env bash
# One device call for session 18 (bench/NOTES.md): the default tiling's M > 1 tensor-core fold
# (kernels/default_mma_batch.py, probe specs `c2l4uUb4m` at M >= 2) against the tensor-core
# kernel on lm_head, and the bf16 row-stage probes at M = 1 (issue 19); then the new fold's GPU
# tests. The bench processes run at once, compiling in parallel and timing one at a time
# (--gpu-lock); every comparison is between rows of one process (its own floor and baseline).
# Usage (repository root, CUDA machine): OUT=DIR BENCH_GIT_COMMIT=<sha> CALL=N bench/batch_mma_device.sh
# (CALL unset: call 7, the prepared one)
# (everything under $OUT ends in $OUT/batch-mma-call.tgz)
set -uo pipefail
out=${OUT:?set OUT to the folder for logs and results}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/device.txt"
. "$(dirname "$0")/device_bench.sh"   # bench NAME ARGS...
lm="--shapes lm_head --config-shapes lm_head"
if [ "${CALL:-2}" = 1 ]; then   # call 1 (a4740cc)
bench m8 --m 8 $lm --formats 32 --dtypes float16 --variants tensor_core --configs c2l4u2b4m,c2l4u4b4m
bench m16 --m 16 $lm --formats 32 --dtypes float16 --variants tensor_core --configs c2l4u2b4m,c2l4u4b4m
bench m2 --m 2 $lm --formats 32 --dtypes float16 --variants tensor_core --no-tinygemm --configs c2l4u4b4m
bench bf16m8 --m 8 $lm --formats 32 --dtypes bfloat16 --variants tensor_core --no-tinygemm --configs c2l4u4b4m
bench zpm8 --m 8 $lm --formats 16+zp --dtypes float16 --variants tensor_core --no-tinygemm --configs c2l4u2b4m
bench m1bf16 --m 1 --shapes gate/up,q/o --config-shapes gate/up,q/o --dtypes bfloat16 --variants default \
    --no-tinygemm --configs c4u2b4s,c2u2b4s
elif [ "${CALL:-3}" = 2 ]; then   # call 2 (b717218): weights past L1 (L1::no_allocate) and two column tiles per warp (cols 4)
bench m8 --m 8 $lm --formats 32 --dtypes float16 --variants tensor_core --configs c2l4u4b4m,c4l4u2b4m,c2l4u2b4m
bench m16 --m 16 $lm --formats 32 --dtypes float16 --variants tensor_core --configs c2l4u2b4m,c4l4u1b4m
bench m2 --m 2,4 $lm --formats 32 --dtypes float16 --variants tensor_core --no-tinygemm --configs c2l4u4b4m,c4l4u2b4m
bench bf16m8 --m 8 $lm --formats 32 --dtypes bfloat16 --variants tensor_core --no-tinygemm --configs c2l4u4b4m,c4l4u2b4m
bench zpm8 --m 8 $lm --formats 16+zp --dtypes float16 --variants tensor_core --no-tinygemm --configs c2l4u2b4m,c4l4u1b4m
elif [ "${CALL:-4}" = 3 ]; then   # call 3 (701d1c7): the chooser (environment unset) against the tensor-core kernel, every M and format
bench m24 --m 2,4 $lm --formats 32 --dtypes float16 --variants env,tensor_core
bench m816 --m 8,16 $lm --formats 32 --dtypes float16 --variants env,tensor_core
bench bf16 --m 8,16 $lm --formats 32 --dtypes bfloat16 --variants env,tensor_core --no-tinygemm
bench m16probe --m 16 $lm --formats 32 --dtypes float16 --variants env --no-tinygemm --configs c4l4u2b3m,c4l4u1b3m
bench fmt16a --m 16 $lm --formats 16,16+zp,32+zp,64 --dtypes float16 --variants env --no-tinygemm
bench fmt16b --m 16 $lm --formats 64+zp,128,128+zp --dtypes float16 --variants env --no-tinygemm
elif [ "${CALL:-5}" = 4 ]; then   # call 4 (5db0a4b): three blocks per SM past 8 rows; bf16 against fp16 in one process at every M
bench m16 --m 16 $lm --formats 32 --dtypes float16,bfloat16 --variants env,tensor_core
bench m8 --m 8 $lm --formats 32 --dtypes float16,bfloat16 --variants env --no-tinygemm
bench m24 --m 2,4 $lm --formats 32 --dtypes float16,bfloat16 --variants env --no-tinygemm
bench fmt16 --m 16 $lm --formats 16,16+zp,64 --dtypes float16 --variants env --no-tinygemm
elif [ "${CALL:-7}" = 7 ]; then   # prepared in session 19, not run: bs 16 + zp at M = 16 with more registers or
# one column tile; 4 x 4 at 3 blocks for 5..8 rows (bs 16 bf16 spills 24 B offline) against the chooser
bench zp16 --m 16 $lm --formats 32,16+zp --dtypes float16 --variants env --no-tinygemm --configs c4l4u2b2m,c2l4u4b3m
bench m8 --m 8 $lm --formats 32,16 --dtypes float16,bfloat16 --variants env --no-tinygemm --configs c4l4u4b3m
elif [ "${CALL:-6}" = 6 ]; then   # session 19 call 2: the chooser after call 5 (4 x 2 at 3 blocks past 8 rows,
# zero points 4 x 2 at 3 blocks for 5..8 rows, the K split past 8 rows on narrow N, unroll 2 for
# fp16 bs >= 64 + zp at M = 1), every judged row through `env`; probes: zero points at M = 16 as 4 x 2
bench m16 --m 16 $lm --formats 32 --dtypes float16,bfloat16 --variants env,tensor_core
bench fmt16 --m 16 $lm --formats 16,16+zp,64+zp --dtypes float16 --variants env --no-tinygemm --configs c4l4u2b3m
bench fmt16b --m 16 $lm --formats 64,128,128+zp --dtypes float16 --variants env --no-tinygemm
bench m8 --m 8 $lm --formats 32,16+zp,64+zp --dtypes float16,bfloat16 --variants env --no-tinygemm
bench small16 --m 16 --shapes gate/up,down,gate_up --dtypes float16,bfloat16 --variants env,tensor_core
bench m1zp --m 1 --shapes lm_head,gate/up,down --formats 64+zp,128+zp --dtypes float16,bfloat16 --variants env \
    --no-tinygemm --config-shapes lm_head,gate/up --configs c4u1b4
else        # call 5 (prepared in session 18, run in session 19): the chunks written out (no local memory at M = 16)
bench m16 --m 16 $lm --formats 32 --dtypes float16,bfloat16 --variants env --no-tinygemm --configs c4l4u2b3m
bench m8 --m 8 $lm --formats 32 --dtypes float16,bfloat16 --variants env --no-tinygemm --configs c4l4u4b3m
bench zp8 --m 8 $lm --formats 16+zp --dtypes float16 --variants env --no-tinygemm --configs c4l4u2b3m
bench small8 --m 8 --shapes gate/up,down --config-shapes gate/up,down --dtypes float16 --variants env \
    --configs c2l4u4b4w4mk4,c2l4u2b2w8mk4
bench small16 --m 16 --shapes gate/up,down --config-shapes gate/up,down --dtypes float16 --variants env \
    --configs c4l4u1b3w4mk4
# issue 19 (session 19): unroll 2 for zero points at bs 64 / 128 at M = 1, at 4 and 3 blocks per SM
bench zp64 --m 1 --shapes lm_head --formats 64+zp --dtypes float16,bfloat16 --variants default --no-tinygemm \
    --configs c4u2b4,c4u2b3
bench zp128 --m 1 --shapes lm_head --formats 128+zp --dtypes float16,bfloat16 --variants default --no-tinygemm \
    --configs c4u2b4,c4u2b3
fi
wait
for f in "$out"/targets-*.log; do echo "== $f"; grep -h "^floor\|^env\|^tensor_core\|^default\|^tinygemm\|^probe\|Error\|error:" "$f" | head -20; done

if [ "${TESTS:-1}" = 1 ]; then
timeout "${TESTS_S:-200}" python3 -m pytest -v -p no:cacheprovider -n "${TEST_WORKERS:-12}" --tb=short \
    tests/test_default_mma_batch.py tests/test_configurations.py \
    "tests/test_default_kernel.py::test_m1_unroll_is_the_largest_that_does_not_spill" \
    "tests/test_default_kernel.py::test_lm_head_takes_the_mma_fold_where_each_warp_has_groups_to_fold" \
    "tests/test_tensor_core.py::test_explain_says_why_tiles" > "$out/pytest-batch-mma.log" 2>&1
echo "pytest exit $?"; pkill -f "pytest.*-n ${TEST_WORKERS:-12}" || true
echo "passed $(grep -c " PASSED " "$out/pytest-batch-mma.log")"; grep " FAILED \| ERROR \|SKIP" "$out/pytest-batch-mma.log" | head -20
fi
# the device tool returns a limited number of files: one archive of everything
tar -czf "$out/../batch-mma-call.tgz" -C "$out" . && rm -rf "${out:?}"/* && mv "$out/../batch-mma-call.tgz" "$out/"
