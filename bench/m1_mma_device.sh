#!/usr/bin/env bash
# One device call for issue 19's M = 1 tensor-core fold (bench/NOTES.md "Session 13"), most
# important first, each stage bounded so that a short lease still returns the earlier ones
# (everything under $OUT):
#   1. bench.targets at M = 1 on lm_head (--quick formats, fp16 + bf16): the default tiling as
#      chosen (the CUDA-core fold while default_config.MMA_CHOSEN is off) against the stream
#      floor, and, in a second process sharing the GPU, the mma fold (c2l4u2b4m) and its
#      pipelined form (c2l4u2b4pm) as probe rows, each against its own floor of the same run;
#   2. the GPU tests of the fold (tests/test_default_kernel.py -k mma, the decode-shape choices
#      of tests/test_configurations.py), on the GPU;
#   3. the probe bench/probe_tcm1.py (the offset form, lm_head only);
#   4. the small shapes' grid balance (bench/NOTES.md "Session 13: wave quantization"): gate_up
#      and down, fp16 bs 32, the default rows against probes with balanced rounds or more bytes
#      per warp step.
# Usage (repository root, CUDA machine): OUT=DIR bench/m1_mma_device.sh
set -uo pipefail
out=${OUT:?set OUT to the folder for logs and results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/device.txt"

# two processes sharing the GPU through --gpu-lock (GPU work serialized, compiles overlapped)
lock="$out/gpu.lock"; mkdir -p "$out/default" "$out/probes"
timeout "${M1_S:-240}" python3 -m bench.targets --out "$out/default" --quick --m 1 --shapes lm_head \
    --variants default --no-tinygemm --gpu-lock "$lock" > "$out/targets-m1-default.log" 2>&1 &
timeout "${M1_S:-240}" python3 -m bench.targets --out "$out/probes" --quick --m 1 --shapes lm_head \
    --variants none --configs "${CONFIGS:-c2l4u2b4m,c2l4u2b4pm}" --no-tinygemm --gpu-lock "$lock" \
    > "$out/targets-m1-probes.log" 2>&1 &
wait
grep -h "^floor\|^default\|^probe" "$out"/targets-m1-*.log | sort -s -k3,3
for f in "$out"/default/targets-*.json; do [ -f "$f" ] && python3 -m bench.targets --table "$f" | tail -12; done

timeout "${TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider -n 8 --tb=short \
    tests/test_default_kernel.py tests/test_configurations.py -k "mma or decode_shapes or lm_head" \
    > "$out/pytest-mma.log" 2>&1
echo "pytest exit $?"; tail -4 "$out/pytest-mma.log"

timeout "${TCM1_S:-90}" python3 -m bench.probe_tcm1 --out "$out" --configs "${TCM1:-w8b3u2,w8b3u2o}" \
    --shapes 151936x2048 > "$out/tcm1.log" 2>&1
echo "probe_tcm1 exit $?"; grep -v '^{' "$out/tcm1.log" | tail -8

timeout "${SMALL_S:-120}" python3 -m bench.targets --out "$out/small" --quick --m 1 --shapes gate_up,down \
    --dtypes float16 --variants default --no-tinygemm --configs "${SMALL:-c4u2b3,c2u2b4,c1u4b8,c1u2b8p}" \
    --config-shapes gate_up,down > "$out/targets-m1-small.log" 2>&1
echo "small shapes exit $?"; grep -h "^floor\|^default\|^probe" "$out/targets-m1-small.log"
