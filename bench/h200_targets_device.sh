#!/usr/bin/env bash
# Every open issue's target rows on one GPU, in two device calls of under 600 s (session 20, on
# the H200 the targets are set for; bench/NOTES.md has the predictions):
#   CALL=1  issue 22 on the real driver (the lifecycle and call-path tests, the replay/capture
#           race 50 times, the 12 s stress), eager latency, then issue 19: every shape at M = 1
#           and every lm_head format, both dtypes, against the stream floor and tinygemm;
#   CALL=2  issue 20: M = 2, 4, 5, 8, 16 on every decode shape and M = 2, 4, 8, 16 on lm_head (the
#           chooser and the tensor-core kernel, tinygemm at the same M), the lm_head formats at
#           M = 16; issue 21: the decode chain (with the chooser's kernels and the fused split-K
#           down too); probes of the K split with one column tile on the decode shapes;
#   CALL=3  those probes alone, and bs 16 + zp on lm_head at M = 16 (any card);
#   CALL=4  the one-tile K split as chosen (k/v, q/o, down at M = 5, 8, 16) and its GPU tests;
#   CALL=5  session 21's changes: bf16 stores through cvt.rn.bf16.f32 (k/v, q/o, gate/up, down at
#           M = 1, 5, 16, both dtypes), the rewritten persistent chain against the best
#           conventional chain in one process, and their GPU tests;
#   CALL=6  the persistent chain (session 23: the cp.async ring) at 16 and 4 warps a block with its
#           phase timeline, against the best conventional chain (with its kernel timeline), and
#           its GPU tests;
#   CALL=7  session 23: the M = 1 mma fold against the CUDA-core default on lm_head (bs 32 and
#           bs 16 + zp, both dtypes; the H200 question of session 17), and issue 20's M = 8, 16
#           rows on gate/up, down and lm_head (the chooser, the tensor-core kernel, tinygemm);
#   CALL=8  session 26: the chain's words handoff against the waiting chain in one process (with
#           their kernel timelines), the boundary probe, and their GPU tests;
#   CALL=9  session 29: issue 21 on the card its targets name: the boundary probe (is a PDL
#           boundary under 0.64 us over its bytes?), then the waiting chain, merged and separate,
#           with its kernel timeline and 100 fresh-input replays, and (session 31) the merged chain
#           with one column group a warp for qkv, o (cols 1) and gate_up (cols 8), and (session 33)
#           the approximate exp2 / rcp tests of the chain's silu;
#   CALL=10 sessions 29-30: the issue-order probe (int4gemv/kernels/stagger.py) on the one-step
#           M = 1 shapes: the chooser's configuration with each warp of an SM starting 50-400 SM
#           cycles per rank after the one before, against its loads alone (x0) and the floor, fp16
#           (any card).
#   CALL=11 session 33: Nsight Compute (bench/ncu_probe.py) on the kernels the M = 1 and M = 16
#           targets turn on: lm_head bs 32 (the default fold fp16 and bf16, the staged mma fold),
#           gate_up and down at M = 1, down at M = 16: speed of light, warp states, scheduler,
#           occupancy, memory (one launch each, past the L2, checked against float64).
# The bench processes run at once, compiling in parallel and timing one at a time (--gpu-lock);
# every ratio is between rows of one process (its own floor and peers).
# Usage (repository root, CUDA machine): OUT=DIR [WORK=DIR] BENCH_GIT_COMMIT=<sha> CALL=N [PROBES=0] [M1_ROWS=0] bench/h200_targets_device.sh
# (PROBES=0: call 2 without the probes of call 3; M1_ROWS=0: call 1 without issue 19's rows)
# (everything written, under WORK or else OUT, ends in $OUT/h200-call<N>.tgz)
# (WORK=DIR: write there and put only the tarball in OUT: the device returns only so many files,
# and session 32 lost call 7's JSONs that way. Call 7's six processes compile at once: BENCH_S=240
# cut them all before their probes, so give it 400 and a call of its own)
set -uo pipefail
dest=${OUT:?set OUT to the folder for logs and results}
out=${WORK:-$dest}   # where everything is written; WORK (a temporary folder): only the tarball goes to OUT
mkdir -p "$out"
call=${CALL:?set CALL to 1 .. 11}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/device.txt"
# the card's clocks, power and clock-event reasons every 0.5 s for the whole call (added in
# session 25: two rows of one kernel in one process differed by 20 % on the H200 in session 23)
sampler=$(nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 500 > "$out/gpu-state.csv" 2>&1 & echo $!)   # not a job: `wait` skips it
trap 'kill $sampler 2>/dev/null' EXIT
workers=$(python3 -c "import os; print(min(14, max(1, (os.cpu_count() or 2) - 2)))")
. "$(dirname "$0")/device_bench.sh"   # bench NAME ARGS...
lm="--shapes lm_head"
small="--shapes k/v,q/o,gate/up,gate_up,down"

if [ "$call" = 1 ]; then
    LIFECYCLE_REQUIRE_GPU=1 LIFECYCLE_RACE_LOOPS=50 LIFECYCLE_STRESS_SECONDS=12 \
    timeout "${TESTS_S:-170}" python3 -m pytest -v -rs --tb=short --durations=15 -p no:cacheprovider \
        -n "$workers" --dist loadgroup tests/lifecycle tests/test_call_path.py tests/test_api_validation.py \
        tests/test_prepared.py tests/test_rules.py tests/test_weights.py tests/test_ort_interop.py \
        tests/test_eager_table.py tests/test_launcher.py > "$out/pytest-issue22.log" 2>&1
    echo "pytest exit $?"; grep -E "FAILED|ERROR|SKIPPED|passed|failed" "$out/pytest-issue22.log" | tail -8
    for i in 1 2; do
        mkdir -p "$out/eager$i"
        timeout "${EAGER_S:-40}" python3 -m bench.eager_latency --out "$out/eager$i" > "$out/eager$i.log" 2>&1
        echo "eager $i exit $?"; tail -3 "$out/eager$i.log"
    done
    if [ "${M1_ROWS:-1}" = 1 ]; then   # M1_ROWS=0: issue 22 alone
        bench m1small --m 1 $small --variants default,single_warp,env
        bench m1lm16 --m 1 $lm --formats 32,16,16+zp,32+zp --variants default,single_warp,env --no-tinygemm
        bench m1lm64 --m 1 $lm --formats 32,64,64+zp,128,128+zp --variants default,env
    fi
elif [ "$call" = 2 ]; then
    bench small816 --m 8,16 $small --variants env,tensor_core
    bench small245 --m 2,4,5 $small --variants env
    bench lm816 --m 8,16 $lm --formats 32 --variants env,tensor_core
    bench lm24 --m 2,4 $lm --formats 32 --variants env
    bench fmt16a --m 16 $lm --formats 32,16,16+zp,32+zp --dtypes float16 --variants env --no-tinygemm
    bench fmt16b --m 16 $lm --formats 32,64,64+zp,128,128+zp --dtypes float16 --variants env --no-tinygemm
fi
if [ "$call" = 3 ] || { [ "$call" = 2 ] && [ "${PROBES:-1}" = 1 ]; }; then   # PROBES=0: none in call 2
    # probes: the K split with one column tile (16-column groups), 4 warps at 3 blocks per SM and
    # 8 warps at 1 block per SM, against the chooser, the tensor-core kernel and tinygemm
    for m in 8 16; do
        bench ksplit$m --m $m $small --config-shapes k/v,q/o,gate/up,gate_up,down --dtypes float16 \
            --variants env,tensor_core --configs c2l4u4b3w4mk4,c2l4u4b1w8mk8
    done
    # bs 16 + zp at M = 16 (session 19's prepared probes): 2 blocks per SM (255 registers, no
    # spill) or one column tile, against the chooser's 4 x 2 at 3 blocks and bs 32
    bench zp16 --m 16 $lm --formats 32,16+zp --dtypes float16 --variants env --no-tinygemm \
        --configs c4l4u2b2m,c2l4u4b3m
fi
if [ "$call" = 4 ]; then
    # the one-tile K split as the chooser takes it (environment unset), against the tensor-core
    # kernel and tinygemm in one process per row set; 5 rows are the rule's unmeasured edge
    bench tile16 --m 16 --shapes k/v,q/o,down --variants env,tensor_core
    bench tile58 --m 5,8 --shapes k/v,q/o,down --variants env,tensor_core
fi
if [ "$call" = 7 ]; then
    for dt in float16 bfloat16; do
        bench mma32-$dt --m 1 $lm --formats 32 --dtypes $dt --variants default --no-tinygemm \
            --configs c2l4u4b4m,c2l4u2b6m,c2l4u2b4m
        bench mma16zp-$dt --m 1 $lm --formats 16+zp --dtypes $dt --variants default --no-tinygemm \
            --configs c2l4u2b4m,c2l4u4b4m
    done
    bench lm816 --m 8,16 $lm --formats 32 --variants env,tensor_core
    bench gd816 --m 8,16 --shapes gate/up,down --variants env,tensor_core
fi
if [ "$call" = 11 ]; then
    sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats"
    for case in "lm32 --shape lm_head" "lm32mma --shape lm_head --config c2l4u2b4m" \
            "lm32bf --shape lm_head --dtype bfloat16" "gu --shape gate_up" "dn --shape down" \
            "dn16 --shape down --M 16 --variant env"; do
        set -- $case; name=$1; shift
        timeout "${NCU_S:-90}" ncu --clock-control none -k regex:kernel --launch-skip 2 --launch-count 1 \
            $sections python3 -m bench.ncu_probe "$@" > "$out/ncu-$name.txt" 2>&1
        echo "ncu $name exit $?"; grep -E "relative error|Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Achieved Occupancy|Registers Per" "$out/ncu-$name.txt" | head -12
    done
fi
if [ "$call" = 10 ]; then   # delays in SM cycles (1.98 GHz: 200 cycles ~ 100 ns)
    one="--m 1 --dtypes float16 --variants default --no-tinygemm"
    bench st4 $one --shapes gate/up --config-shapes gate/up \
        --configs c4u2b4x0,c4u2b4x0d200,c4u2b4d100,c4u2b4d200,c4u2b4d300,c4u2b4d400
    bench st2 $one --shapes q/o --config-shapes q/o --configs c2u2b4x0,c2u2b4x0d160,c2u2b4d80,c2u2b4d160,c2u2b4d240
    bench st1 $one --shapes k/v --config-shapes k/v --configs c1u2b8x0,c1u2b8d50,c1u2b8d100,c1u2b8d200
fi
if [ "$call" = 5 ]; then
    bench bf16 --m 1,5,16 --shapes k/v,q/o,gate/up,down --variants env
fi
wait
if [ "$call" = 5 ]; then
    mkdir -p "$out/chain"
    timeout "${CHAIN_S:-150}" python3 -m bench.decode_chain --out "$out/chain" --race 300 --persistent \
        --configs merged:default+pdl:down=4x4k4:silu=fused > "$out/decode-chain.log" 2>&1
    echo "decode chain exit $?"; tail -8 "$out/decode-chain.log"
    timeout "${TESTS_S:-150}" python3 -m pytest -v -rs -p no:cacheprovider --tb=short tests/test_intrinsics.py \
        tests/test_chain_gpu.py::test_persistent_chain_experiment_is_correct_and_race_free \
        > "$out/pytest-s21.log" 2>&1
    echo "pytest exit $?"; grep -E "FAILED|ERROR|SKIPPED|passed|failed" "$out/pytest-s21.log" | tail -8
fi
if [ "$call" = 6 ]; then
    mkdir -p "$out/chain"
    timeout "${TESTS_S:-200}" python3 -m pytest -q -p no:cacheprovider tests/test_intrinsics.py tests/test_async_copy.py \
        tests/test_chain_gpu.py::test_persistent_chain_experiment_is_correct_and_race_free \
        tests/test_chain_gpu.py::test_persistent_chain_stamps_change_nothing_and_every_block_stamps_in_order \
        > "$out/pytest-s22.log" 2>&1 &
    timeout "${CHAIN_S:-300}" python3 -m bench.decode_chain --out "$out/chain" --race 100 --timeline --configs \
        merged:default+pdl:down=4x4k4:silu=fused persistent:warps=16 persistent:warps=4 \
        > "$out/decode-chain.log" 2>&1
    echo "decode chain exit $?"; wait
    grep -E "FAILED|ERROR|passed|failed" "$out/pytest-s22.log" | tail -4; grep -v "^ " "$out/decode-chain.log" | tail -45
fi
if [ "$call" = 8 ]; then
    mkdir -p "$out/chain" "$out/probe"
    timeout "${CHAIN_S:-200}" python3 -m bench.decode_chain --out "$out/chain" --race 100 --timeline --configs \
        merged:default+pdl:down=4x4k4:silu=fused merged:default+pdl:down=4x4k4:silu=fused:handoff=words \
        > "$out/decode-chain.log" 2>&1
    echo "decode chain exit $?"; grep -v "^ " "$out/decode-chain.log" | tail -30
    timeout "${PROBE_S:-90}" python3 -m bench.boundary_probe --out "$out/probe" > "$out/probe.log" 2>&1
    echo "probe exit $?"; tail -16 "$out/probe.log"
    timeout "${TESTS_S:-150}" python3 -m pytest -v -rs -p no:cacheprovider --tb=short tests/test_handoff.py \
        tests/test_boundary_probe.py tests/test_intrinsics.py \
        tests/test_chain_gpu.py::test_words_handoff_is_the_grid_chain_bit_for_bit_and_race_free \
        > "$out/pytest-s26.log" 2>&1
    echo "pytest exit $?"; grep -E "FAILED|ERROR|SKIPPED|passed|failed" "$out/pytest-s26.log" | tail -8
fi
if [ "$call" = 9 ]; then
    mkdir -p "$out/chain" "$out/probe"
    timeout "${PROBE_S:-90}" python3 -m bench.boundary_probe --out "$out/probe" > "$out/probe.log" 2>&1
    echo "probe exit $?"; tail -16 "$out/probe.log"
    timeout "${CHAIN_S:-260}" python3 -m bench.decode_chain --out "$out/chain" --race 100 --timeline --configs \
        merged:default+pdl:down=4x4k4:silu=fused separate:default+pdl:down=4x4k4:silu=fused \
        merged:default+pdl:qkv=d1x2:o=d1x2:gate_up=d8x2:down=4x4k4:silu=fused \
        > "$out/decode-chain.log" 2>&1
    echo "decode chain exit $?"; grep -v "^ " "$out/decode-chain.log" | tail -30
    # session 33: the one-instruction exp2 / rcp of the chain's silu on the hardware
    timeout "${TESTS_S:-60}" python3 -m pytest -v -rs -p no:cacheprovider --tb=short tests/test_approx.py \
        > "$out/pytest-s33.log" 2>&1
    echo "pytest exit $?"; grep -E "FAILED|ERROR|SKIPPED|passed|failed" "$out/pytest-s33.log" | tail -4
fi
if [ "$call" = 4 ]; then
    timeout "${TESTS_S:-220}" python3 -m pytest -v -rs -p no:cacheprovider -n "$workers" --tb=short \
        tests/test_default_mma_batch.py tests/test_tensor_core.py::test_batches_run_on_tensor_cores_and_say_why \
        tests/test_tensor_core.py::test_through_gemv tests/test_default_kernel.py::test_through_gemv_every_dtype_and_batch \
        > "$out/pytest-one-tile.log" 2>&1
    echo "pytest exit $?"; grep -E "FAILED|ERROR|SKIPPED|passed|failed" "$out/pytest-one-tile.log" | tail -8
fi
if [ "$call" = 2 ]; then
    mkdir -p "$out/chain"
    timeout "${CHAIN_S:-150}" python3 -m bench.decode_chain --out "$out/chain" --race 300 --configs \
        merged:single_warp+pdl:qkv=4x4s:o=4x4s:gate_up=4x4s:down=4x4k4:silu=fused merged:default+pdl \
        merged:default+pdl:down=4x4k4:silu=fused \
        separate:single_warp+pdl:q=4x4s:k=4x4s:v=4x4s:o=4x4s:gate=4x4s:up=4x4s:down=4x4k4:silu=fused \
        > "$out/decode-chain.log" 2>&1
    echo "decode chain exit $?"; tail -8 "$out/decode-chain.log"
fi
for f in "$out"/targets-*.log; do echo "== $f"; grep -E "^(floor|tinygemm|env|default|single|tensor|c[0-9])|wrote|Error|error:" "$f" | tail -40; done
tar czf "$dest/h200-call$call.tgz" -C "$out" --exclude "h200-call$call.tgz" --exclude gpu.lock . && ls -la "$dest"
