#!/usr/bin/env bash
# The Vulkan tier's device run (copied to .device/vulkan/run.sh by device-bundle.sh). From the
# repository root on the GPU machine:
#   bash .device/vulkan/run.sh test     every kernels-rocm test on NVIDIA Vulkan (must pass;
#                                       the mutation tests inside must see their FAIL)
#   bash .device/vulkan/run.sh bench    bench_gemv: copy ceiling and GEMV at S = 1, 16
#   bash .device/vulkan-matrix/run.sh matrix
#                                       `xtask test-matrix --backend vulkan-nvidia` (bundled
#                                       apart by device-bundle.sh --matrix: carry limits)
#   bash .device/vulkan/run.sh probe    vk_lifecycle_probe: 40 create/destroy cycles of the
#                                       loader + instance + device ("reload", the tier's
#                                       old lifecycle), of instance + device ("instance")
#                                       and of the device alone ("device", the lifecycle now)
#   bash .device/vulkan/run.sh all      test, bench, matrix (not probe)
# First it unpacks the Vulkan loader from .gl/*.deb and points the loader at the NVIDIA ICD.
# Everything lands in $OUT/results.tgz (default ./out), plus summary.txt and the bench table.
set -u
stages="${*:-all}"
has() { case " $stages " in *" $1 "*|*" all "*) return 0;; *) return 1;; esac; }
mkdir -p "${OUT:-out}"
OUT="$(cd "${OUT:-out}" && pwd)"
cd "$(dirname "$0")/../.."
dev="$(basename "$(dirname "$0")")"; dev=".device/$dev"
# TESSERA_VK_LOCAL=1: a smoke test on this machine's own loader and ICD (no unpacking).
if [ -z "${TESSERA_VK_LOCAL:-}" ]; then
  for f in .gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done
  ldconfig 2>/dev/null
  icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  if [ ! -e "$icd" ]; then
    icd=$(find / -name 'nvidia_icd*.json' -path '*vulkan*' 2>/dev/null | head -1)
  fi
  export VK_DRIVER_FILES="$icd" VK_ICD_FILENAMES="$icd"
  export TESSERA_VK_ADAPTER="${TESSERA_VK_ADAPTER:-nvidia}"
else
  icd="(local)"
fi
{
  echo "icd: $icd"
  ldconfig -p 2>/dev/null | grep -i libvulkan || echo "libvulkan: not in ldconfig"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
} > "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
if case " $stages " in *" probe "*) true;; *) false;; esac; then
  echo "== lifecycle probe (why the first NVIDIA run failed)"
  echo "ulimit -n: $(ulimit -n)" | tee -a "$OUT/summary.txt"
  for m in reload instance device; do
    # The loader's own account of a failing vkCreateInstance (driver load errors).
    VK_LOADER_DEBUG=error,warn timeout 90 $dev/vk_lifecycle_probe $m 40 > "$OUT/probe_$m.log" 2>&1
    echo "probe $m rc=$?: $(grep -E 'FAILED|all .* ok' "$OUT/probe_$m.log" | head -1)" | tee -a "$OUT/summary.txt"
    grep -E "^cycle (0|1|10|20|29|30|31|39):" "$OUT/probe_$m.log" | cut -c1-200 | tee -a "$OUT/summary.txt"
  done
fi
if has test; then
  echo "== kernels-rocm tests (must pass; TESSERA_REQUIRE_BACKENDS=vulkan turns a skip into a failure)"
  start=$(date +%s)
  TESSERA_REQUIRE_BACKENDS=vulkan timeout 420 $dev/vulkan_tests --test-threads=1 --nocapture \
    > "$OUT/vulkan_tests.log" 2>&1
  echo "vulkan_tests rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
  grep -m1 "^adapter:" "$OUT/vulkan_tests.log" | tee -a "$OUT/summary.txt"
  grep -E "^test result|FAILED|panicked|skipped:" "$OUT/vulkan_tests.log" | head -20 | tee -a "$OUT/summary.txt"
  grep -E "^Decode|^RowBytes" "$OUT/vulkan_tests.log" | cut -c1-160 | tee -a "$OUT/summary.txt"
  grep -E "vulkan gemv" "$OUT/vulkan_tests.log" | sort | uniq > "$OUT/worst_errors.txt"
fi
if has bench; then
  echo "== bench"
  start=$(date +%s)
  # shellcheck disable=SC2086
  OUT="$OUT" timeout 300 $dev/bench_gemv ${BENCH_ARGS:-} > "$OUT/bench_gemv_vulkan.md" 2> "$OUT/bench_gemv_vulkan.log"
  echo "bench_gemv rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
  cat "$OUT/bench_gemv_vulkan.md"
fi
if has matrix; then
  if [ -x $dev/xtask ]; then
    echo "== test matrix (vulkan-nvidia column)"
    start=$(date +%s)
    TESSERA_ROOT="$PWD" timeout 300 $dev/xtask test-matrix --backend vulkan-nvidia \
      --json "$OUT/test_matrix.json" > "$OUT/test_matrix.log" 2>&1
    echo "test-matrix rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$OUT/summary.txt"
    cp docs/BACKENDS.md "$OUT/BACKENDS.md"
    tail -5 "$OUT/test_matrix.log"
  else
    echo "test-matrix: no $dev/xtask (device-bundle.sh --matrix, then run .device/vulkan-matrix/run.sh)" | tee -a "$OUT/summary.txt"
  fi
fi
cat "$OUT/summary.txt" 2>/dev/null
# One archive of everything (the device tool returns few files); the summary and the bench
# table also stay beside it.
tmp="$(mktemp)"
( cd "$OUT" && tar czf "$tmp" . ) \
  && find "$OUT" -type f ! -name summary.txt ! -name bench_gemv_vulkan.md -delete \
  && mv "$tmp" "$OUT/results.tgz"
ls -la "$OUT"
