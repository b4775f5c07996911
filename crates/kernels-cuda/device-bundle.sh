#!/usr/bin/env bash
# Builds the CUDA tier's device binaries here (no GPU needed) and lays them out in
# <repo>/.device/ (git-ignored) for one batched run on the GPU machine:
#   .device/gemv_vs_oracle   the conformance suite (cargo test binary: GEMV, GEMM, MoE)
#   .device/bench_gemv       the GEMV benchmark (example)
#   .device/bench_gemm       the GEMM benchmark (example)
#   .device/tensor_probe     tensor-core ceilings and the warpgroup MMA's layout check (example)
#   .device/anchor_gpu.py    torch peers, from ../shared/anchors
#   .device/anchor_gemm.py   cuBLAS bf16 GEMM peers (crates/kernels-cuda/anchor_gemm.py)
#   .device/ncu_sass_mix.py  summary of an ncu SASS report (the run's `sass` stage)
#   .device/xtask            `cargo xtask test-matrix` with the cuda backend (if it builds)
#   .device/run.sh           the whole device run (docs/CUDA.md), writing under $OUT
# Usage: crates/kernels-cuda/device-bundle.sh   (CARGO_TARGET_DIR is honoured; DEVICE_DIR
# puts the bundle elsewhere, e.g. .device/cuda, carried alone and copied to .device/ on the
# GPU machine first: `cp .device/cuda/* .device/`)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
dev="${DEVICE_DIR:-$root/.device}"
mkdir -p "$dev"
test_bin=$(cargo test --release -p kernels-cuda --test gemv_vs_oracle --no-run --message-format=json \
  | jq -r 'select(.profile.test == true and .target.name == "gemv_vs_oracle") | .executable' | tail -1)
cargo build --release -p kernels-cuda --example bench_gemv --example bench_gemm --example tensor_probe
target="${CARGO_TARGET_DIR:-$root/target}/release"
[ -x "$test_bin" ] || { echo "no test binary found" >&2; exit 1; }
for b in bench_gemv bench_gemm tensor_probe; do
  [ -x "$target/examples/$b" ] || { echo "no bench binary at $target/examples/$b" >&2; exit 1; }
  cp "$target/examples/$b" "$dev/$b"
done
cp "$test_bin" "$dev/gemv_vs_oracle"
strip "$dev/gemv_vs_oracle" "$dev/bench_gemv" "$dev/bench_gemm" "$dev/tensor_probe"
# The test matrix's cuda column (optional: xtask may not build while others edit it).
rm -f "$dev/xtask"
if cargo build --release -p xtask --features cuda; then
  cp "$target/xtask" "$dev/xtask" && strip "$dev/xtask"
else
  echo "xtask did not build: the device run skips the test matrix" >&2
fi
install -m 644 "$root/../shared/anchors/anchor_gpu.py" "$dev/anchor_gpu.py"
install -m 644 "$root/crates/kernels-cuda/anchor_gemm.py" "$dev/anchor_gemm.py"
install -m 644 "$root/crates/kernels-cuda/ncu_sass_mix.py" "$dev/ncu_sass_mix.py"
install -m 755 "$root/crates/kernels-cuda/device-run.sh" "$dev/run.sh"
du -ch "$dev"/* | tail -1
ls -la "$dev"
