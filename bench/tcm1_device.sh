#!/usr/bin/env bash
# One device call for issue 19's tensor-core M = 1 probe (bench/probe_tcm1.py; bench/NOTES.md
# "Session 13"), then the eager host-latency rows of issue 22 item 4. Each stage is bounded, so a
# short lease still returns the earlier one. Everything lands under $OUT.
# Usage (repository root, CUDA machine): OUT=DIR bench/tcm1_device.sh
set -uo pipefail
out=${OUT:?set OUT to the folder for logs and results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/device.txt"
git rev-parse HEAD >> "$out/device.txt" 2>/dev/null
timeout "${TCM1_S:-300}" python3 -m bench.probe_tcm1 --out "$out" \
    --configs "${CONFIGS:-w8b3u2,w8b3u2o,w8b3u4o,w6b3u4o,w4b4u4o,w8b2u4o}" \
    --shapes "${SHAPES:-151936x2048,12288x2048,2048x6144}" > "$out/tcm1.log" 2>&1
echo "probe_tcm1 exit $?"
grep -v '^{' "$out/tcm1.log" | tail -40
if [ "${EAGER:-1}" = 1 ]; then
    timeout "${EAGER_S:-120}" python3 -m bench.eager_latency --out "$out" > "$out/eager.log" 2>&1
    echo "eager_latency exit $?"; tail -15 "$out/eager.log"
fi
