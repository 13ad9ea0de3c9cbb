#!/usr/bin/env bash
# One device call for issue 19's lm_head rows: every format (bs 16/32/64/128, +- zero points) in
# fp16 and bf16 at M = 1 with the environment unset (`env`: the chooser) and the default tiling,
# plus the single-warp specialization on bs 32 fp16, each process against its own floor (four
# processes compiling at once, timing one at a time through --gpu-lock).
# Usage (repository root, CUDA machine): OUT=DIR BENCH_GIT_COMMIT=<sha> [ZP_PROBES=1] bench/m1_formats_device.sh
# (everything under $OUT ends in $OUT/m1-formats.tgz: the device tool returns a limited number of files)
set -uo pipefail
out=${OUT:?set OUT to the folder for logs and results}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/device.txt"
bench() {   # name, formats, variants, then more bench.targets arguments
    mkdir -p "$out/$1"
    local name=$1 formats=$2 variants=$3; shift 3
    timeout "${BENCH_S:-300}" python3 -m bench.targets --out "$out/$name" --quick --m 1 --shapes lm_head \
        --formats "$formats" --dtypes float16,bfloat16 --variants "$variants" --no-tinygemm \
        --gpu-lock "$out/gpu.lock" "$@" > "$out/targets-$name.log" 2>&1 &
}
if [ -z "${ZP_PROBES:-}" ]; then     # call 5 (be32d38): every format
bench bs32 32,32+zp env,default,single_warp
bench bs16 16,16+zp env,default
bench bs64 64,64+zp env,default
bench bs128 128,128+zp env,default
else    # ZP_PROBES=1 (call 6): unroll 2 for zero points at bs 64 / 128, at 4 and 3 blocks per SM
bench zp64 64+zp default --configs c4u2b4,c4u2b3
bench zp128 128+zp default --configs c4u2b4,c4u2b3
fi
wait
for f in "$out"/targets-*.log; do echo "== $f"; grep -h "^floor\|^env\|^default\|^single_warp\|^probe\|Error" "$f" | head -24; done
tar -czf "$out/../m1-formats.tgz" -C "$out" . && rm -rf "${out:?}"/* && mv "$out/../m1-formats.tgz" "$out/"
