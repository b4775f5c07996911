#!/usr/bin/env bash
# The CUDA tier's device run (copied to .device/run.sh by device-bundle.sh). From the
# repository root on the GPU machine:
#   bash .device/run.sh test     conformance suite (GEMV, GEMM, MoE), then the three mutation
#                                runs on the GEMV, the GEMM and the MoE GEMV, and split-sum on
#                                the split-K GEMM (each must fail)
#   bash .device/run.sh bench    bench_gemv (with $TUNINGS), bench_gemm, then the torch anchors
#                                (SKIP_GEMM=1 leaves out bench_gemm and the cuBLAS GEMM
#                                anchor, SKIP_ANCHORS=1 the torch anchors)
#   bash .device/run.sh matrix   `xtask test-matrix --backend cuda` (docs/BACKENDS.md column)
#   bash .device/run.sh sass     ncu's per-instruction profile of the 16-row GEMV for each
#                                S:OxI:format in $SASS_CASES, summarised by opcode
#   bash .device/run.sh wgmma    the warpgroup-MMA GEMM (Tuning::gemm_wgmma, not yet run on a
#                                GPU): tensor_probe (layout check, tensor-core ceilings), the
#                                GEMM suite with TESSERA_CUDA_WGMMA=1 on int4-row / int8-row,
#                                and bench_gemm at S = 512 with and without it, then cuBLAS
#   bash .device/run.sh all      test, bench, matrix (mind the 10-minute call limit)
# Several stages may be given: `bash .device/run.sh test bench`. Every step has its own
# time limit, so one hang cannot eat the call. Everything lands in $OUT/results.tgz
# (default ./out): the device tool returns at most 8 files, so the logs travel as one.
set -u
mkdir -p "${OUT:-out}"
OUT="$(cd "${OUT:-out}" && pwd)"
cd "$(dirname "$0")/.."
stages="${*:-all}"
has() { [[ " $stages " == *" $1 "* || " $stages " == *" all "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
date -u +%Y-%m-%dT%H:%MZ >> "$OUT/gpu.txt"
if has test; then
  echo "== conformance (must pass)"
  start=$(date +%s)
  timeout 330 .device/gemv_vs_oracle --test-threads=1 --nocapture > "$OUT/gemv_vs_oracle.log" 2>&1
  echo "gemv_vs_oracle rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
  grep -E "worst error|NVRTC|test result|FAILED|panicked|^test " "$OUT/gemv_vs_oracle.log" | head -80
  echo "== mutations (each must FAIL, on the GEMV, the GEMM and the MoE GEMV)"
  for m in swap-nibbles group-off-by-one scale-1pct; do
    log="$OUT/mutate_$m.log"
    TESSERA_CUDA_MUTATE=$m TESSERA_FORMATS=int4-g64,fp8-e4m3-b128,mq4-g256-v2,mxfp4 \
      timeout 150 .device/gemv_vs_oracle --test-threads=1 --nocapture --exact \
      every_format_matches_the_oracle gemm_matches_the_oracle moe_gemv_matches_the_oracle_per_pair > "$log" 2>&1
    rc=$?
    for t in every_format_matches_the_oracle gemm_matches_the_oracle moe_gemv_matches_the_oracle_per_pair; do
      # libtest lists the failed tests, indented, after "failures:" (with --nocapture the
      # per-test "... FAILED" may land after the test's own output).
      if grep -q "skipped:" "$log"; then verdict="skipped (no GPU)"
      elif ! grep -q "^test result:" "$log"; then verdict="no verdict (rc=$rc, see the log)"
      elif sed -n '/^failures:$/,/^test result:/p' "$log" | grep -qx "    $t"; then verdict="caught (the test failed, as it must)"
      else verdict="NOT CAUGHT"; fi
      echo "mutation $m $t: $verdict" | tee -a "$OUT/summary.txt"
    done
  done
  # The split-K reduction's own mutation: only the forced-split GEMM test reaches it.
  log="$OUT/mutate_split-sum.log"
  TESSERA_CUDA_MUTATE=split-sum TESSERA_FORMATS=int4-g64,int8-row \
    timeout 90 .device/gemv_vs_oracle --test-threads=1 --nocapture --exact gemm_split_k_matches_the_oracle > "$log" 2>&1
  rc=$?
  if grep -q "skipped:" "$log"; then verdict="skipped (no GPU)"
  elif ! grep -q "^test result:" "$log"; then verdict="no verdict (rc=$rc, see the log)"
  elif sed -n '/^failures:$/,/^test result:/p' "$log" | grep -qx "    gemm_split_k_matches_the_oracle"; then verdict="caught (the test failed, as it must)"
  else verdict="NOT CAUGHT"; fi
  echo "mutation split-sum gemm_split_k_matches_the_oracle: $verdict" | tee -a "$OUT/summary.txt"
fi
if has bench; then
  echo "== bench_gemv"
  start=$(date +%s)
  OUT="$OUT" timeout 240 .device/bench_gemv --tunings "${TUNINGS:-default}" ${GEMV_ARGS:-} > "$OUT/bench_gemv.md" 2> "$OUT/bench_gemv.log"
  echo "bench_gemv rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
  cat "$OUT/bench_gemv.md"
  if [ -z "${SKIP_GEMM:-}" ]; then
  echo "== bench_gemm"
  start=$(date +%s)
  OUT="$OUT" timeout 180 .device/bench_gemm ${GEMM_ARGS:-} > "$OUT/bench_gemm.md" 2> "$OUT/bench_gemm.log"
  echo "bench_gemm rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
  cat "$OUT/bench_gemm.md"
  fi
  if [ -z "${SKIP_ANCHORS:-}" ]; then
  echo "== torch anchors"
  OUT="$OUT" timeout 120 python3 .device/anchor_gpu.py > "$OUT/anchor_gpu.log" 2>&1
  echo "anchor_gpu rc=$?" | tee -a "$OUT/summary.txt"
  cat "$OUT/anchor_gpu.log"
  if [ -z "${SKIP_GEMM:-}" ]; then
  OUT="$OUT" timeout 90 python3 .device/anchor_gemm.py "${GEMM_BATCHES:-512}" > "$OUT/anchor_gemm.log" 2>&1
  echo "anchor_gemm rc=$?" | tee -a "$OUT/summary.txt"
  cat "$OUT/anchor_gemm.log"
  fi
  fi
fi
if [[ " $stages " == *" diag "* ]]; then
  # Diagnostics (not part of `all`): bench_gemv with $DIAG_TUNINGS at S = 1 and
  # $DIAG16_TUNINGS at S = 16 on $DIAG_SHAPES, then, where ncu exists, one profile each of
  # the 16-row GEMV of int4-row and int8-row at S = 1 on [6144 x 16384].
  echo "== diag"
  { which ncu nsys; nvidia-smi -q -d CLOCK | head -40; } > "$OUT/diag_env.txt" 2>&1
  mkdir -p "$OUT/d1" "$OUT/d16"
  start=$(date +%s)
  OUT="$OUT/d1" timeout 150 .device/bench_gemv --batches 1 --shapes "${DIAG_SHAPES:-6144x16384,4096x14336}" \
    --tunings "${DIAG_TUNINGS:-default,diag1,diag2}" ${DIAG_ARGS:-} > "$OUT/diag_s1.md" 2> "$OUT/diag_s1.log"
  echo "diag bench S=1 rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
  cat "$OUT/diag_s1.md"
  if [ -n "${DIAG16_TUNINGS:-}" ]; then
    start=$(date +%s)
    OUT="$OUT/d16" timeout 120 .device/bench_gemv --batches 16 --shapes "${DIAG_SHAPES:-6144x16384,4096x14336}" \
      --tunings "$DIAG16_TUNINGS" ${DIAG_ARGS:-} > "$OUT/diag_s16.md" 2> "$OUT/diag_s16.log"
    echo "diag bench S=16 rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
    cat "$OUT/diag_s16.md"
  fi
  if command -v ncu > /dev/null; then
    for f in ${NCU_FORMATS:-int4-row int8-row}; do
      start=$(date +%s)
      timeout 45 ncu -k regex:gemv_mma -s 3 -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats \
        .device/bench_gemv --quick --batches 1 --shapes 6144x16384 --formats "$f" > "$OUT/ncu_$f.txt" 2>&1
      echo "ncu $f rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
      grep -vE "^\[|^\|" "$OUT/ncu_$f.txt" | tail -120
    done
  else
    echo "no ncu on this machine" | tee -a "$OUT/summary.txt"
  fi
fi
if [[ " $stages " == *" sass "* ]]; then
  # Per-instruction profile (not part of `all`): for each S:OxI:format in $SASS_CASES, ncu's
  # SASS source page of one 16-row GEMV launch (executions and stall samples per
  # instruction, clocks unlocked), summarised by opcode (ncu_sass_mix.py).
  echo "== sass"
  for c in ${SASS_CASES:-1:28672x4096:int4-g64}; do
    IFS=: read -r s sh f <<< "$c"
    rep="$OUT/sass_${s}_${sh}_${f}.csv"
    start=$(date +%s)
    timeout 120 ncu --clock-control none -k regex:gemv_mma -s 3 -c 1 --section SourceCounters \
      --section WarpStateStats --page source --print-source sass --csv \
      .device/bench_gemv --quick --batches "$s" --shapes "$sh" --formats "$f" > "$rep" 2>&1
    echo "sass $c rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
    python3 .device/ncu_sass_mix.py "$rep" 15 | tee "$OUT/sass_${s}_${sh}_${f}.txt"
  done
fi
if [[ " $stages " == *" wgmma "* ]]; then
  echo "== warpgroup GEMM"
  timeout 60 .device/tensor_probe > "$OUT/tensor_probe.txt" 2>&1
  echo "tensor_probe rc=$?" | tee -a "$OUT/summary.txt"
  cat "$OUT/tensor_probe.txt"
  start=$(date +%s)
  TESSERA_CUDA_WGMMA=1 TESSERA_FORMATS=int4-row,int8-row timeout 200 .device/gemv_vs_oracle \
    --test-threads=1 --nocapture --exact gemm_matches_the_oracle > "$OUT/wgmma_test.log" 2>&1
  echo "wgmma gemm_matches_the_oracle rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
  grep -E "worst|FAILED|panicked|test result" "$OUT/wgmma_test.log" | head -20
  timeout 200 .device/bench_gemm --quick --batches 512 --formats int4-row,int8-row \
    --tunings default,s8f8st4g1,s8f8st5g1 > "$OUT/wgmma_bench.txt" 2>&1
  echo "wgmma bench_gemm rc=$?" | tee -a "$OUT/summary.txt"
  grep -E "us,|rror" "$OUT/wgmma_bench.txt" | head -60
  timeout 150 python3 .device/anchor_gemm.py 512 > "$OUT/wgmma_anchor.txt" 2>&1
  tail -8 "$OUT/wgmma_anchor.txt"
fi
if has matrix; then
  if [ -x .device/xtask ]; then
    echo "== test matrix (cuda column)"
    start=$(date +%s)
    # xtask writes docs/BACKENDS.md in this copy of the tree; keep it under $OUT.
    timeout 240 .device/xtask test-matrix --backend cuda --json "$OUT/test_matrix.json" > "$OUT/test_matrix.log" 2>&1
    echo "test-matrix rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
    # (xtask writes its compile-time checkout path; fall back to this copy)
    cp /work/main/docs/BACKENDS.md "$OUT/BACKENDS.md" 2>/dev/null || cp docs/BACKENDS.md "$OUT/BACKENDS.md"
    tail -20 "$OUT/test_matrix.log"
  else
    echo "test-matrix: no .device/xtask in the bundle" | tee -a "$OUT/summary.txt"
  fi
fi
cat "$OUT/summary.txt" 2>/dev/null
# One archive: the device tool returns at most 8 files.
tmp="$(mktemp -d)"
tar czf "$tmp/results.tgz" -C "$OUT" . && find "$OUT" -type f -delete && mv "$tmp/results.tgz" "$OUT/"
ls -la "$OUT"
