//! The engine's backend trait and its implementations: the CPU (always present, quant-core's
//! kernels), CUDA (feature `cuda`, kernels-cuda), wgpu (feature `wgpu`, kernels-metal) and
//! raw Vulkan through ash (feature `vulkan`, kernels-rocm). A backend not compiled in, or
//! whose device does not answer, reports why when selected.
//!
//! A backend makes weights resident once ([`Backend::upload`]) and then runs GEMVs on them.
//! Its capability table, quant-core's vocabulary, is what the gate ([`crate::gate`]) reads:
//! only tensors whose format the table covers are uploaded; the rest run on the CPU. A
//! backend with a fused layer path ([`Backend::fused_capabilities`]; CUDA) has a second
//! table for it, read by the same gate predicate.

use quant_core::QTensor;
use quant_core::capability::{BackendError, Capability};

/// A tensor made resident by [`Backend::upload`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Slot(pub usize);

/// What the engine needs of a compute backend.
pub trait Backend {
    /// Short stable name ("cpu", "cuda", ...).
    fn name(&self) -> &'static str;
    /// Whether this is the host CPU (whose work is never counted as a fallback).
    fn is_cpu(&self) -> bool;
    /// The capability table the gate and the notice read.
    fn capabilities(&self) -> &'static [Capability];
    /// Whether the backend has a fused layer path: the whole layer (norms, attention over a
    /// device KV cache, MLP) enqueued on the device with no host round trip. CUDA does, for
    /// Llama / Qwen3 graphs ([`crate::resident`]).
    fn fused_layers(&self) -> bool {
        !self.fused_capabilities().is_empty()
    }
    /// The capability table of the fused path: the formats it runs. The gate asks
    /// [`crate::gate::miss_mask`] of it exactly as of [`Backend::capabilities`]. Empty when
    /// the backend has no fused path.
    fn fused_capabilities(&self) -> &'static [Capability] {
        &[]
    }
    /// The CUDA device and the tensors uploaded so far (slot k is `tensors[k]`), for the
    /// resident decode path.
    #[cfg(feature = "cuda")]
    fn cuda(&self) -> Option<(&kernels_cuda::CudaBackend, &[kernels_cuda::DeviceTensor])> {
        None
    }
    /// Makes `t` resident. Called only for formats the capability table covers.
    fn upload(&mut self, t: &QTensor<'_>) -> Result<Slot, BackendError>;
    /// y[S, O] = x[S, I] · Wᵀ for a tensor uploaded as `slot` (`t` is the same tensor's
    /// host view, for shapes and for backends that compute from host memory).
    fn gemv(
        &self,
        slot: Slot,
        t: &QTensor<'_>,
        x: &[f32],
        s: usize,
        y: &mut [f32],
    ) -> Result<(), BackendError>;
}

/// Which backend `--backend` asked for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// CUDA where compiled in and a device answers, else the CPU.
    Auto,
    Cpu,
    Cuda,
    Vulkan,
    Wgpu,
}

impl BackendChoice {
    pub fn parse(s: &str) -> Option<BackendChoice> {
        match s {
            "auto" => Some(BackendChoice::Auto),
            "cpu" => Some(BackendChoice::Cpu),
            "cuda" => Some(BackendChoice::Cuda),
            "vulkan" => Some(BackendChoice::Vulkan),
            "wgpu" => Some(BackendChoice::Wgpu),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Cpu => "cpu",
            BackendChoice::Cuda => "cuda",
            BackendChoice::Vulkan => "vulkan",
            BackendChoice::Wgpu => "wgpu",
        }
    }
}

/// quant-core's CPU kernels: every registry format, any batch.
#[derive(Copy, Clone, Debug, Default)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }
    fn is_cpu(&self) -> bool {
        true
    }
    fn capabilities(&self) -> &'static [Capability] {
        quant_core::cpu_backend::CAPABILITIES
    }
    fn upload(&mut self, _t: &QTensor<'_>) -> Result<Slot, BackendError> {
        // The weights already live in host memory (the container's map).
        Ok(Slot(0))
    }
    fn gemv(
        &self,
        _slot: Slot,
        t: &QTensor<'_>,
        x: &[f32],
        s: usize,
        y: &mut [f32],
    ) -> Result<(), BackendError> {
        quant_core::gemm(t, x, s, y).map_err(BackendError::Input)
    }
}

/// A GPU tier's device and the tensors uploaded to it. Each tier has the same shape:
/// `upload(&QTensor) -> DeviceTensor` and `gemv(&DeviceTensor, x, s) -> Vec<f32>`.
#[cfg(any(feature = "wgpu", feature = "vulkan"))]
pub struct DeviceBackend<D, T> {
    name: &'static str,
    table: &'static [Capability],
    dev: D,
    tensors: Vec<T>,
    upload: UploadFn<D, T>,
    gemv: GemvFn<D, T>,
}

/// A tier's upload: its device and a host view in, its device tensor out.
#[cfg(any(feature = "wgpu", feature = "vulkan"))]
type UploadFn<D, T> = fn(&D, &QTensor<'_>) -> Result<T, BackendError>;

/// A tier's GEMV: y[S, O] for a device tensor and host activations x[S, I].
#[cfg(any(feature = "wgpu", feature = "vulkan"))]
type GemvFn<D, T> = fn(&D, &T, &[f32], usize) -> Result<Vec<f32>, BackendError>;

#[cfg(any(feature = "wgpu", feature = "vulkan"))]
impl<D, T> Backend for DeviceBackend<D, T> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn is_cpu(&self) -> bool {
        false
    }
    fn capabilities(&self) -> &'static [Capability] {
        self.table
    }
    fn upload(&mut self, t: &QTensor<'_>) -> Result<Slot, BackendError> {
        let d = (self.upload)(&self.dev, t)?;
        self.tensors.push(d);
        Ok(Slot(self.tensors.len() - 1))
    }
    fn gemv(
        &self,
        slot: Slot,
        t: &QTensor<'_>,
        x: &[f32],
        s: usize,
        y: &mut [f32],
    ) -> Result<(), BackendError> {
        let d = self.tensors.get(slot.0).ok_or(BackendError::Device {
            backend: self.name,
            why: format!("no uploaded tensor in slot {}", slot.0),
        })?;
        let out = (self.gemv)(&self.dev, d, x, s)?;
        if out.len() != y.len() {
            return Err(BackendError::Input(quant_core::QuantError::OutputSize {
                format: t.format(),
                s,
                rows: t.rows(),
                got: y.len(),
            }));
        }
        y.copy_from_slice(&out);
        Ok(())
    }
}

#[cfg(feature = "cuda")]
pub(crate) fn cuda_error(e: kernels_cuda::CudaError) -> BackendError {
    use kernels_cuda::CudaError;
    match e {
        CudaError::Unavailable { why } => BackendError::Unavailable { why },
        CudaError::NotImplemented { format, s, .. } => BackendError::NotImplemented {
            backend: "cuda",
            op: quant_core::capability::Op::Gemv.name(),
            format,
            s,
        },
        CudaError::Quant(q) => BackendError::Input(q),
        e @ (CudaError::Shape { .. }
        | CudaError::Input { .. }
        | CudaError::Driver { .. }
        | CudaError::Compile { .. }) => BackendError::Device {
            backend: "cuda",
            why: e.to_string(),
        },
    }
}

/// The CUDA tier: GEMVs op by op like the other tiers, plus the device-resident decode path
/// (its fused table is kernels-cuda's [`kernels_cuda::resident::resident_capability_table`]).
#[cfg(feature = "cuda")]
pub struct CudaEngineBackend {
    dev: kernels_cuda::CudaBackend,
    tensors: Vec<kernels_cuda::DeviceTensor>,
}

#[cfg(feature = "cuda")]
impl Backend for CudaEngineBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }
    fn is_cpu(&self) -> bool {
        false
    }
    fn capabilities(&self) -> &'static [Capability] {
        kernels_cuda::backend::capability_table()
    }
    fn fused_capabilities(&self) -> &'static [Capability] {
        kernels_cuda::resident::resident_capability_table()
    }
    fn cuda(&self) -> Option<(&kernels_cuda::CudaBackend, &[kernels_cuda::DeviceTensor])> {
        Some((&self.dev, &self.tensors))
    }
    fn upload(&mut self, t: &QTensor<'_>) -> Result<Slot, BackendError> {
        let d = self.dev.upload(t).map_err(cuda_error)?;
        self.tensors.push(d);
        Ok(Slot(self.tensors.len() - 1))
    }
    fn gemv(
        &self,
        slot: Slot,
        t: &QTensor<'_>,
        x: &[f32],
        s: usize,
        y: &mut [f32],
    ) -> Result<(), BackendError> {
        let d = self.tensors.get(slot.0).ok_or(BackendError::Device {
            backend: "cuda",
            why: format!("no uploaded tensor in slot {}", slot.0),
        })?;
        let out = self.dev.gemv(d, x, s).map_err(cuda_error)?;
        if out.len() != y.len() {
            return Err(BackendError::Input(quant_core::QuantError::OutputSize {
                format: t.format(),
                s,
                rows: t.rows(),
                got: y.len(),
            }));
        }
        y.copy_from_slice(&out);
        Ok(())
    }
}

#[cfg(feature = "cuda")]
fn open_cuda() -> Result<Box<dyn Backend>, BackendError> {
    let dev = kernels_cuda::CudaBackend::new().map_err(cuda_error)?;
    Ok(Box::new(CudaEngineBackend {
        dev,
        tensors: Vec::new(),
    }))
}

#[cfg(not(feature = "cuda"))]
fn open_cuda() -> Result<Box<dyn Backend>, BackendError> {
    Err(not_built("cuda"))
}

#[cfg(feature = "wgpu")]
fn open_wgpu() -> Result<Box<dyn Backend>, BackendError> {
    let dev = kernels_metal::WgpuBackend::new()?;
    Ok(Box::new(DeviceBackend {
        name: "wgpu",
        table: kernels_metal::CAPABILITIES,
        dev,
        tensors: Vec::new(),
        upload: |d: &kernels_metal::WgpuBackend, t| d.upload(t),
        gemv: |d: &kernels_metal::WgpuBackend, w, x, s| d.gemv(w, x, s),
    }))
}

#[cfg(not(feature = "wgpu"))]
fn open_wgpu() -> Result<Box<dyn Backend>, BackendError> {
    Err(not_built("wgpu"))
}

#[cfg(feature = "vulkan")]
fn open_vulkan() -> Result<Box<dyn Backend>, BackendError> {
    let dev = kernels_rocm::VulkanBackend::new()?;
    Ok(Box::new(DeviceBackend {
        name: "vulkan",
        table: kernels_rocm::CAPABILITIES,
        dev,
        tensors: Vec::new(),
        upload: |d: &kernels_rocm::VulkanBackend, t| d.upload(t).map_err(BackendError::from),
        gemv: |d: &kernels_rocm::VulkanBackend, w, x, s| {
            d.gemv(w, x, s).map_err(BackendError::from)
        },
    }))
}

#[cfg(not(feature = "vulkan"))]
fn open_vulkan() -> Result<Box<dyn Backend>, BackendError> {
    Err(not_built("vulkan"))
}

#[cfg(not(all(feature = "cuda", feature = "wgpu", feature = "vulkan")))]
fn not_built(name: &str) -> BackendError {
    BackendError::Unavailable {
        why: format!("this build has no {name} support (engine feature `{name}`)"),
    }
}

/// Opens the backend `choice` names. `Auto` takes the first GPU tier that answers (CUDA,
/// then Vulkan, then wgpu) and otherwise the CPU, saying why in the returned note (None
/// when a GPU was taken or the choice was explicit).
pub fn select(choice: BackendChoice) -> Result<(Box<dyn Backend>, Option<String>), BackendError> {
    match choice {
        BackendChoice::Cpu => Ok((Box::new(CpuBackend), None)),
        BackendChoice::Cuda => Ok((open_cuda()?, None)),
        BackendChoice::Vulkan => Ok((open_vulkan()?, None)),
        BackendChoice::Wgpu => Ok((open_wgpu()?, None)),
        BackendChoice::Auto => {
            let mut why = Vec::new();
            for (name, open) in [
                (
                    "cuda",
                    open_cuda as fn() -> Result<Box<dyn Backend>, BackendError>,
                ),
                ("vulkan", open_vulkan),
                ("wgpu", open_wgpu),
            ] {
                match open() {
                    Ok(b) => return Ok((b, None)),
                    Err(e) => why.push(format!("{name} {e}")),
                }
            }
            Ok((
                Box::new(CpuBackend),
                Some(format!("auto: {}", why.join("; "))),
            ))
        }
    }
}
