#!/usr/bin/env bash
# One device call for issue 19's lm_head rows: every format (bs 16/32/64/128, +- zero points) in
# fp16 and bf16 at M = 1 with the environment unset (`env`: the chooser) and the default tiling,
# plus the single-warp specialization on bs 32 fp16, each process against its own floor (four
# processes compiling at once, timing one at a time through --gpu-lock).
# Usage (repository root, CUDA machine): OUT=DIR BENCH_GIT_COMMIT=<sha> bench/m1_formats_device.sh
# (everything under $OUT ends in $OUT/m1-formats.tgz: the device tool returns a limited number of files)
set -uo pipefail
out=${OUT:?set OUT to the folder for logs and results}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/device.txt"
bench() {   # name, formats, variants
    mkdir -p "$out/$1"
    timeout "${BENCH_S:-300}" python3 -m bench.targets --out "$out/$1" --quick --m 1 --shapes lm_head \
        --formats "$2" --dtypes float16,bfloat16 --variants "$3" --no-tinygemm --gpu-lock "$out/gpu.lock" \
        > "$out/targets-$1.log" 2>&1 &
}
bench bs32 32,32+zp env,default,single_warp
bench bs16 16,16+zp env,default
bench bs64 64,64+zp env,default
bench bs128 128,128+zp env,default
wait
for f in "$out"/targets-*.log; do echo "== $f"; grep -h "^floor\|^env\|^default\|^single_warp\|Error" "$f" | head -24; done
tar -czf "$out/../m1-formats.tgz" -C "$out" . && rm -rf "${out:?}"/* && mv "$out/../m1-formats.tgz" "$out/"
