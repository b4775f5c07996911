#!/usr/bin/env bash
# Builds the wgpu tier's device binaries here (no GPU needed) and lays them out in
# <repo>/.device/wgpu/ (git-ignored) for one batched run on the GPU machine:
#   .device/wgpu/conformance   the conformance suite (cargo test binary, both reductions)
#   .device/wgpu/shaders       naga validation of every WGSL file (no device needed)
#   .device/wgpu/bench_gemv    the benchmark (example)
#   .device/wgpu/run.sh        the whole device run (device-run.sh), logging under $OUT/wgpu
# The Vulkan loader comes from <repo>/.gl/*.deb (../shared/DEVICE.md); run.sh unpacks it.
# Usage: crates/kernels-metal/device-bundle.sh   (CARGO_TARGET_DIR is honoured)
# Then: run(carry=[".gl", ".device"], command="bash .device/wgpu/run.sh all")
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
dev="$root/.device/wgpu"
mkdir -p "$dev"
bin_of() {
  cargo test --release -p kernels-metal --test "$1" --no-run --message-format=json \
    | jq -r "select(.profile.test == true and .target.name == \"$1\") | .executable" | tail -1
}
conf=$(bin_of conformance)
shaders=$(bin_of shaders)
cargo build --release -p kernels-metal --example bench_gemv
bench="${CARGO_TARGET_DIR:-$root/target}/release/examples/bench_gemv"
for b in "$conf" "$shaders" "$bench"; do
  [ -x "$b" ] || { echo "missing binary: $b" >&2; exit 1; }
done
cp "$conf" "$dev/conformance"
cp "$shaders" "$dev/shaders"
cp "$bench" "$dev/bench_gemv"
strip "$dev/conformance" "$dev/shaders" "$dev/bench_gemv"
install -m 755 "$root/crates/kernels-metal/device-run.sh" "$dev/run.sh"
if ! ls "$root"/.gl/*.deb > /dev/null 2>&1; then
  echo "note: $root/.gl has no .deb files yet; run.sh needs the Vulkan loader (../shared/DEVICE.md)" >&2
fi
du -ch "$dev"/* | tail -1
ls -la "$dev"
