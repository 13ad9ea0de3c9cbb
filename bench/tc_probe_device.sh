#!/bin/bash
# Tensor-core configuration probes (issue 20, session 6; bench/NOTES.md "Session 6: tensor-core
# probes"): six bench.targets processes at once sharing the GPU through --gpu-lock (GPU work
# serialized, Numba's 5-10 s compilations overlapped), each cut at ${PROBE_S:-85} s (a cut run
# leaves its .partial.json). Results: $OUT/p*/targets-*.json and $OUT/p*.log.
# Usage (repository root, GPU machine): OUT=/some/dir bench/tc_probe_device.sh
set -u
out=${OUT:?set OUT}; lock="$out/gpu.lock"; t=${PROBE_S:-85}
run() { name=$1; shift; mkdir -p "$out/$name"
  timeout "$t" python3 -m bench.targets --out "$out/$name" --quick --formats 32 --gpu-lock "$lock" "$@" \
    > "$out/$name.log" 2>&1; echo "$name exit $?" >> "$out/exits.txt"; }
run p1 --shapes gate/up --m 2,8,16 --dtypes float16 --variants tensor_core --configs tck4u4w8b2d0@gate/up &
run p2 --shapes gate/up --m 2,8,16 --dtypes float16 --variants none --no-tinygemm --configs tck4u2w8b2d1@gate/up &
run p3 --shapes down --m 2,8,16 --dtypes float16 --variants tensor_core --configs tck8u4w8b2d0@down &
run p4 --shapes down --m 2,8,16 --dtypes float16 --variants none --no-tinygemm --configs tck8u2w8b2d1@down &
run p5 --shapes lm_head --m 8,16 --dtypes float16 --variants tensor_core --configs tct2b2@lm_head &
run p6 --shapes gate/up --m 2,8,16 --dtypes bfloat16 --variants tensor_core --no-tinygemm --configs tck4u4w8b2d0@gate/up &
wait
cat "$out/exits.txt"
grep -h "^floor\|^tinygemm\|^tensor_core\|^probe" "$out"/p*.log | sort -k2,2 -s
