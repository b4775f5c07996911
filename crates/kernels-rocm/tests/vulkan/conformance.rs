//! The shared conformance suite (quant_core::conformance) on the Vulkan tier, on the
//! adapter `TESSERA_VK_ADAPTER` picks (lavapipe here, NVIDIA on the GPU machine). Without a
//! Vulkan loader or ICD every test says "skipped: ..." (unless
//! TESSERA_REQUIRE_BACKENDS=vulkan).
//!
//! - `default_kernels`: every format, with the subgroup kernels where the device has
//!   subgroup arithmetic (lavapipe and NVIDIA do), as a user gets them.
//! - `shared_memory_kernels`: the workgroup shared-memory variant, one format per kernel
//!   file. A `.subgroup.wgsl` file is its plain file with only the reduction tail replaced
//!   (kernels-metal's tests check that), so this covers every tail the default run does
//!   not. On lavapipe only the int_row file runs unless TESSERA_VK_ALL_SHARED=1: lavapipe
//!   turns each workgroup barrier into an LLVM coroutine, and compiling the larger
//!   families' shared-memory pipelines takes minutes each (docs/VULKAN.md, "lavapipe").

use kernels_metal::kernels::{SHADER_FILES, kernel_for};
use kernels_rocm::{Options, SubgroupPolicy, VulkanConformance};
use quant_core::Format;
use quant_core::conformance::assert_format_conforms;

quant_core::conformance_tests!(default_kernels, VulkanConformance::new());

fn shared_memory() -> VulkanConformance {
    let mut o = Options::from_env().unwrap_or_default();
    o.subgroups = SubgroupPolicy::Off;
    VulkanConformance::with_options(o)
}

/// One format per plain kernel file.
const SHARED_MEMORY_FORMATS: [Format; 10] = [
    Format::Bf16,
    Format::Int4Row,
    Format::Int4G48,
    Format::Int3G64,
    Format::E8Lattice,
    Format::Fp8E4m3B128Ue8m0,
    Format::Mxfp4,
    Format::Mq4G256V2,
    Format::Q5_1,
    Format::Q3K,
];

mod shared_memory_kernels {
    use super::*;

    #[test]
    fn cover_every_kernel_file() {
        for file in SHADER_FILES
            .iter()
            .filter(|f| !f.ends_with(".subgroup.wgsl"))
        {
            assert!(
                SHARED_MEMORY_FORMATS
                    .iter()
                    .any(|&f| kernel_for(f).is_some_and(|k| k.file == *file)),
                "no shared-memory test runs {file}"
            );
        }
    }

    /// Runs the shared-memory suite for `format`, except the slow families on lavapipe.
    fn check(format: Format) {
        let b = shared_memory();
        let cheap = kernel_for(format).is_some_and(|k| k.file == "gemv_int_row.wgsl");
        let all = std::env::var_os("TESSERA_VK_ALL_SHARED").is_some_and(|v| v != "0");
        if let Ok(a) = b.adapter()
            && a.is_lavapipe()
            && !cheap
            && !all
        {
            eprintln!(
                "skipped: {format}'s shared-memory kernel on lavapipe (minutes of LLVM per \
                 pipeline); TESSERA_VK_ALL_SHARED=1 runs it"
            );
            return;
        }
        assert_format_conforms(&b, format);
    }

    macro_rules! per_file {
        ($($test:ident $k:literal),* $(,)?) => {$(
            #[test]
            fn $test() {
                check(SHARED_MEMORY_FORMATS[$k]);
            }
        )*};
    }
    per_file!(
        float 0, int_row 1, int_group 2, int3 3, e8 4, fp8 5, mxfp4 6, affine256 7, ggml_q 8,
        ggml_k 9,
    );
}
