#!/usr/bin/env bash
# Everything that needs a GPU, in one call that ends within $DEADLINE seconds (540 unless set): the GPU bench, the
# gpu-marked tests, the doctor's smoke test, the monitor on real NVML, the profiler's overhead, the tuner. Steps run
# in order of importance; each gets its own limit or what is left before the deadline, whichever is less.
#
# Made for a GPU machine with no network whose python3 already holds a CUDA build of torch. Beforehand, on a
# machine with PyPI: `bash scripts/device_prepare.sh` (the few wheels that image lacks, into .whl/); the GPU run
# carries .whl. Elsewhere it runs with whatever python3 (or $PY) has.
#
# Results: $OUT/summary.txt (each step's exit code and seconds, then the headline tables), $OUT/bench.json, and
# every file of the run in $OUT/device_results.tar.gz, packed again after each step so a run cut short still
# brings back what it finished. Copy the numbers into docs/measurements/ with the card named.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-device_out}"
PY="${PY:-python3}"
WORK="$(mktemp -d /tmp/gpufly_device.XXXXXX)"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
DEADLINE="${DEADLINE:-540}"
BEGIN=$(date +%s)
: > "$SUMMARY"

if [ -d .whl ] && compgen -G '.whl/*.whl' >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpufly_site \
        .whl/*.whl > "$WORK/wheels.txt" 2>&1 || { echo "installing .whl/ failed:"; tail -n 20 "$WORK/wheels.txt"; }
    export PYTHONPATH="/tmp/gpufly_site${PYTHONPATH:+:$PYTHONPATH}"
fi
# The checkout itself, without installing it (the image has no network and pip would look for the build backend).
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

pack() { tar -czf "$OUT/device_results.tar.gz" -C "$WORK" . 2>/dev/null; }

# step NAME SECONDS COMMAND...: run COMMAND under a time limit, its output in $WORK/NAME.txt; note exit and seconds.
step() {
    local name="$1" limit="$2" start rc left
    shift 2
    start=$(date +%s)
    left=$(( DEADLINE - (start - BEGIN) - 5 ))
    if [ "$left" -lt 10 ]; then
        printf '%-18s skipped: the deadline (%ss) is near\n' "$name" "$DEADLINE" | tee -a "$SUMMARY"
        return
    fi
    [ "$left" -lt "$limit" ] && limit="$left"
    timeout "$limit" "$@" > "$WORK/$name.txt" 2>&1
    rc=$?
    printf '%-18s exit %-3s %4ss (limit %ss)\n' "$name" "$rc" "$(( $(date +%s) - start ))" "$limit" | tee -a "$SUMMARY"
    pack
}

GF=("$PY" -m gpufly)
step environment 30 bash -c "nvidia-smi; uname -a; $PY -c 'import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.is_available())'; $PY -m pip list 2>/dev/null"
# The first priority: the bench (the issue's "whole GPU bench under 3 minutes" is measured here, once).
step bench 185 "${GF[@]}" bench --device cuda:0 --save "$WORK/bench.json"
cp "$WORK/bench.json" "$OUT/bench.json" 2>/dev/null
# The gpu-marked tests, named by file: pytest imports every module it collects before -m deselects, and modules
# elsewhere import packages this image may lack. The bench tests read the run above instead of a second bench.
GPU_TESTS=$(grep -rl --include='test_*.py' -E 'mark\.gpu' tests | sort)
# pyproject's addopts spread tests over CPUs with pytest-xdist, which the image may lack: plain options here.
step pytest_gpu 200 env GPUFLY_BENCH_RUN="$WORK/bench.json" "$PY" -m pytest -o addopts="--strict-markers" -m gpu -q -rs \
    -p no:cacheprovider $GPU_TESTS
# The bench's CUDA-event timing beside torch.matmul timed by a synchronized wall clock (a figure, not a test).
step bench_harness 40 "$PY" benchmarks/bench_harness.py --device cuda --dtype bf16 --sizes 4096,8192 --rounds 3
step doctor_deep 45 "${GF[@]}" doctor --deep --json
step doctor 20 "${GF[@]}" doctor --save "$WORK/facts.json"
step report 20 "${GF[@]}" report --json
# The monitor on real NVML: a recording of every NVML call the backend makes (a fixture for the fake pynvml),
# one snapshot, a few recorded samples, what a sample costs.
step record_nvml 20 "$PY" scripts/record_nvml_fixture.py "$WORK/nvml_recorded.json"
cp "$WORK/nvml_recorded.json" "$OUT/nvml_recorded.json" 2>/dev/null
step top_once 15 "${GF[@]}" top --once --json
step watch 15 "${GF[@]}" watch --count 5 --interval 1 --output "$WORK/watch.jsonl"
step monitor_overhead 30 "$PY" benchmarks/monitor_overhead.py --samples 200
# The tuner's recommender case study on the GPU (the stages only; the searches follow below), then the
# profiler's overhead on the GPU (a short run).
step tune_speedups 150 "$PY" benchmarks/tune_speedups.py --device cuda --steps 80 --skip-search
step profile_overhead 30 "$PY" benchmarks/profile_overhead.py --device cuda --rounds 3 --processes 1
# Short tuner searches: the CNN, and inference on the transformer.
step tune_cnn 40 "${GF[@]}" tune cnn --budget-minutes 0.4 --results "$WORK/tune_cnn.jsonl" --html "$WORK/tune_cnn.html"
step tune_infer 35 "${GF[@]}" tune transformer --task infer --budget-minutes 0.3 --steps 20 \
    --results "$WORK/tune_infer.jsonl"

{
    echo
    for name in bench pytest_gpu bench_harness tune_speedups tune_cnn tune_infer profile_overhead monitor_overhead; do
        echo "== $name (last lines)"
        tail -n 40 "$WORK/$name.txt" 2>/dev/null
    done
} >> "$SUMMARY"
pack
cat "$SUMMARY"
ls -la "$OUT"
