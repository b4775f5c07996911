#!/usr/bin/env bash
# The CUDA tier's device run (copied to .device/run.sh by device-bundle.sh). From the
# repository root on the GPU machine:
#   bash .device/run.sh test    conformance suite, then the three mutation runs
#   bash .device/run.sh bench   bench_gemv, then the torch anchors (same machine, same call)
#   bash .device/run.sh all     both (may approach a 10-minute call limit)
# Everything lands under $OUT (default ./out): logs, summary, bench table and JSON.
set -u
stage="${1:-all}"
mkdir -p "${OUT:-out}"
OUT="$(cd "${OUT:-out}" && pwd)"
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
if [ "$stage" = test ] || [ "$stage" = all ]; then
  echo "== conformance (must pass)"
  start=$(date +%s)
  .device/gemv_vs_oracle --test-threads=1 --nocapture > "$OUT/gemv_vs_oracle.log" 2>&1
  echo "gemv_vs_oracle rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
  grep -E "worst error|NVRTC|test result|FAILED|panicked" "$OUT/gemv_vs_oracle.log" | head -40
  echo "== mutations (each must FAIL)"
  for m in swap-nibbles group-off-by-one scale-1pct; do
    TESSERA_CUDA_MUTATE=$m TESSERA_FORMATS=int4-g64,fp8-e4m3-b128,mq4-g256-v2,mxfp4 \
      .device/gemv_vs_oracle --test-threads=1 --nocapture every_format_matches_the_oracle > "$OUT/mutate_$m.log" 2>&1
    rc=$?
    if grep -q "skipped:" "$OUT/mutate_$m.log"; then verdict="skipped (no GPU)"
    elif [ $rc -ne 0 ]; then verdict="caught (the run failed, as it must)"; else verdict="NOT CAUGHT"; fi
    echo "mutation $m rc=$rc: $verdict" | tee -a "$OUT/summary.txt"
  done
fi
if [ "$stage" = bench ] || [ "$stage" = all ]; then
  echo "== bench"
  start=$(date +%s)
  OUT="$OUT" .device/bench_gemv > "$OUT/bench_gemv.md" 2> "$OUT/bench_gemv.log"
  echo "bench_gemv rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
  cat "$OUT/bench_gemv.md"
  echo "== torch anchors"
  OUT="$OUT" python3 .device/anchor_gpu.py > "$OUT/anchor_gpu.log" 2>&1
  echo "anchor_gpu rc=$?" | tee -a "$OUT/summary.txt"
  cat "$OUT/anchor_gpu.log"
fi
