#!/usr/bin/env bash
# Everything that needs a GPU, in one call (the timeouts add up to under 9 minutes): the gpu-marked tests, the doctor's smoke test, the facts.
# Results go under $OUT (default ./device_out): copy the numbers into docs/measurements/ with the card named.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-device_out}"
mkdir -p "$OUT"
python3 -m venv .venv-device && . .venv-device/bin/activate
pip install --quiet torch==2.13.0 2>/dev/null || pip install --quiet torch
pip install --quiet -e '.[dev]' 2>&1 | tail -2
pip install --quiet torchao 2>/dev/null || echo 'torchao not installed: weight-only trials are skipped'
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
gpufly doctor --deep --json > "$OUT/doctor_deep.json" 2> "$OUT/doctor_deep.stderr"
gpufly doctor --save "$OUT/facts.json" > "$OUT/doctor.txt" 2>&1
gpufly report --json > "$OUT/report.json" 2>&1
timeout 150 gpufly bench --save "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
echo "bench exit: $?" >> "$OUT/bench.txt"
# The monitor on real NVML: one snapshot, a few recorded samples, what a sample costs.
gpufly top --once --json > "$OUT/top_once.json" 2>&1
gpufly watch --count 5 --interval 1 --output "$OUT/watch.jsonl" > "$OUT/watch.txt" 2>&1
python benchmarks/monitor_overhead.py > "$OUT/monitor_overhead.txt" 2>&1
# The profiler's overhead on the GPU (a short run).
timeout 60 python benchmarks/profile_overhead.py --device cuda --rounds 5 > "$OUT/profile_overhead.txt" 2>&1
echo "profile_overhead exit: $?" >> "$OUT/profile_overhead.txt"
# The tuner on the GPU: the case study and a short search on the CNN.
timeout 120 python benchmarks/tune_speedups.py > "$OUT/tune_speedups.txt" 2>&1
echo "tune_speedups exit: $?" >> "$OUT/tune_speedups.txt"
timeout 60 gpufly tune cnn --budget-minutes 0.75 --results "$OUT/tune_cnn.jsonl" --html "$OUT/tune_cnn.html" > "$OUT/tune_cnn.txt" 2>&1
timeout 50 gpufly tune transformer --task infer --budget-minutes 0.6 --steps 20 --results "$OUT/tune_infer.jsonl" > "$OUT/tune_infer.txt" 2>&1
timeout 120 pytest -m gpu -v > "$OUT/pytest_gpu.txt" 2>&1
echo "pytest -m gpu exit: $?" >> "$OUT/pytest_gpu.txt"
ls -la "$OUT"
