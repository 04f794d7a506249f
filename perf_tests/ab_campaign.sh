#!/usr/bin/env bash
# Same-run A/B on a GPU machine with PyTorch: the README's tables (prefill
# fp32, bf16 and TF32; decode fp32 and bf16) for several benchmark binaries
# (builds of different commits, or against Kokkos with and without the large
# team-scratch opt-in), each beside PyTorch in the same run. Rows, with the
# commit and team scratch of each binary, go to RESULTS_DIR/results.jsonl.
#   perf_tests/ab_campaign.sh RESULTS_DIR BENCH_BINARY[:TEAM_SCRATCH]...
# where TEAM_SCRATCH (bytes) is recorded for binaries too old to report it.
# PREFILL_DTYPES, DECODE_DTYPES, PREFILL_FILTER and DECODE_FILTER narrow the
# tables; every log goes to RESULTS_DIR/campaign.log.
set -uo pipefail
out=$1
shift
here=$(dirname "$0")
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee -a "$out/campaign.log"
prefill_dtypes=${PREFILL_DTYPES-float32 bfloat16 tf32}
decode_dtypes=${DECODE_DTYPES-float32 bfloat16}
log="$out/campaign.log"
for arg in "$@"; do
  bench=${arg%%:*}
  scratch=0
  [[ $arg == *:* ]] && scratch=${arg##*:}
  for dtype in $prefill_dtypes; do
    PYTHONUNBUFFERED=1 timeout 240 python3 "$here/compare_torch.py" --bench "$bench" --backend cuda --dtype "$dtype" \
      --algorithms Auto --filter "${PREFILL_FILTER:-B2_T32|B4_T1024|B1_T4096}" --repetitions 3 --team-scratch "$scratch" --append \
      --out "$out/results.jsonl" 2>&1 | tee -a "$log" | grep -E '^B|ceilings'
  done
  for dtype in $decode_dtypes; do
    PYTHONUNBUFFERED=1 timeout 240 python3 "$here/compare_decode.py" --bench "$bench" --dtype "$dtype" \
      --filter "${DECODE_FILTER:-Tq1_}" --repetitions 3 --team-scratch "$scratch" --append --out "$out/results.jsonl" 2>&1 | tee -a "$log" |
      grep -E '^B|copy'
  done
done
