//! The capability table of the Vulkan tier, as data: which (op, format, S) run natively.
//!
//! Every format of the registry has a WGSL kernel (kernels_metal::kernels::kernel_for) and a
//! SPIR-V module per S = 1..=16 (build.rs); a test checks the table and those agree. A
//! combination outside the table is refused with `NotImplemented` before any device work.

use quant_core::Format;
use quant_core::capability::{Capability, Constraint, Op};

/// S = 1..=16: the kernels keep all S partial sums in registers (kernels_metal's `MAX_S`).
const GEMV_S: Constraint = Constraint::batch(1, kernels_metal::kernels::MAX_S);

const fn gemv(format: Format) -> Capability {
    Capability {
        op: Op::Gemv,
        format,
        constraint: GEMV_S,
    }
}

/// The table. Order is irrelevant; (op, format) is unique (checked by a test).
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

/// The row admitting gemv of `format` at `s`, if any.
pub fn lookup(format: Format, s: usize) -> Option<&'static Capability> {
    quant_core::capability::lookup(CAPABILITIES, Op::Gemv, format, s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spirv::module_for;

    #[test]
    fn rows_are_unique() {
        for (k, a) in CAPABILITIES.iter().enumerate() {
            for b in &CAPABILITIES[k + 1..] {
                assert!(
                    !(a.op == b.op && a.format == b.format),
                    "duplicate {}",
                    a.format
                );
            }
        }
    }

    /// A row exists exactly for the formats with a kernel, and every row's every S has
    /// both SPIR-V variants (compiled or carrying the build's error), built with the
    /// table's workgroup size.
    #[test]
    fn rows_match_the_kernel_table_and_the_modules() {
        for f in Format::all() {
            let listed = CAPABILITIES.iter().any(|c| c.format == f);
            assert_eq!(
                listed,
                kernels_metal::kernels::kernel_for(f).is_some(),
                "{f}"
            );
        }
        for c in CAPABILITIES {
            for s in c.constraint.s_min..=c.constraint.s_max {
                for sg in [false, true] {
                    match module_for(c.format, sg, s, 0) {
                        Ok(m) => {
                            assert_eq!(m.s, s);
                            let k = kernels_metal::kernels::kernel_for(c.format).unwrap();
                            assert_eq!(m.workgroup, k.workgroup_size(s), "{}", m.name);
                        }
                        Err(crate::VulkanError::Shader { .. }) => {}
                        Err(e) => panic!("{} S={s} subgroup={sg}: {e}", c.format),
                    }
                }
            }
        }
        assert!(lookup(Format::Int4G64, 16).is_some());
        assert!(lookup(Format::Int4G64, 17).is_none());
        assert!(lookup(Format::Int4G64, 0).is_none());
    }
}
