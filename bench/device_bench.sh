# Sourced by the device scripts (bench/batch_mma_device.sh, bench/h200_targets_device.sh):
# `bench NAME ARGS...` starts `python -m bench.targets --quick` with ARGS in the background,
# writing into $out/NAME and $out/targets-NAME.log, bounded by BENCH_S seconds (default 330),
# and timing under the GPU lock $out/gpu.lock (the processes compile at once, time one at a time).
lock="$out/gpu.lock"

bench() {   # name, then bench.targets arguments
    local name=$1; shift
    mkdir -p "$out/$name"
    timeout "${BENCH_S:-330}" python3 -m bench.targets --out "$out/$name" --quick --gpu-lock "$lock" "$@" \
        > "$out/targets-$name.log" 2>&1 &
}
