//! The shared conformance suite (quant_core::conformance), one test per format, on the wgpu
//! tier, twice: `conformance` with the default options (the subgroup kernels where the
//! adapter offers subgroups, which lavapipe does) and `shared_memory` forcing the
//! shared-memory reduction. Without an adapter every test says "skipped: ..." (unless
//! TESSERA_REQUIRE_BACKENDS=wgpu). TESSERA_WGPU_MUTATE=swap-nibbles|group-off-by-one|
//! scale-1pct compiles a deliberate defect into every kernel (the run must then fail).
use kernels_metal::{Options, Subgroups, WgpuConformance};

quant_core::conformance_tests!(WgpuConformance::new());
quant_core::conformance_tests!(
    shared_memory,
    WgpuConformance::with_options(Options {
        subgroups: Subgroups::Never,
        ..Options::from_env()
    })
);

/// Names the adapter and the reduction path each instantiation runs, in the log.
#[test]
fn reports_the_adapter() {
    for (what, b) in [
        ("default", WgpuConformance::new()),
        (
            "shared_memory",
            WgpuConformance::with_options(Options {
                subgroups: Subgroups::Never,
                ..Options::from_env()
            }),
        ),
    ] {
        match b.backend() {
            Ok(dev) => eprintln!("wgpu {what}: {}", dev.describe()),
            Err(e) => eprintln!("skipped: wgpu {what}: {e}"),
        }
    }
}
