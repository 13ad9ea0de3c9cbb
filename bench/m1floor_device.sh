#!/usr/bin/env bash
# One device call for issue 19's bf16 parity (helper m1floor): most important first, each stage
# bounded so that a short lease still returns the earlier stages (everything under $OUT):
#   1. bench.targets at M = 1, fp16 + bf16, default tiling, k/v, gate/up and lm_head (bs 32), with
#      the pipelined probe c4u1b5p on lm_head and gate/up (each row's error is the norm-wise
#      error of that full shape against float64). The 93b2d80 run of a wider set (7 rows, 3
#      probes, 2 variants) spent its 100 s bound on compiles before reaching lm_head.
#   2. the new intrinsic (cvt.rn.f16x2.f32) and the bf16 range tests on the GPU.
# Usage (repository root, CUDA machine): OUT=DIR BENCH_GIT_COMMIT=<sha> bench/m1floor_device.sh
set -uo pipefail
out=${OUT:?set OUT to the folder for logs and results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

timeout "${M1_S:-100}" python3 -m bench.targets --out "$out" --quick --m 1 \
    --shapes "${SHAPES:-k/v,gate/up,lm_head}" --formats 32 --variants default \
    --configs "${CONFIGS:-c4u1b5p}" --config-shapes lm_head,gate/up > "$out/targets-m1.log" 2>&1
echo "targets M=1 exit $?"

timeout "${TESTS_S:-25}" python3 -m pytest -q -p no:xdist -p no:cacheprovider --tb=short \
    tests/test_intrinsics.py tests/test_default_kernel.py -k "intrinsics or bf16_m1" \
    > "$out/pytest-m1floor.log" 2>&1
echo "pytest exit $?"; tail -3 "$out/pytest-m1floor.log"
f=$(ls "$out"/targets-*.json 2>/dev/null | head -1)
[ -n "$f" ] && python3 -m bench.targets --table "$f" | tail -40 || tail -40 "$out/targets-m1.log"
