//! The CUDA device: probing, tensors uploaded in their stored layout, and GEMV launches.
//!
//! Without a GPU every entry returns [`CudaError::Unavailable`]: cudarc's dynamic loader
//! panics when libcuda is missing, so [`CudaBackend::new`] first asks whether the driver
//! and NVRTC libraries can be opened at all, and only then makes its first cudarc call
//! (itself inside `catch_unwind`, should the loader panic on something the probe missed).

use crate::caps::{self, KernelId, MmaKernel, Op};
use crate::compile::{self, ModuleKey};
use crate::error::CudaError;
use crate::layout::{self, BLOCK_THREADS, LaunchShape};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use quant_core::oracle::POISON;
use quant_core::{Format, QTensor};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

/// Why this machine cannot run CUDA, or `Ok` when the driver and NVRTC libraries load.
pub fn probe_libraries() -> Result<(), CudaError> {
    // SAFETY: the probes only dlopen the NVIDIA driver / NVRTC libraries by their standard
    // names (running their own initialisers) and close them again; no symbol is called.
    let driver = unsafe { cudarc::driver::sys::is_culib_present() };
    if !driver {
        return Err(CudaError::Unavailable {
            why: "no CUDA device: libcuda.so.1 not found (no NVIDIA driver on this machine)".into(),
        });
    }
    // SAFETY: as above, for libnvrtc.
    let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    if !nvrtc {
        return Err(CudaError::Unavailable {
            why: "no CUDA device: libnvrtc.so not found (the kernels are compiled at run time)"
                .into(),
        });
    }
    Ok(())
}

fn unavailable(detail: String) -> CudaError {
    CudaError::Unavailable {
        why: format!("no CUDA device: {detail}"),
    }
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "the CUDA loader panicked".to_string())
}

/// One CUDA device (ordinal 0) with its stream and compiled kernels.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: String,
    name: String,
    functions: Mutex<HashMap<ModuleKey, CudaFunction>>,
    mutation: Option<&'static str>,
}

/// A weight tensor on the device, in its container's own layout: the weight bytes and the
/// sidecar-scale bytes exactly as stored (a format without sidecar gets a 16-byte
/// placeholder the kernels never read, since CUDA cannot allocate zero bytes).
pub struct DeviceTensor {
    format: Format,
    rows: usize,
    cols: usize,
    rotation_seed: u64,
    shape: LaunchShape,
    weight_bytes: usize,
    scale_bytes: usize,
    weights: CudaSlice<u8>,
    scales: CudaSlice<u8>,
}

impl DeviceTensor {
    pub fn format(&self) -> Format {
        self.format
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// Whether [`KernelPath::Auto`] runs this tensor on the tensor cores at batch `s`.
    pub fn uses_tensor_cores(&self, s: usize) -> bool {
        caps::lookup(Op::Gemv, self.format, s)
            .is_ok_and(|c| c.mma_for(self.shape.row_bytes as usize).is_some())
    }
    /// Stored weight bytes plus sidecar bytes: what one GEMV must read.
    pub fn stored_bytes(&self) -> usize {
        self.weight_bytes + self.scale_bytes
    }
}

/// Activations [S, I] on the device, rotated into one format's stored domain and padded as
/// the kernels read them (see [`crate::layout`]).
pub struct DeviceActivations {
    s: usize,
    cols: usize,
    format: Format,
    rotation_seed: u64,
    x: CudaSlice<f32>,
    /// The f16 hi/lo split and its 1/p and segment sums ([`layout::split_activations`]),
    /// for tensors whose GEMV runs on the tensor cores.
    split: Option<(CudaSlice<u16>, CudaSlice<f32>)>,
}

/// Which kernel a launch uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KernelPath {
    /// The tensor-core kernel where the capability row has one and the shape allows it
    /// ([`caps::Capability::mma_for`]), else the CUDA-core kernel.
    Auto,
    /// Always the CUDA-core kernel (for comparisons).
    CudaCores,
}

impl DeviceActivations {
    pub fn s(&self) -> usize {
        self.s
    }
}

impl CudaBackend {
    /// Opens device 0, or says why there is none.
    pub fn new() -> Result<CudaBackend, CudaError> {
        Self::open(None)
    }

    /// A backend whose kernels carry a deliberate defect (mutation tests only).
    #[cfg(feature = "mutation-test")]
    pub fn with_mutation(m: crate::compile::Mutation) -> Result<CudaBackend, CudaError> {
        Self::open(Some(m.define()))
    }

    fn open(mutation: Option<&'static str>) -> Result<CudaBackend, CudaError> {
        probe_libraries()?;
        let opened = catch_unwind(AssertUnwindSafe(|| -> Result<_, CudaError> {
            let count = CudaContext::device_count()
                .map_err(|e| unavailable(format!("cuInit/cuDeviceGetCount failed: {e:?}")))?;
            if count < 1 {
                return Err(unavailable("the driver reports 0 devices".into()));
            }
            let ctx = CudaContext::new(0)
                .map_err(|e| unavailable(format!("cannot open device 0: {e:?}")))?;
            let (major, minor) = ctx
                .compute_capability()
                .map_err(CudaError::driver("compute capability"))?;
            let name = ctx.name().map_err(CudaError::driver("device name"))?;
            Ok((ctx, major, minor, name))
        }));
        let (ctx, major, minor, name) = opened.map_err(|p| unavailable(panic_text(p)))??;
        let stream = ctx.default_stream();
        Ok(CudaBackend {
            ctx,
            stream,
            arch: compile::arch_of(major, minor),
            name,
            functions: Mutex::new(HashMap::new()),
            mutation,
        })
    }

    pub fn device_name(&self) -> &str {
        &self.name
    }
    /// `sm_XY`, the NVRTC target.
    pub fn arch(&self) -> &str {
        &self.arch
    }
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The compiled kernel of `kernel` at batch `s` (NVRTC on first use).
    fn function(
        &self,
        kernel: KernelId,
        mma: Option<MmaKernel>,
        s: usize,
    ) -> Result<CudaFunction, CudaError> {
        let key = ModuleKey {
            kernel,
            mma,
            s,
            arch: self.arch.clone(),
            mutation: self.mutation,
        };
        let mut map = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = map.get(&key) {
            return Ok(f.clone());
        }
        let ptx = compile::ptx(&key)?;
        let module = self
            .ctx
            .load_module(ptx)
            .map_err(CudaError::driver("loading a compiled module"))?;
        let f = module
            .load_function(&key.function_name())
            .map_err(CudaError::driver("finding the kernel in its module"))?;
        map.insert(key, f.clone());
        Ok(f)
    }

    /// Compiles, in parallel, the GEMV builds of `formats` at batches `batches` (those in
    /// the capability table, CUDA-core and tensor-core), so later launches find them ready.
    pub fn prewarm(&self, formats: &[Format], batches: &[usize]) -> Result<(), CudaError> {
        let mut keys = Vec::new();
        for &f in formats {
            for &s in batches {
                if let Ok(cap) = caps::lookup(Op::Gemv, f, s) {
                    for mma in [None, cap.mma] {
                        let key = ModuleKey {
                            kernel: cap.kernel,
                            mma,
                            s,
                            arch: self.arch.clone(),
                            mutation: self.mutation,
                        };
                        if !keys.contains(&key) {
                            keys.push(key);
                        }
                    }
                }
            }
        }
        compile::prewarm(&keys)
    }

    /// Uploads a tensor's stored bytes as they are.
    pub fn upload(&self, t: &QTensor<'_>) -> Result<DeviceTensor, CudaError> {
        let shape = layout::launch_shape(t.format(), t.rows(), t.cols())?;
        let weights = self
            .stream
            .clone_htod(t.weights())
            .map_err(CudaError::driver("uploading weights"))?;
        let scales = if t.scales().is_empty() {
            self.stream.clone_htod(&[0u8; 16][..])
        } else {
            self.stream.clone_htod(t.scales())
        }
        .map_err(CudaError::driver("uploading scales"))?;
        let tensor = DeviceTensor {
            format: t.format(),
            rows: t.rows(),
            cols: t.cols(),
            rotation_seed: t.rotation_seed(),
            shape,
            weight_bytes: t.weights().len(),
            scale_bytes: t.scales().len(),
            weights,
            scales,
        };
        self.check_alignment(&tensor)?;
        Ok(tensor)
    }

    /// A second device copy of `t` (device-to-device), e.g. to rotate benchmark copies
    /// through more memory than the L2 holds.
    pub fn duplicate(&self, t: &DeviceTensor) -> Result<DeviceTensor, CudaError> {
        let copy = DeviceTensor {
            format: t.format,
            rows: t.rows,
            cols: t.cols,
            rotation_seed: t.rotation_seed,
            shape: t.shape,
            weight_bytes: t.weight_bytes,
            scale_bytes: t.scale_bytes,
            weights: self
                .stream
                .clone_dtod(&t.weights)
                .map_err(CudaError::driver("copying weights"))?,
            scales: self
                .stream
                .clone_dtod(&t.scales)
                .map_err(CudaError::driver("copying scales"))?,
        };
        self.check_alignment(&copy)?;
        Ok(copy)
    }

    /// The kernels' vector loads assume 16-byte aligned buffers (CUDA allocations are
    /// 256-byte aligned; this makes the assumption checked rather than silent).
    fn check_alignment(&self, t: &DeviceTensor) -> Result<(), CudaError> {
        let (w, _w_sync) = t.weights.device_ptr(&self.stream);
        let (s, _s_sync) = t.scales.device_ptr(&self.stream);
        if w % 16 != 0 || s % 16 != 0 {
            return Err(CudaError::Driver {
                during: "uploading a tensor",
                detail: format!("device buffers at {w:#x} / {s:#x} are not 16-byte aligned"),
            });
        }
        Ok(())
    }

    /// Rotates (for rotated formats), pads and uploads activations `x` ([s, I], logical
    /// domain) for GEMVs with `w`.
    pub fn upload_activations(
        &self,
        w: &DeviceTensor,
        x: &[f32],
        s: usize,
    ) -> Result<DeviceActivations, CudaError> {
        let cap = caps::lookup(Op::Gemv, w.format, s)?;
        let x_stride = w.shape.x_stride as usize;
        let host = layout::prepare_activations(w.format, w.cols, w.rotation_seed, x, s, x_stride)?;
        let split = match cap.mma_for(w.shape.row_bytes as usize) {
            Some(_) => {
                let (halves, aux) = layout::split_activations(&host, s, x_stride);
                let h = self
                    .stream
                    .clone_htod(&halves)
                    .map_err(CudaError::driver("uploading activations"))?;
                let a = self
                    .stream
                    .clone_htod(&aux)
                    .map_err(CudaError::driver("uploading activations"))?;
                Some((h, a))
            }
            None => None,
        };
        let x = self
            .stream
            .clone_htod(&host)
            .map_err(CudaError::driver("uploading activations"))?;
        Ok(DeviceActivations {
            s,
            cols: w.cols,
            format: w.format,
            rotation_seed: w.rotation_seed,
            x,
            split,
        })
    }

    /// A device output buffer [s, O] filled with [`POISON`].
    pub fn poisoned_output(&self, w: &DeviceTensor, s: usize) -> Result<CudaSlice<f32>, CudaError> {
        let n = s.checked_mul(w.rows).ok_or_else(|| CudaError::Shape {
            format: w.format,
            what: format!("S={s} x O={} overflows", w.rows),
        })?;
        self.stream
            .clone_htod(&vec![POISON; n])
            .map_err(CudaError::driver("allocating the output"))
    }

    /// Enqueues y[S, O] = x . W^T on the backend's stream (asynchronous; the caller syncs),
    /// on the tensor cores where the format and shape allow.
    pub fn gemv_launch(
        &self,
        w: &DeviceTensor,
        x: &DeviceActivations,
        y: &mut CudaSlice<f32>,
    ) -> Result<(), CudaError> {
        self.gemv_launch_path(w, x, y, KernelPath::Auto)
    }

    /// [`CudaBackend::gemv_launch`] with the kernel choice made by the caller.
    pub fn gemv_launch_path(
        &self,
        w: &DeviceTensor,
        x: &DeviceActivations,
        y: &mut CudaSlice<f32>,
        path: KernelPath,
    ) -> Result<(), CudaError> {
        let cap = caps::lookup(Op::Gemv, w.format, x.s)?;
        let rotation_matches = x.format.spec().rotation == w.format.spec().rotation
            && (x.format.spec().rotation == quant_core::Rotation::None
                || x.rotation_seed == w.rotation_seed);
        if x.cols != w.cols || !rotation_matches {
            return Err(CudaError::Shape {
                format: w.format,
                what: format!(
                    "activations prepared for {} (I = {}, seed {}) used with a {} tensor (I = {}, seed {})",
                    x.format, x.cols, x.rotation_seed, w.format, w.cols, w.rotation_seed
                ),
            });
        }
        if y.len() < x.s * w.rows {
            return Err(CudaError::Shape {
                format: w.format,
                what: format!(
                    "output holds {} values, expected S={} x O={}",
                    y.len(),
                    x.s,
                    w.rows
                ),
            });
        }
        let sh = w.shape;
        let mma = match path {
            KernelPath::Auto => cap.mma_for(sh.row_bytes as usize),
            KernelPath::CudaCores => None,
        };
        if let (Some(m), Some((xh, xa))) = (mma, &x.split) {
            let f = self.function(cap.kernel, Some(m), x.s)?;
            let cfg = LaunchConfig {
                grid_dim: (layout::mma_grid_blocks(w.rows)?, 1, 1),
                block_dim: (32 * layout::MMA_WARPS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.stream.launch_builder(&f);
            b.arg(&w.weights)
                .arg(&w.scales)
                .arg(xh)
                .arg(xa)
                .arg(y)
                .arg(&sh.row_bytes)
                .arg(&sh.rows)
                .arg(&sh.x_stride)
                .arg(&sh.sc_row);
            // SAFETY: the argument list matches gemv.cu's gemv_mma_s<S> (u8*, u8*, u16*, f32*,
            // f32*, i64, i32, i32, i32); `xh` holds 2S x x_stride halves and `xa` S + S x
            // x_stride / 64 floats (layout::split_activations for this tensor's stride),
            // `y` at least S * rows floats (checked above); the kernel guards rows against
            // `rows`, and `mma_for` admitted only rows made of whole k-blocks, so every
            // weight load stays inside its row.
            unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching the GEMV"))?;
            return Ok(());
        }
        let f = self.function(cap.kernel, None, x.s)?;
        let cfg = LaunchConfig {
            grid_dim: (layout::grid_blocks(w.rows, x.s)?, 1, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&f);
        b.arg(&w.weights)
            .arg(&w.scales)
            .arg(&x.x)
            .arg(y)
            .arg(&sh.row_bytes)
            .arg(&sh.rows)
            .arg(&sh.cols)
            .arg(&sh.x_stride)
            .arg(&sh.sc_row);
        // SAFETY: the argument list matches gemv.cu's kernel signature (u8*, u8*, f32*, f32*,
        // i64, i32, i32, i32, i32); the buffers hold what the kernel reads: `weights` and
        // `scales` the registry's byte counts for [rows, cols] (checked by QTensor), `x`
        // S * x_stride floats, `y` at least S * rows floats (checked above), and the kernel
        // guards every row index against `rows` and every byte against `row_bytes`.
        unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching the GEMV"))?;
        Ok(())
    }

    /// y[S, O] = x[S, I] . W^T with `x` in the logical domain; the output is poisoned before
    /// the launch, so an output the kernel fails to write can never pass as a result.
    pub fn gemv(&self, w: &DeviceTensor, x: &[f32], s: usize) -> Result<Vec<f32>, CudaError> {
        self.gemv_path(w, x, s, KernelPath::Auto)
    }

    /// [`CudaBackend::gemv`] with the kernel choice made by the caller (tests, benchmarks).
    pub fn gemv_path(
        &self,
        w: &DeviceTensor,
        x: &[f32],
        s: usize,
        path: KernelPath,
    ) -> Result<Vec<f32>, CudaError> {
        let xa = self.upload_activations(w, x, s)?;
        let mut y = self.poisoned_output(w, s)?;
        self.gemv_launch_path(w, &xa, &mut y, path)?;
        let out = self
            .stream
            .clone_dtoh(&y)
            .map_err(CudaError::driver("reading the output"))?;
        self.stream
            .synchronize()
            .map_err(CudaError::driver("waiting for the GEMV"))?;
        Ok(out)
    }
}
