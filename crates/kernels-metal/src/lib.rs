//! kernels-metal: the Apple tier of tessera, through wgpu.
//!
//! It will hold a wgpu backend running the WGSL kernels in `shaders/wgsl/` (Metal on macOS,
//! Vulkan elsewhere, so the same shaders are tested on lavapipe and NVIDIA Vulkan), with a
//! pipeline cache, buffer pools and its capability table as data. Nothing is implemented
//! yet (issue 5); this crate intentionally exports nothing until it is.
