#!/usr/bin/env bash
# The wgpu tier's device run (copied to .device/wgpu/run.sh by device-bundle.sh). From the
# repository root on the GPU machine, with .gl/ (Vulkan loader debs) and .device/ carried:
#   bash .device/wgpu/run.sh test    naga check, conformance suite (both reductions), then
#                                    the three mutation runs (each must FAIL)
#   bash .device/wgpu/run.sh bench   bench_gemv (copy ceiling, S = 1 and 16, variants)
#   bash .device/wgpu/run.sh all     both (each step has its own time limit; ~9 min at most)
# Everything lands under $OUT/wgpu (default ./out/wgpu): env.txt (driver discovery),
# *.log, bench_gemv.md, bench_gemv_wgpu.json, record.json (xtask's perf record of the
# default kernels) and summary.txt (one line per step). The
# script never stops at a failing step: every step is logged and summarised.
set -u
stage="${1:-all}"
mkdir -p "${OUT:-out}/wgpu"
LOG="$(cd "${OUT:-out}/wgpu" && pwd)"
cd "$(dirname "$0")/../.."
summary() { echo "$*" | tee -a "$LOG/summary.txt"; }
{
  echo "== $(date -u) stage=$stage host=$(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  echo "== unpacking .gl/*.deb"
  n=0
  for f in .gl/*.deb; do
    [ -e "$f" ] || continue
    dpkg -x "$f" / && n=$((n + 1)) || echo "dpkg -x $f failed"
  done
  echo "unpacked $n packages"
  ldconfig 2>&1 || true
  ldconfig -p 2>/dev/null | grep -E "libvulkan|libGLX_nvidia|libnvidia-glcore" || echo "no libvulkan/nvidia GL libs in ldconfig"
  echo "== Vulkan ICD files"
  find / -xdev \( -name 'nvidia_icd*.json' -o -name '*icd*.json' -path '*vulkan*' \) 2>/dev/null | head -20
} > "$LOG/env.txt" 2>&1
if [ -z "${VK_DRIVER_FILES:-}" ]; then
  for c in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
           /etc/vulkan/icd.d/nvidia_icd.json $(find / -xdev -name 'nvidia_icd*.json' 2>/dev/null | head -3); do
    if [ -f "$c" ]; then export VK_DRIVER_FILES="$c"; break; fi
  done
fi
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-<unset>}" | tee -a "$LOG/env.txt"
[ -n "${VK_DRIVER_FILES:-}" ] && cat "$VK_DRIVER_FILES" >> "$LOG/env.txt" 2>&1
export RUST_BACKTRACE=1
# Name the NVIDIA adapter so a CPU fallback adapter is never benchmarked by mistake
# (override with TESSERA_WGPU_ADAPTER= to take the best one).
export TESSERA_WGPU_ADAPTER="${TESSERA_WGPU_ADAPTER-NVIDIA}"
dev=.device/wgpu
if [ "$stage" = test ] || [ "$stage" = all ]; then
  echo "== shaders (naga, no device)"
  timeout 60 $dev/shaders > "$LOG/shaders.log" 2>&1
  summary "shaders rc=$?"
  echo "== conformance (must pass; TESSERA_REQUIRE_BACKENDS=wgpu turns 'skipped' into a failure)"
  start=$(date +%s)
  TESSERA_REQUIRE_BACKENDS=wgpu timeout 300 $dev/conformance --test-threads=4 --nocapture > "$LOG/conformance.log" 2>&1
  summary "conformance rc=$? ($(( $(date +%s) - start )) s)"
  grep -E "^wgpu |skipped|test result|FAILED|panicked" "$LOG/conformance.log" | head -40
  grep -E "wgpu gemv .*(pass|FAIL)" "$LOG/conformance.log" | sort > "$LOG/conformance_cells.txt"
  echo "== mutations (each must FAIL)"
  for m in swap-nibbles group-off-by-one scale-1pct; do
    TESSERA_WGPU_MUTATE=$m TESSERA_REQUIRE_BACKENDS=wgpu timeout 60 $dev/conformance --test-threads=4 --nocapture \
      conformance::int4_g64 conformance::fp8_e4m3_b128 conformance::mq4_g256_v2 conformance::mxfp4 conformance::q4_k \
      > "$LOG/mutate_$m.log" 2>&1
    rc=$?
    if grep -qE "skipped:|unavailable" "$LOG/mutate_$m.log"; then verdict="NOT RUN (no adapter: see the log)"
    elif [ $rc -ne 0 ]; then verdict="caught (the run failed, as it must)"; else verdict="NOT CAUGHT"; fi
    summary "mutation $m rc=$rc: $verdict"
  done
fi
if [ "$stage" = bench ] || [ "$stage" = all ]; then
  echo "== bench"
  start=$(date +%s)
  OUT="$LOG" timeout 240 $dev/bench_gemv --record "$LOG/record.json" > "$LOG/bench_gemv.md" 2> "$LOG/bench_gemv.log"
  summary "bench_gemv rc=$? ($(( $(date +%s) - start )) s)"
  cat "$LOG/bench_gemv.md"
fi
cat "$LOG/summary.txt"
