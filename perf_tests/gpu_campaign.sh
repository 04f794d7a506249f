#!/usr/bin/env bash
# One campaign on a GPU machine with PyTorch: the unit tests on CUDA, the
# benchmark beside PyTorch on the GPU (fp32, then bf16, fp16 and TF32, then bf16
# decoding beside PyTorch and FlashMLA), and the
# OpenMP build beside PyTorch's CPU path. Writes results.jsonl and logs into RESULTS_DIR.
#   perf_tests/gpu_campaign.sh CUDA_BUILD_BIN OMP_BUILD_BIN RESULTS_DIR [gpu-filter] [cpu-filter]
# where *_BIN hold kokkosmla_unit_tests and kokkosmla_perf_tests of each build.
set -uo pipefail
cuda=$1 omp=$2 out=$3
gpu_filter=${4:-'B2_T32|B4_T1024|B1_T4096'}
cpu_filter=${5:-'B4_T1024|B1_T4096_H16'}
here=$(dirname "$0")
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
timeout 240 "$cuda/kokkosmla_unit_tests" --gtest_brief=1 2>&1 | tail -n 25 | tee "$out/unit_cuda.log"
PYTHONUNBUFFERED=1 timeout 300 python3 "$here/compare_torch.py" --bench "$cuda/kokkosmla_perf_tests" --backend cuda \
  --filter "$gpu_filter" --repetitions 3 --out "$out/results.jsonl" 2>&1 | tee "$out/gpu_bench.log"
# Tensor cores: bf16, fp16 and TF32 (Auto: the tensor-core path) beside PyTorch in the same dtype.
for dtype in bfloat16 float16 tf32; do
  PYTHONUNBUFFERED=1 timeout 200 python3 "$here/compare_torch.py" --bench "$cuda/kokkosmla_perf_tests" --backend cuda \
    --dtype "$dtype" --algorithms Auto --filter 'B4_T1024|B1_T4096' --repetitions 3 --append \
    --out "$out/results.jsonl" 2>&1 | tee "$out/gpu_bench_$dtype.log"
done
# bf16 decoding beside PyTorch, and beside FlashMLA when FLASHMLA_OUTPUT names
# the output of a FlashMLA benchmark run on this GPU (lines "flashmla b=.. h_q=.. s_k=.. time_us=..").
PYTHONUNBUFFERED=1 timeout 300 python3 "$here/compare_decode.py" --bench "$cuda/kokkosmla_perf_tests" --dtype bfloat16 \
  --filter _ --flashmla "${FLASHMLA_OUTPUT:-}" --repetitions 3 --append --out "$out/results.jsonl" 2>&1 |
  tee "$out/gpu_decode_bf16.log"
export OMP_NUM_THREADS=$(nproc) OMP_PROC_BIND=spread OMP_PLACES=threads
PYTHONUNBUFFERED=1 timeout 200 python3 "$here/compare_torch.py" --bench "$omp/kokkosmla_perf_tests" --backend openmp \
  --torch-device cpu --threads "$OMP_NUM_THREADS" --cpu-runs 3 --filter "$cpu_filter" --algorithms 'Auto|Decompressed' \
  --repetitions 2 --append --out "$out/results.jsonl" 2>&1 | tee "$out/cpu_bench.log"
