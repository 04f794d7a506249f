#!/usr/bin/env bash
# Same-run A/B on a GPU machine with PyTorch: the README's tables (prefill
# fp32, bf16 and TF32; decode fp32 and bf16) for several benchmark binaries
# (builds of different commits, or against Kokkos with and without the large
# team-scratch opt-in), each beside PyTorch in the same run. Rows, with the
# commit and team scratch of each binary, go to RESULTS_DIR/results.jsonl.
#   perf_tests/ab_campaign.sh RESULTS_DIR BENCH_BINARY[:TEAM_SCRATCH]...
# where TEAM_SCRATCH (bytes) is recorded for binaries too old to report it.
set -uo pipefail
out=$1
shift
here=$(dirname "$0")
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee -a "$out/gpu.txt"
for arg in "$@"; do
  bench=${arg%%:*}
  scratch=0
  [[ $arg == *:* ]] && scratch=${arg##*:}
  tag=$(basename "$(dirname "$bench")")
  for dtype in float32 bfloat16 tf32; do
    PYTHONUNBUFFERED=1 timeout 240 python3 "$here/compare_torch.py" --bench "$bench" --backend cuda --dtype "$dtype" \
      --algorithms Auto --filter 'B2_T32|B4_T1024|B1_T4096' --repetitions 3 --team-scratch "$scratch" --append \
      --out "$out/results.jsonl" 2>&1 | tee "$out/prefill_${dtype}_$tag.log" | grep -E '^B|ceilings'
  done
  for dtype in float32 bfloat16; do
    PYTHONUNBUFFERED=1 timeout 240 python3 "$here/compare_decode.py" --bench "$bench" --dtype "$dtype" \
      --filter 'Tq1_' --repetitions 3 --team-scratch "$scratch" --append --out "$out/results.jsonl" 2>&1 | tee "$out/decode_${dtype}_$tag.log" |
      grep -E '^B|copy'
  done
done
