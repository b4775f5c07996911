//! The capability table of the wgpu tier, as data: which (op, format, batch) it runs
//! natively. Every GEMV is looked up here first; a combination that is not a row is refused
//! with `BackendError::NotImplemented` before any device work. Probes, the conformance
//! suite, `cargo xtask test-matrix` and docs read this one slice.
//!
//! A row exists exactly where `kernels::kernel_for` names a kernel (a test checks both
//! directions), for S = 1..=16 (the kernels keep S partial sums per row in registers).

use quant_core::Format;
use quant_core::capability::{Capability, Constraint, Op};

/// S = 1..=16 (`kernels::MAX_S`).
const GEMV_S: Constraint = Constraint::batch(1, crate::kernels::MAX_S);

const fn gemv(format: Format) -> Capability {
    Capability {
        op: Op::Gemv,
        format,
        constraint: GEMV_S,
    }
}

/// The table. (op, format) is unique (checked by a test); order follows the registry.
pub static CAPABILITIES: &[Capability] = &[
    gemv(Format::F32),
    gemv(Format::F16),
    gemv(Format::Bf16),
    gemv(Format::Int8Row),
    gemv(Format::Int4Row),
    gemv(Format::Int2Row),
    gemv(Format::Int4G16),
    gemv(Format::Int4G32),
    gemv(Format::Int4G48),
    gemv(Format::Int4G64),
    gemv(Format::Int4G96),
    gemv(Format::Int4G128),
    gemv(Format::Int4G192),
    gemv(Format::Int4G256),
    gemv(Format::Int3G64),
    gemv(Format::E8Lattice),
    gemv(Format::Fp8E4m3B128),
    gemv(Format::Fp8E4m3B128Ue8m0),
    gemv(Format::Hfq4G256),
    gemv(Format::Mq4G256),
    gemv(Format::Mq4G256V2),
    gemv(Format::Mq4cG256),
    gemv(Format::Mq4K),
    gemv(Format::Mxfp4),
    gemv(Format::Q8_0),
    gemv(Format::Q4_0),
    gemv(Format::Q4_1),
    gemv(Format::Q5_0),
    gemv(Format::Q5_1),
    gemv(Format::Q2K),
    gemv(Format::Q3K),
    gemv(Format::Q4K),
    gemv(Format::Q5K),
    gemv(Format::Q6K),
    gemv(Format::Iq4Nl),
    gemv(Format::Iq4Xs),
    gemv(Format::GgufMxfp4),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::kernel_for;
    use quant_core::capability::lookup;

    #[test]
    fn rows_are_exactly_the_formats_with_a_kernel() {
        for f in Format::all() {
            let rows = CAPABILITIES.iter().filter(|c| c.format == f).count();
            let want = usize::from(kernel_for(f).is_some());
            assert_eq!(rows, want, "{f}");
        }
        assert!(lookup(CAPABILITIES, Op::Gemv, Format::Int8Row, 16).is_some());
        assert!(lookup(CAPABILITIES, Op::Gemv, Format::Int8Row, 17).is_none());
        assert!(lookup(CAPABILITIES, Op::Gemm, Format::Int8Row, 1).is_none());
    }
}
