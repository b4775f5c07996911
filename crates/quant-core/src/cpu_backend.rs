//! The CPU as a [`Backend`]: quant-core's own kernels ([`crate::kernels::gemm`]) behind the
//! capability vocabulary, so the conformance suite and `cargo xtask test-matrix` treat the
//! CPU exactly like a GPU tier.
//!
//! The table lists GEMV at S = 1..=64 for every registry format. The kernels themselves
//! accept any S; the table states what the conformance suite covers (it runs S up to 64),
//! and a combination outside it is refused like on any other backend.

use crate::capability::{Backend, BackendError, Capability, Constraint, Op, lookup};
use crate::registry::Format;
use crate::tensor::QTensor;

/// quant-core's CPU kernels (rayon across rows, SIMD level detected at run time).
#[derive(Copy, Clone, Debug, Default)]
pub struct CpuBackend;

/// The batches the CPU row covers.
const GEMV_S: Constraint = Constraint::batch(1, 64);

const fn gemv(format: Format) -> Capability {
    Capability {
        op: Op::Gemv,
        format,
        constraint: GEMV_S,
    }
}

/// Builds [`CAPABILITIES`] from a list of `Format` variants, together with an exhaustive
/// `match` over the same list: a registry format missing from the list fails to compile
/// (non-exhaustive patterns), and one listed twice fails clippy (unreachable pattern).
macro_rules! gemv_for_every_format {
    ($($variant:ident),* $(,)?) => {
        #[allow(dead_code)]
        const fn listed(f: Format) {
            match f {
                $(Format::$variant => {})*
            }
        }

        /// The CPU capability table: GEMV, S = 1..=64, every registry format.
        pub static CAPABILITIES: &[Capability] = &[$(gemv(Format::$variant)),*];
    };
}

gemv_for_every_format![
    F32,
    F16,
    Bf16,
    Int8Row,
    Int4Row,
    Int2Row,
    Int4G16,
    Int4G32,
    Int4G48,
    Int4G64,
    Int4G96,
    Int4G128,
    Int4G192,
    Int4G256,
    Int3G64,
    E8Lattice,
    Fp8E4m3B128,
    Fp8E4m3B128Ue8m0,
    Hfq4G256,
    Mq4G256,
    Mq4G256V2,
    Mq4cG256,
    Mq4K,
    Mxfp4,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Iq4Nl,
    Iq4Xs,
    GgufMxfp4,
];

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn probe(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn capabilities(&self) -> &'static [Capability] {
        CAPABILITIES
    }

    /// The kernels accumulate in f32 with no reduced-precision step.
    fn tolerance(&self) -> f64 {
        1e-5
    }

    fn gemv(
        &self,
        t: &QTensor<'_>,
        x: &[f32],
        s: usize,
        y: &mut [f32],
    ) -> Result<(), BackendError> {
        if lookup(CAPABILITIES, Op::Gemv, t.format(), s).is_none() {
            return Err(BackendError::NotImplemented {
                backend: self.name(),
                op: Op::Gemv.name(),
                format: t.format(),
                s,
            });
        }
        crate::kernels::gemm(t, x, s, y)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_one_gemv_row_per_registry_format() {
        for f in Format::all() {
            let rows: Vec<_> = CAPABILITIES.iter().filter(|c| c.format == f).collect();
            assert_eq!(rows.len(), 1, "{f}: {rows:?}");
            assert_eq!(rows[0].op, Op::Gemv);
        }
        assert_eq!(CAPABILITIES.len(), Format::all().count());
    }

    #[test]
    fn outside_the_table_is_refused_before_any_work() {
        let t = crate::encode(Format::Int8Row, 2, 8, &[0.5; 16], &Default::default()).unwrap();
        let mut y = vec![0f32; 65 * 2];
        let err = CpuBackend
            .gemv(&t.view(), &vec![1.0; 65 * 8], 65, &mut y)
            .unwrap_err();
        assert!(
            matches!(err, BackendError::NotImplemented { s: 65, .. }),
            "{err}"
        );
    }
}
