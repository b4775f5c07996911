//! kernels-rocm: the AMD tier of tessera, through raw Vulkan (ash).
//!
//! It will run SPIR-V compiled by naga from the same WGSL as kernels-metal, with
//! VK_EXT_subgroup_size_control for wave32/wave64, push constants, reused descriptors, a
//! pipeline cache and its capability table as data. Nothing is implemented yet (issue 5);
//! this crate intentionally exports nothing until it is.
