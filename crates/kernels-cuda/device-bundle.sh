#!/usr/bin/env bash
# Builds the CUDA tier's device binaries here (no GPU needed) and lays them out in
# <repo>/.device/ (git-ignored) for one batched run on the GPU machine:
#   .device/gemv_vs_oracle   the conformance suite (cargo test binary)
#   .device/bench_gemv       the benchmark (example)
#   .device/anchor_gpu.py    torch peers, from ../shared/anchors
#   .device/run.sh           the whole device run (docs/CUDA.md), writing under $OUT
# Usage: crates/kernels-cuda/device-bundle.sh   (CARGO_TARGET_DIR is honoured)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
dev="$root/.device"
mkdir -p "$dev"
test_bin=$(cargo test --release -p kernels-cuda --test gemv_vs_oracle --no-run --message-format=json \
  | jq -r 'select(.profile.test == true and .target.name == "gemv_vs_oracle") | .executable' | tail -1)
cargo build --release -p kernels-cuda --example bench_gemv
bench_bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/bench_gemv"
[ -x "$test_bin" ] || { echo "no test binary found" >&2; exit 1; }
[ -x "$bench_bin" ] || { echo "no bench binary at $bench_bin" >&2; exit 1; }
cp "$test_bin" "$dev/gemv_vs_oracle"
cp "$bench_bin" "$dev/bench_gemv"
strip "$dev/gemv_vs_oracle" "$dev/bench_gemv"
install -m 644 "$root/../shared/anchors/anchor_gpu.py" "$dev/anchor_gpu.py"
install -m 755 "$root/crates/kernels-cuda/device-run.sh" "$dev/run.sh"
du -ch "$dev"/* | tail -1
ls -la "$dev"
