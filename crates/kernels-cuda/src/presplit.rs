//! Activations split by the kernel that produces them.
//!
//! The 16-row tensor-core GEMV reads its activation split into f16 parts with a power of
//! two in each 128-column segment's slot (layout.rs `split_activations`,
//! shaders/cuda/split.cuh). A producer that writes whole segments can pick p per segment
//! and write that split itself (the engine's attention and SwiGLU kernels: resident.rs);
//! the GEMV after it then runs without a split launch of its own, in its build that folds
//! each k-block with its segment's 1/p: [`CudaBackend::gemv_launch_presplit`]. The
//! buffers carry the layout facts a producer needs (stride, nibble order), taken from the
//! tensor they serve.

use crate::caps;
use crate::compile::Tuning;
use crate::device::{CudaBackend, DeviceTensor};
use crate::error::CudaError;
use crate::layout;
use cudarc::driver::{CudaSlice, CudaViewMut};

/// Where a presplit GEMV reads its activation: the x stride (the tensor's padded column
/// count) and whether each 8 columns are stored in the 4-bit formats' order 0, 4, 1, 5, 2,
/// 6, 3, 7.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SplitLayout {
    pub x_stride: usize,
    pub nibbles: bool,
}

/// One activation (S = 1) split in the 16-row GEMV's layout: halves [2, x_stride] and aux
/// [2, x_stride / 128] (1/p of each segment, then the sums of x p). Allocated zeroed, so
/// columns no producer writes (the padding past the activation's length) stay zero.
pub struct SplitBuffers {
    halves: CudaSlice<u16>,
    aux: CudaSlice<f32>,
    layout: SplitLayout,
}

impl SplitBuffers {
    /// The layout the buffers hold.
    pub fn layout(&self) -> SplitLayout {
        self.layout
    }
    /// The buffers, for a producer kernel's launch.
    pub(crate) fn parts_mut(&mut self) -> (&mut CudaSlice<u16>, &mut CudaSlice<f32>) {
        (&mut self.halves, &mut self.aux)
    }
}

impl CudaBackend {
    /// The layout a presplit launch of `w` reads, or None where `w` has no presplit launch:
    /// the same tensors [`CudaBackend::resident_prologue_fusable`] admits (the 16-row
    /// tensor-core GEMV at S = 1, formats without a rotation, whose activation a producer
    /// could not rotate).
    pub fn presplit_layout(&self, w: &DeviceTensor) -> Option<SplitLayout> {
        let (cap, _) = self.fused_kernel(w)?;
        Some(SplitLayout {
            x_stride: w.shape.x_stride as usize,
            nibbles: caps::nibble_codes(cap.kernel.fmt),
        })
    }

    /// Zeroed split buffers of `layout`; its stride must be a multiple of the activation
    /// padding ([`layout::X_STRIDE_ALIGN`]), as every tensor's is.
    pub fn split_buffers(&self, l: SplitLayout) -> Result<SplitBuffers, CudaError> {
        if l.x_stride == 0 || !l.x_stride.is_multiple_of(layout::X_STRIDE_ALIGN) {
            return Err(CudaError::Input {
                what: format!("split buffers of stride {}", l.x_stride),
            });
        }
        let st = self.stream();
        let halves = st
            .alloc_zeros::<u16>(2 * l.x_stride)
            .map_err(CudaError::driver("allocating split activations"))?;
        let aux = st
            .alloc_zeros::<f32>(2 * (l.x_stride / layout::MMA_SUM_SEGMENT))
            .map_err(CudaError::driver("allocating split activations"))?;
        Ok(SplitBuffers {
            halves,
            aux,
            layout: l,
        })
    }

    /// y = W . x at S = 1 from x already split into `split` by its producer: the 16-row GEMV
    /// alone, no split launch. Refuses buffers of another layout than `w`'s presplit launch
    /// reads, and tensors without one.
    pub fn gemv_launch_presplit(
        &self,
        w: &DeviceTensor,
        split: &SplitBuffers,
        y: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), CudaError> {
        let refuse = |what: String| CudaError::Shape {
            format: w.format(),
            what,
        };
        let (cap, m) = self.fused_kernel(w).ok_or_else(|| {
            refuse("a presplit launch needs the 16-row tensor-core GEMV at S = 1".to_string())
        })?;
        let want = SplitLayout {
            x_stride: w.shape.x_stride as usize,
            nibbles: caps::nibble_codes(cap.kernel.fmt),
        };
        if split.layout != want {
            return Err(refuse(format!(
                "split buffers of {:?} for a GEMV reading {want:?}",
                split.layout
            )));
        }
        if y.len() < w.rows() {
            return Err(refuse(format!(
                "presplit launch: {} outputs for {} rows",
                y.len(),
                w.rows()
            )));
        }
        // The producer chose p per segment: the GEMV build that folds each k-block with
        // its segment's 1/p.
        let tuning = Tuning {
            mma_segment_p: true,
            ..self.tuning().clone()
        };
        self.launch_rows(w, cap.kernel, m, (&split.halves, &split.aux), 1, y, &tuning)
    }
}
