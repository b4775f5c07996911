#!/usr/bin/env bash
# Builds the Vulkan tier's device binaries here (no GPU needed) and lays them out in
# <repo>/.device/vulkan/ (git-ignored) for one batched run on the GPU machine:
#   .device/vulkan/vulkan_tests   every test of kernels-rocm (conformance, plumbing, mutations)
#   .device/vulkan/bench_gemv     the benchmark (example)
#   .device/vulkan/run.sh         the whole device run (docs/VULKAN.md), writing under $OUT
# With --matrix, also .device/vulkan-matrix/{xtask,run.sh}: `cargo xtask test-matrix` with the
# vulkan backend. Every binary embeds the SPIR-V (~18 MB), so the three together exceed the
# 64 MiB carry limit: carry .device/vulkan-matrix in its own call
#   run(carry=[".gl", ".device/vulkan-matrix"], command="bash .device/vulkan-matrix/run.sh matrix").
# The Vulkan loader comes from the .deb files in <repo>/.gl/ (see ../shared/DEVICE.md), which
# run.sh unpacks; carry both: run(carry=[".gl", ".device/vulkan"],
#   command="bash .device/vulkan/run.sh all").
# Usage: crates/kernels-rocm/device-bundle.sh [--matrix]   (CARGO_TARGET_DIR is honoured)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
dev="$root/.device/vulkan"
mkdir -p "$dev"
target="${CARGO_TARGET_DIR:-$root/target}/release"
test_bin=$(cargo test --release -p kernels-rocm --test vulkan --no-run --message-format=json \
  | jq -r 'select(.profile.test == true and .target.name == "vulkan") | .executable' | tail -1)
cargo build --release -p kernels-rocm --example bench_gemv --example vk_lifecycle_probe
[ -x "$test_bin" ] || { echo "no test binary found" >&2; exit 1; }
cp "$target/examples/vk_lifecycle_probe" "$dev/vk_lifecycle_probe"
strip "$dev/vk_lifecycle_probe"
[ -x "$target/examples/bench_gemv" ] || { echo "no bench binary" >&2; exit 1; }
cp "$test_bin" "$dev/vulkan_tests"
cp "$target/examples/bench_gemv" "$dev/bench_gemv"
strip "$dev/vulkan_tests" "$dev/bench_gemv"
install -m 755 "$root/crates/kernels-rocm/device-run.sh" "$dev/run.sh"
if [ "${1:-}" = "--matrix" ]; then
  mdev="$root/.device/vulkan-matrix"
  mkdir -p "$mdev"
  if cargo build --release -p xtask --features vulkan; then
    cp "$target/xtask" "$mdev/xtask" && strip "$mdev/xtask"
    install -m 755 "$root/crates/kernels-rocm/device-run.sh" "$mdev/run.sh"
    du -ch "$mdev"/* .gl/* 2>/dev/null | tail -1
  else
    echo "xtask did not build: no test-matrix bundle" >&2
  fi
fi
ls -la "$dev" .gl 2>/dev/null || true
du -ch "$dev"/* .gl/* 2>/dev/null | tail -1
echo "carry limit is 64 MiB for everything carried"
