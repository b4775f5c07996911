//! The CUDA device: probing, tensors uploaded in their stored layout, and the launches:
//! GEMV (S <= 16), GEMM (S >= 17) and the MoE grouped GEMV.
//!
//! Without a GPU every entry returns [`CudaError::Unavailable`]: cudarc's dynamic loader
//! panics when libcuda is missing, so [`CudaBackend::new`] first asks whether the driver
//! and NVRTC libraries can be opened at all, and only then makes its first cudarc call
//! (itself inside `catch_unwind`, should the loader panic on something the probe missed).

use crate::caps::{self, KernelId, Op};
use crate::compile::{self, Build, ModuleKey, Tuning};
use crate::error::CudaError;
use crate::layout::{self, BLOCK_THREADS, GemmLayout, LaunchShape};
use cudarc::driver::sys::{self, CUfunction_attribute_enum};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr,
    DevicePtrMut, LaunchConfig, PushKernelArg,
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
    tuning: Tuning,
    /// Streaming multiprocessors of the device (the split-K tile GEMV sizes its grid by it).
    sms: usize,
    /// Split-K scratch of the tile GEMV: partial outputs [splits, S, O] and one arrival
    /// counter per row block (zero between launches: the last block of each resets its own).
    /// Launches on the one stream run in order, so every launch may reuse them.
    split: Mutex<SplitScratch>,
    /// Tile-layout activation buffers of the resident path, per (chunk bytes, 4-bit codes,
    /// n8 tiles, x stride): written by `tile_prep` before each tile GEMV that reads them.
    prep: Mutex<HashMap<PrepKey, PrepBuffers>>,
    /// Blocks a SM holds at once of each persistent GEMV and GEMM build (the driver's
    /// occupancy), asked once per build.
    resident: Mutex<HashMap<ModuleKey, u32>>,
}

/// (chunk bytes, 4-bit codes, n8 tiles or 0 for the 16-row layout, x stride).
type PrepKey = (u32, bool, usize, usize);
/// The halves and the 1/p + sums of one resident layout.
type PrepBuffers = (CudaSlice<u16>, CudaSlice<f32>);

struct SplitScratch {
    partials: CudaSlice<f32>,
    counters: CudaSlice<u32>,
}

impl SplitScratch {
    /// Grows the buffers to at least `partials` floats and `counters` counters (zeroed, as
    /// the kernels' last-arrival counters must start), keeping them when large enough.
    fn ensure(
        &mut self,
        stream: &Arc<CudaStream>,
        partials: usize,
        counters: usize,
    ) -> Result<(), CudaError> {
        if self.partials.len() < partials {
            self.partials = stream
                .alloc_zeros::<f32>(partials)
                .map_err(CudaError::driver("allocating split-K scratch"))?;
        }
        if self.counters.len() < counters {
            self.counters = stream
                .alloc_zeros::<u32>(counters)
                .map_err(CudaError::driver("allocating split-K scratch"))?;
        }
        Ok(())
    }
}

/// A weight tensor on the device, in its container's own layout: the weight bytes and the
/// sidecar-scale bytes exactly as stored (a format without sidecar gets a 16-byte
/// placeholder the kernels never read, since CUDA cannot allocate zero bytes).
pub struct DeviceTensor {
    format: Format,
    rows: usize,
    cols: usize,
    rotation_seed: u64,
    pub(crate) shape: LaunchShape,
    weight_bytes: usize,
    scale_bytes: usize,
    weights: CudaSlice<u8>,
    scales: CudaSlice<u8>,
    /// The dequantized GEMM's power of two a row ([`GemmPrecision::F16Dequant`]), written
    /// on the device by its first such launch.
    row_pow: Mutex<Option<CudaSlice<f32>>>,
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
    /// Floats per activation row the GEMV kernels read: I padded as [`crate::layout`] lays
    /// it out. Device-resident activations ([`CudaBackend::gemv_launch_resident`]) use it.
    pub fn x_stride(&self) -> usize {
        self.shape.x_stride as usize
    }
    /// The FWHT sign seed of a rotated format (activations must be rotated with it).
    pub fn rotation_seed(&self) -> u64 {
        self.rotation_seed
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
    /// The same split in the GEMM kernel's tile order ([`layout::gemm_activations`], two
    /// parts, [`layout::gemv_tiles`] n8 tiles), for the split-K tile GEMV.
    tiles: Option<TileInput>,
}

struct TileInput {
    layout: GemmLayout,
    xg: CudaSlice<u16>,
    xa: CudaSlice<f32>,
}

/// Which kernel a launch uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KernelPath {
    /// The tensor-core kernel where the capability row has one and the shape allows it
    /// ([`caps::Capability::mma_for`]), else the CUDA-core kernel.
    Auto,
    /// Always the CUDA-core kernel (for comparisons).
    CudaCores,
    /// The tensor-core GEMV whose blocks each own 16 rows and split the row among their
    /// warps (`gemv_mma_s<S>`); refused where the tensor cores do not take the shape.
    MmaRows,
    /// The split-K tile GEMV (the GEMM kernel over 1, 2 or 4 n8 tiles, 256-row blocks,
    /// the row split across blocks); refused where the tensor cores do not take the shape.
    MmaTiles,
}

/// How the GEMM represents the activations (and, with `F16Dequant`, the scaled weights) on
/// the tensor cores.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum GemmPrecision {
    /// x p = hi + lo, two f16 parts (about 22 bits): within 1e-4 of sum |w x| like the GEMV,
    /// at twice the tensor-core work. The default, and what the capability table promises.
    Split,
    /// hi alone: each product w x is off by at most 2^-11 of itself (f16 round-to-nearest),
    /// so |y - y_ref| <= 2^-11 sum |w x| plus f32 accumulation; declared as
    /// [`GemmPrecision::tolerance`] 5e-4. Not in the capability table: callers opt in.
    F16,
    /// hi alone, and the weights of the formats [`crate::caps::dequantizes`] admits (int4-g*,
    /// fp8-e4m3-b128, mq4-g256-v2, mq4c-g256) decoded with their k-block's scale and offset
    /// into f16, in units of a power of two a row: no per-k-block fold, so the tensor cores
    /// never wait for one. Each product is then off by the roundings of x, of an f32 scale
    /// and of the weight, at most 3 * 2^-11 of itself; declared 1.5e-3. The other formats
    /// run their `F16` build (within its tighter bound). Opt-in, like `F16`.
    F16Dequant,
}

impl GemmPrecision {
    /// Every precision, for tests and benchmarks that run them all.
    pub const ALL: [GemmPrecision; 3] = [
        GemmPrecision::Split,
        GemmPrecision::F16,
        GemmPrecision::F16Dequant,
    ];
    /// Activation parts (B columns per activation).
    pub fn parts(self) -> u32 {
        match self {
            GemmPrecision::Split => 2,
            GemmPrecision::F16 | GemmPrecision::F16Dequant => 1,
        }
    }
    /// Whether the GEMM of tensor-core kernel format `fmt` decodes with the scales
    /// (`Build::Gemm::dequant`).
    pub fn dequantizes(self, fmt: u32) -> bool {
        match self {
            GemmPrecision::Split | GemmPrecision::F16 => false,
            GemmPrecision::F16Dequant => caps::dequantizes(fmt),
        }
    }
    /// The GEMM build of tensor-core kernel format `fmt` at this precision.
    pub fn gemm_build(self, mma: caps::MmaKernel, fmt: u32) -> Build {
        Build::Gemm {
            mma,
            parts: self.parts(),
            dequant: self.dequantizes(fmt),
        }
    }
    /// The worst magnitude-relative error (`oracle::worst_error`) this precision promises.
    pub fn tolerance(self) -> f64 {
        match self {
            GemmPrecision::Split => 1e-4,
            GemmPrecision::F16 => 5e-4,
            GemmPrecision::F16Dequant => 1.5e-3,
        }
    }
}

/// Activations [S, I] on the device for a GEMM with one tensor: the f16 parts in the
/// kernel's tile order ([`layout::gemm_activations`]), or, for shapes the tensor-core kernel
/// does not take, the padded f32 rows the CUDA-core GEMV kernel reads in batches of 16.
pub struct DeviceGemmActivations {
    s: usize,
    cols: usize,
    format: Format,
    rotation_seed: u64,
    precision: GemmPrecision,
    input: GemmInput,
}

enum GemmInput {
    Tiles {
        layout: GemmLayout,
        tiles: usize,
        padded: usize,
        xg: CudaSlice<u16>,
        xa: CudaSlice<f32>,
    },
    Rows {
        x: CudaSlice<f32>,
    },
}

impl DeviceGemmActivations {
    pub fn s(&self) -> usize {
        self.s
    }
    pub fn precision(&self) -> GemmPrecision {
        self.precision
    }
    /// Whether the launch runs on the tensor cores (else the CUDA-core fallback).
    pub fn uses_tensor_cores(&self) -> bool {
        matches!(self.input, GemmInput::Tiles { .. })
    }
}

impl DeviceActivations {
    pub fn s(&self) -> usize {
        self.s
    }
}

/// Whether [`KernelPath::Auto`] runs the split-K tile GEMV for `cap` at batch `s`: the
/// tuning's override, else the capability table's threshold.
fn tiles_at(cap: &caps::Capability, tuning: &Tuning, s: usize) -> bool {
    match tuning.tiles_from_s {
        Some(0) => false,
        Some(n) => s >= n as usize,
        None => s >= cap.tiles_from,
    }
}

/// Where a resident launch's activation split reads (device pointers, 0 for none).
#[derive(Copy, Clone, Debug)]
enum PrepSource {
    /// `tile_prep`: x [S, x stride] in the stored domain.
    Plain(sys::CUdeviceptr),
    /// `norm_prep` (S = 1): RMSNorm of src (+ d, stored into dst) over n columns.
    Norm {
        src: sys::CUdeviceptr,
        d: sys::CUdeviceptr,
        weight: sys::CUdeviceptr,
        dst: sys::CUdeviceptr,
        n: i32,
        eps: f32,
    },
}

impl PrepSource {
    fn input(self) -> compile::PrepInput {
        match self {
            PrepSource::Plain(_) => compile::PrepInput::Plain,
            PrepSource::Norm { .. } => compile::PrepInput::Norm,
        }
    }
}

/// One kernel parameter of a raw launch (`cuLaunchKernelEx` copies the value at each
/// address it is given): a device pointer (0 for null) or a 32-bit scalar. The activation
/// splits here and the decode kernels (crate::resident) pass their parameters this way.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Param {
    Ptr(sys::CUdeviceptr),
    I32(i32),
    F32(f32),
}

impl Param {
    pub(crate) fn address(&mut self) -> *mut std::ffi::c_void {
        match self {
            Param::Ptr(p) => (p as *mut sys::CUdeviceptr).cast(),
            Param::I32(v) => (v as *mut i32).cast(),
            Param::F32(v) => (v as *mut f32).cast(),
        }
    }
}

/// Activations prepared for (format, I, rotation seed) may only meet a tensor they fit.
fn check_prepared_for(
    w: &DeviceTensor,
    format: Format,
    cols: usize,
    seed: u64,
) -> Result<(), CudaError> {
    let rotation_matches = format.spec().rotation == w.format.spec().rotation
        && (format.spec().rotation == quant_core::Rotation::None || seed == w.rotation_seed);
    if cols != w.cols || !rotation_matches {
        return Err(CudaError::Shape {
            format: w.format,
            what: format!(
                "activations prepared for {format} (I = {cols}, seed {seed}) used with a {} tensor (I = {}, seed {})",
                w.format, w.cols, w.rotation_seed
            ),
        });
    }
    Ok(())
}

impl CudaBackend {
    /// Opens device 0, or says why there is none. `TESSERA_CUDA_PERSISTENT=on`, `off` or
    /// `auto` in the environment sets [`Tuning::mma_persistent`] to `Some(true)`,
    /// `Some(false)` or `None` (the rule; engines measuring both paths in one run, the
    /// results are the same). Any other value leaves the default. `TESSERA_CUDA_WGMMA=1`
    /// (or `0`) sets [`Tuning::gemm_wgmma`], `TESSERA_CUDA_WGMMA_SCALED=1` (or `0`)
    /// [`Tuning::gemm_wgmma_scaled`], `TESSERA_CUDA_PDL=all` (or `rule`) sets
    /// [`Tuning::pdl_every_grid`] (or clears it: [`crate::layout::pdl_pays`] decides).
    pub fn new() -> Result<CudaBackend, CudaError> {
        let mma_persistent = match std::env::var("TESSERA_CUDA_PERSISTENT").as_deref() {
            Ok("on") => Some(true),
            Ok("off") => Some(false),
            Ok("auto") => None,
            _ => Tuning::default().mma_persistent,
        };
        let gemm_wgmma = match std::env::var("TESSERA_CUDA_WGMMA").as_deref() {
            Ok("1") => true,
            Ok("0") => false,
            _ => Tuning::default().gemm_wgmma,
        };
        let gemm_wgmma_scaled = match std::env::var("TESSERA_CUDA_WGMMA_SCALED").as_deref() {
            Ok("1") => true,
            Ok("0") => false,
            _ => Tuning::default().gemm_wgmma_scaled,
        };
        let pdl_every_grid = match std::env::var("TESSERA_CUDA_PDL").as_deref() {
            Ok("all") => true,
            Ok("rule") => false,
            _ => Tuning::default().pdl_every_grid,
        };
        Self::open(
            None,
            Tuning {
                mma_persistent,
                gemm_wgmma,
                gemm_wgmma_scaled,
                pdl_every_grid,
                ..Tuning::default()
            },
        )
    }

    /// Device 0 with other kernel-shape knobs (benchmarks compare them; results are the
    /// same, only speed differs).
    pub fn with_tuning(tuning: Tuning) -> Result<CudaBackend, CudaError> {
        Self::open_tuned(None, tuning)
    }

    /// Device 0 with `tuning` and this backend's deliberate defect, if it carries one: a
    /// test that needs a second tuning (forced split-K, other schedules) keeps the mutation
    /// it is run under.
    pub fn with_other_tuning(&self, tuning: Tuning) -> Result<CudaBackend, CudaError> {
        Self::open_tuned(self.mutation, tuning)
    }

    /// [`Self::open`] with a caller's tuning, refused if its knobs are out of range.
    fn open_tuned(
        mutation: Option<&'static str>,
        tuning: Tuning,
    ) -> Result<CudaBackend, CudaError> {
        tuning.check().map_err(|what| CudaError::Input { what })?;
        Self::open(mutation, tuning)
    }

    /// A backend whose kernels carry a deliberate defect (mutation tests only).
    #[cfg(feature = "mutation-test")]
    pub fn with_mutation(m: crate::compile::Mutation) -> Result<CudaBackend, CudaError> {
        Self::open(Some(m.define()), Tuning::default())
    }

    fn open(mutation: Option<&'static str>, tuning: Tuning) -> Result<CudaBackend, CudaError> {
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
        // One non-blocking stream of our own, not the legacy default stream: a legacy stream
        // cannot be captured into a CUDA graph, and it serialises against every other stream
        // of the process. Every launch and copy of the backend goes through this one stream,
        // so stream order alone orders them, and cudarc's per-slice event tracking (which
        // `new_stream` switches on) would only add an event record to every use.
        // SAFETY: the backend uses this single stream for every allocation, copy, launch and
        // free, so no slice is used on, or freed from, another stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(CudaError::driver("creating the backend's stream"))?;
        let sms = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(CudaError::driver("multiprocessor count"))?
            .max(1) as usize;
        let alloc = CudaError::driver("allocating split-K scratch");
        let split = SplitScratch {
            partials: stream.alloc_zeros::<f32>(1).map_err(alloc)?,
            counters: stream
                .alloc_zeros::<u32>(1)
                .map_err(CudaError::driver("allocating split-K scratch"))?,
        };
        Ok(CudaBackend {
            ctx,
            stream,
            arch: compile::arch_of(major, minor),
            name,
            functions: Mutex::new(HashMap::new()),
            mutation,
            tuning,
            sms,
            split: Mutex::new(split),
            prep: Mutex::new(HashMap::new()),
            resident: Mutex::new(HashMap::new()),
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

    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    fn key(&self, kernel: KernelId, build: Build, s: usize) -> ModuleKey {
        self.key_tuned(kernel, build, s, &self.tuning)
    }

    fn key_tuned(&self, kernel: KernelId, build: Build, s: usize, tuning: &Tuning) -> ModuleKey {
        ModuleKey {
            kernel,
            build,
            s,
            arch: self.arch.clone(),
            mutation: self.mutation,
            // Host-side choices (between builds, which the build names, or of how a build is
            // launched): tunings that differ only in them share their modules.
            tuning: Tuning {
                pdl_every_grid: Tuning::default().pdl_every_grid,
                mma_persistent: Tuning::default().mma_persistent,
                mma_persist_grid: Tuning::default().mma_persist_grid,
                gemm_split_k: Tuning::default().gemm_split_k,
                ..tuning.clone()
            },
        }
    }

    /// Blocks of `f` (built as `key`) an SM holds at once with `threads` threads and
    /// `shared` bytes of dynamic shared memory: the driver's occupancy, asked once a build.
    fn blocks_per_sm(
        &self,
        key: &ModuleKey,
        f: &CudaFunction,
        threads: u32,
        shared: usize,
    ) -> Result<u32, CudaError> {
        let mut map = self.resident.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&n) = map.get(key) {
            return Ok(n);
        }
        let n = f
            .occupancy_max_active_blocks_per_multiprocessor(threads, shared, None)
            .map_err(CudaError::driver("asking the occupancy of a build"))?
            .max(1);
        map.insert(key.clone(), n);
        Ok(n)
    }

    /// The compiled kernel of a build (NVRTC on first use).
    fn function(
        &self,
        kernel: KernelId,
        build: Build,
        s: usize,
    ) -> Result<CudaFunction, CudaError> {
        self.function_of(self.key(kernel, build, s))
    }

    fn function_of(&self, key: ModuleKey) -> Result<CudaFunction, CudaError> {
        let kernel = key.kernel;
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
        if let Build::Gemm { mma, parts, .. } = &key.build {
            // The activation stages exceed the 48 KB a block gets without asking.
            let l = self.gemm_layout(kernel, mma.chunk_bytes, *parts);
            let bytes =
                i32::try_from(l.shared_bytes(self.tuning.gemm_stages as usize)).map_err(|_| {
                    CudaError::Input {
                        what: format!("GEMM shared memory of {l:?} overflows"),
                    }
                })?;
            f.set_attribute(
                CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            )
            .map_err(CudaError::driver("raising the GEMM's shared memory limit"))?;
        }
        if let (Build::Gemm { .. } | Build::GemvTiles { .. }, Some(c)) =
            (&key.build, self.tuning.shared_carveout)
        {
            // A build whose registers allow several blocks an SM may still get shared memory
            // for one (ncu, session 19: the GEMM's SMs configured 65.5 KB); alone it gained
            // nothing in session 19's sweep (docs/CUDA.md), so it is off by default.
            f.set_attribute(
                CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                c as i32,
            )
            .map_err(CudaError::driver("setting the shared memory carveout"))?;
        }
        if std::env::var_os("TESSERA_CUDA_REGS").is_some() {
            // Diagnostics (benchmarks): what ptxas gave the build, spills included.
            let attr = |a| f.get_attribute(a).unwrap_or(-1);
            eprintln!(
                "regs: {} {}: {} registers, {} bytes local (spills), {} bytes shared",
                key.describe(),
                key.function_name(),
                attr(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_NUM_REGS),
                attr(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
                attr(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
            );
        }
        map.insert(key, f.clone());
        Ok(f)
    }

    fn gemm_layout(&self, kernel: KernelId, chunk_bytes: u32, parts: u32) -> GemmLayout {
        GemmLayout {
            chunk_bytes: chunk_bytes as usize,
            nibbles: caps::nibble_codes(kernel.fmt),
            parts: parts as usize,
            nt: self.tuning.gemm_nt(parts) as usize,
            canonical: compile::wgmma_gemm(&self.tuning, &self.arch, kernel.fmt, parts),
        }
    }

    /// Compiles, in parallel, the GEMV builds of `formats` at batches `batches` (those in
    /// the capability table, CUDA-core and tensor-core), so later launches find them ready.
    pub fn prewarm(&self, formats: &[Format], batches: &[usize]) -> Result<(), CudaError> {
        self.prewarm_tuned(formats, batches, std::slice::from_ref(&self.tuning))
    }

    /// [`CudaBackend::prewarm`] for the tensor-core GEMV builds of several tunings too
    /// (benchmarks comparing them, [`CudaBackend::gemv_launch_tuned`]).
    pub fn prewarm_tuned(
        &self,
        formats: &[Format],
        batches: &[usize],
        tunings: &[Tuning],
    ) -> Result<(), CudaError> {
        let mut keys = Vec::new();
        for &f in formats {
            for &s in batches {
                if let Ok(cap) = caps::lookup(Op::Gemv, f, s) {
                    let mut builds = vec![(Build::Gemv, self.tuning.clone())];
                    for t in tunings {
                        // Every tuning a launch may take (layout::rows_stage and
                        // rows_tuning depend on the grid).
                        let twins = layout::rows_tunings(t, cap.kernel, s, self.sms);
                        for t in &twins {
                            builds.extend(cap.mma.map(|m| (Build::GemvMma(m), t.clone())));
                            // The group-class chunk where S allows it (any row of whole
                            // 64-byte k-blocks takes it).
                            builds.extend(cap.mma.and_then(|m| {
                                let c = caps::rows_chunk(cap.kernel, m, s, 64);
                                (t.mma_classes && c != m).then_some((Build::GemvMma(c), t.clone()))
                            }));
                        }
                        // The persistent twins, built whenever the tuning may use them (the
                        // rule takes only 8-bit codes); the persistent launch keeps the
                        // tuning's block shape on every grid.
                        let persist = match t.mma_persistent {
                            Some(on) => on,
                            None => !caps::nibble_codes(cap.kernel.fmt),
                        };
                        if persist && s <= 4 {
                            builds.extend(cap.mma.map(|m| (Build::GemvMmaPersist(m), t.clone())));
                            builds.extend(cap.mma.and_then(|m| {
                                let c = caps::rows_chunk(cap.kernel, m, s, 64);
                                (t.mma_classes && c != m)
                                    .then_some((Build::GemvMmaPersist(c), t.clone()))
                            }));
                        }
                        builds.extend(cap.mma.map(|m| {
                            let nt = layout::gemv_tiles(m.chunk_bytes, false, s).nt as u32;
                            (Build::GemvTiles { mma: m, nt }, t.clone())
                        }));
                    }
                    for (b, t) in builds {
                        // The tile builds do not depend on S beyond their n8 tiles.
                        let s = if matches!(b, Build::GemvTiles { .. }) {
                            0
                        } else {
                            s
                        };
                        let key = self.key_tuned(cap.kernel, b, s, &t);
                        if !keys.contains(&key) {
                            keys.push(key);
                        }
                    }
                }
            }
        }
        compile::prewarm(&keys)
    }

    /// Compiles, in parallel, the GEMM builds of `formats` at `precisions`, and the
    /// CUDA-core GEMV builds its fallback for other shapes uses at `batches` (S = 16 and
    /// S mod 16).
    pub fn prewarm_gemm(
        &self,
        formats: &[Format],
        precisions: &[GemmPrecision],
        batches: &[usize],
    ) -> Result<(), CudaError> {
        let mut keys = Vec::new();
        for &f in formats {
            let Ok(cap) = caps::lookup(Op::Gemm, f, 17) else {
                continue;
            };
            for &p in precisions {
                if let Some(mma) = cap.mma {
                    keys.push(self.key(cap.kernel, p.gemm_build(mma, cap.kernel.fmt), 0));
                }
            }
            for &s in batches {
                for chunk in [s.min(16), s % 16] {
                    let key = self.key(cap.kernel, Build::Gemv, chunk);
                    if chunk > 0 && !keys.contains(&key) {
                        keys.push(key);
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
            row_pow: Mutex::new(None),
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
            row_pow: Mutex::new(None),
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
        let tiles = match cap.mma_for(w.shape.row_bytes as usize) {
            Some(m) => {
                let l = layout::gemv_tiles(m.chunk_bytes, caps::nibble_codes(cap.kernel.fmt), s);
                let (halves, aux) = layout::gemm_activations(&host, s, x_stride, &l)?;
                let up = CudaError::driver("uploading activations");
                Some(TileInput {
                    layout: l,
                    xg: self.stream.clone_htod(&halves).map_err(up)?,
                    xa: self
                        .stream
                        .clone_htod(&aux)
                        .map_err(CudaError::driver("uploading activations"))?,
                })
            }
            None => None,
        };
        let split = match cap.mma_for(w.shape.row_bytes as usize) {
            Some(_) => {
                let nibbles = caps::nibble_codes(cap.kernel.fmt);
                let (halves, aux) = layout::split_activations(
                    &host,
                    s,
                    x_stride,
                    nibbles,
                    layout::SplitScale::Row,
                )?;
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
            tiles,
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
        self.gemv_launch_tuned(w, x, y, path, &self.tuning)
    }

    /// [`CudaBackend::gemv_launch_path`] with the tensor-core kernel built with `tuning`'s
    /// GEMV knobs instead of the backend's (the result is the same; benchmarks compare the
    /// speed). Refuses a tuning outside [`Tuning::check`].
    pub fn gemv_launch_tuned(
        &self,
        w: &DeviceTensor,
        x: &DeviceActivations,
        y: &mut CudaSlice<f32>,
        path: KernelPath,
        tuning: &Tuning,
    ) -> Result<(), CudaError> {
        tuning.check().map_err(|what| CudaError::Input { what })?;
        let cap = caps::lookup(Op::Gemv, w.format, x.s)?;
        check_prepared_for(w, x.format, x.cols, x.rotation_seed)?;
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
        let tc = cap.mma_for(sh.row_bytes as usize);
        let use_tiles = tiles_at(cap, tuning, x.s);
        let (mma, tiles) = match path {
            KernelPath::Auto => (tc, tc.is_some() && use_tiles),
            KernelPath::CudaCores => (None, false),
            KernelPath::MmaRows | KernelPath::MmaTiles => {
                if tc.is_none() {
                    return Err(CudaError::Shape {
                        format: w.format,
                        what: format!(
                            "{path:?}: the tensor cores do not take rows of {} bytes",
                            sh.row_bytes
                        ),
                    });
                }
                (tc, path == KernelPath::MmaTiles)
            }
        };
        if let (Some(m), true, Some(t)) = (mma, tiles, &x.tiles) {
            let tile = (&t.layout, &t.xg, &t.xa);
            return self.launch_tiles(w, cap.kernel, m, tile, x.s, &mut y.slice_mut(..), tuning);
        }
        if let (Some(m), Some((xh, xa))) = (mma, &x.split) {
            return self.launch_rows(
                w,
                cap.kernel,
                m,
                (xh, xa),
                x.s,
                &mut y.slice_mut(..),
                tuning,
            );
        }
        self.launch_cuda_cores(w, cap.kernel, &x.x.slice(..), x.s, &mut y.slice_mut(..))
    }

    /// The 16-row tensor-core GEMV (`gemv_mma_s<S>`) over split activations `xh` / `xa`
    /// ([`layout::split_activations`] of this tensor's stride, or `tile_prep`'s twin).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_rows(
        &self,
        w: &DeviceTensor,
        kernel: KernelId,
        m: caps::MmaKernel,
        (xh, xa): (&CudaSlice<u16>, &CudaSlice<f32>),
        s: usize,
        y: &mut CudaViewMut<'_, f32>,
        tuning: &Tuning,
    ) -> Result<(), CudaError> {
        let sh = w.shape;
        // int4-g32 / g64 at small S: 16-byte chunks over 2-4 groups (gemv.cu `MmaClasses`).
        let m = if tuning.mma_classes {
            caps::rows_chunk(kernel, m, s, sh.row_bytes as usize)
        } else {
            m
        };
        {
            let blocks = layout::mma_grid_blocks(w.rows)?;
            if layout::rows_persistent(
                tuning,
                s,
                blocks as usize,
                caps::nibble_codes(kernel.fmt),
                self.sms,
            ) {
                return self.launch_rows_persist(w, kernel, m, (xh, xa), s, y, tuning);
            }
            // The format's stage (layout::rows_stage); small grids: wider blocks
            // (layout::rows_tuning).
            let tuning = layout::rows_launch_tuning(tuning, kernel, s, blocks, self.sms);
            let f = self.function_of(self.key_tuned(kernel, Build::GemvMma(m), s, &tuning))?;
            let cfg = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (32 * tuning.mma_warps, 1, 1),
                shared_mem_bytes: 0,
            };
            if layout::pdl_launch(&tuning, cfg.grid_dim.0, self.sms) {
                return self.launch_rows_pdl(&f, cfg, w, (xh, xa), y);
            }
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
            // f32*, i64, i32, i32, i32); `xh` holds 2S x x_stride halves and `xa` 2 S x
            // x_stride / MMA_SUM_SEGMENT floats (layout::split_activations for this tensor's stride),
            // `y` at least S * rows floats (checked by the callers); the kernel guards rows against
            // `rows`, and `mma_for` admitted only rows made of whole k-blocks, so every
            // weight load stays inside its row.
            unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching the GEMV"))?;
        }
        Ok(())
    }

    /// The persistent 16-row GEMV ([`Build::GemvMmaPersist`], S <= 4): a grid of at most the
    /// device's resident blocks of the build ([`layout::PersistPlan`]; or
    /// `Tuning::mma_persist_grid`), each walking an equal share of the launch's (tile,
    /// round) units; tiles split between blocks meet in the split-K scratch ([rounds, S, O]
    /// partials, one counter per tile), summed there by their last block.
    #[allow(clippy::too_many_arguments)]
    fn launch_rows_persist(
        &self,
        w: &DeviceTensor,
        kernel: KernelId,
        m: caps::MmaKernel,
        (xh, xa): (&CudaSlice<u16>, &CudaSlice<f32>),
        s: usize,
        y: &mut CudaViewMut<'_, f32>,
        tuning: &Tuning,
    ) -> Result<(), CudaError> {
        let sh = w.shape;
        let shape_err = |what: String| CudaError::Shape {
            format: w.format,
            what,
        };
        let tiles = layout::mma_grid_blocks(w.rows)? as usize;
        let key = self.key_tuned(kernel, Build::GemvMmaPersist(m), s, tuning);
        let f = self.function_of(key.clone())?;
        let threads = 32 * tuning.mma_warps;
        let per_sm = self.blocks_per_sm(&key, &f, threads, 0)?;
        let max_grid = if tuning.mma_persist_grid > 0 {
            tuning.mma_persist_grid
        } else {
            u32::try_from(self.sms)
                .ok()
                .and_then(|n| n.checked_mul(per_sm))
                .ok_or_else(|| shape_err("persistent grid overflows".into()))?
        };
        let kblocks = layout::mma_kblocks(kernel.fmt, m.chunk_bytes, sh.row_bytes as usize);
        let stage = tuning.mma_stage.unwrap_or(32) / m.chunk_bytes;
        let plan = layout::PersistPlan::new(
            tiles,
            kblocks,
            tuning.mma_warps,
            stage.max(1) as usize,
            max_grid,
        );
        if i32::try_from(plan.units).is_err() {
            return Err(shape_err(format!("{} persistent units", plan.units)));
        }
        let cfg = LaunchConfig {
            grid_dim: (plan.grid, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut scratch = self.split.lock().unwrap_or_else(|p| p.into_inner());
        let need = plan
            .max_parts()
            .checked_mul(s)
            .and_then(|v| v.checked_mul(w.rows))
            .ok_or_else(|| shape_err("persistent scratch overflows".into()))?;
        scratch.ensure(&self.stream, need, tiles)?;
        let SplitScratch { partials, counters } = &mut *scratch;
        let pdl = layout::pdl_launch(tuning, plan.grid, self.sms);
        self.launch_rows_scratch(
            &f,
            cfg,
            w,
            (xh, xa),
            y,
            (partials, counters),
            pdl,
            "launching the persistent GEMV",
        )
    }

    /// The launch of the persistent 16-row GEMV build, with its scratch parameters:
    /// programmatic or plain.
    #[allow(clippy::too_many_arguments)]
    fn launch_rows_scratch(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        w: &DeviceTensor,
        (xh, xa): (&CudaSlice<u16>, &CudaSlice<f32>),
        y: &mut CudaViewMut<'_, f32>,
        (partials, counters): (&mut CudaSlice<f32>, &mut CudaSlice<u32>),
        pdl: bool,
        during: &'static str,
    ) -> Result<(), CudaError> {
        let sh = w.shape;
        let st = &self.stream;
        if pdl {
            let (pw, _gw) = w.weights.device_ptr(st);
            let (ps, _gs) = w.scales.device_ptr(st);
            let (px, _gx) = xh.device_ptr(st);
            let (pa, _ga) = xa.device_ptr(st);
            let (py, _gy) = y.device_ptr(st);
            let (pp, _gp) = partials.device_ptr(st);
            let (pc, _gc) = counters.device_ptr(st);
            let (mut pw, mut ps, mut px, mut pa, mut py, mut pp, mut pc) =
                (pw, ps, px, pa, py, pp, pc);
            let (mut rb, mut rows, mut xs, mut scr) =
                (sh.row_bytes, sh.rows, sh.x_stride, sh.sc_row);
            let mut params: [*mut std::ffi::c_void; 11] = [
                (&raw mut pw).cast(),
                (&raw mut ps).cast(),
                (&raw mut px).cast(),
                (&raw mut pa).cast(),
                (&raw mut py).cast(),
                (&raw mut rb).cast(),
                (&raw mut rows).cast(),
                (&raw mut xs).cast(),
                (&raw mut scr).cast(),
                (&raw mut pp).cast(),
                (&raw mut pc).cast(),
            ];
            // SAFETY: `params` point at locals of exactly gemv.cu's gemv_mma_s<S> parameter
            // types under -DTS_MMA_PERSIST (u8*, u8*, u16*, f32*, f32*, i64, i32, i32, i32,
            // f32*, u32*), alive across the call; the buffers are those `launch_rows`
            // documents, plus `partials` (at least the persistent plan's `max_parts` x S x
            // rows floats) and `counters` (one zeroed word
            // per 16-row tile, reset by each launch's last block of the tile), grown by the
            // callers; the kernel waits (`griddepcontrol.wait`) before it touches y, the
            // activations or the scratch; the device-pointer guards outlive the enqueue.
            unsafe { self.launch_pdl(f, cfg, &mut params) }.map_err(CudaError::driver(during))
        } else {
            let mut b = st.launch_builder(f);
            b.arg(&w.weights)
                .arg(&w.scales)
                .arg(xh)
                .arg(xa)
                .arg(y)
                .arg(&sh.row_bytes)
                .arg(&sh.rows)
                .arg(&sh.x_stride)
                .arg(&sh.sc_row)
                .arg(partials)
                .arg(counters);
            // SAFETY: the same parameter list and buffers as the programmatic launch above.
            unsafe { b.launch(cfg) }.map_err(CudaError::driver(during))?;
            Ok(())
        }
    }

    /// [`CudaBackend::launch_rows`]'s launch with programmatic dependent launch
    /// (`cuLaunchKernelEx` with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`):
    /// the kernel (built with `-DTS_PDL`) may start while the stream's previous kernel
    /// runs, loads its first weight stages, and waits for that kernel (`griddepcontrol.wait`)
    /// before it reads the activations or writes `y`. It lets the next kernel launch at
    /// once (`griddepcontrol.launch_dependents`); kernels launched without the attribute
    /// still wait for its completion.
    fn launch_rows_pdl(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        w: &DeviceTensor,
        (xh, xa): (&CudaSlice<u16>, &CudaSlice<f32>),
        y: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), CudaError> {
        let sh = w.shape;
        let st = &self.stream;
        let (pw, _gw) = w.weights.device_ptr(st);
        let (ps, _gs) = w.scales.device_ptr(st);
        let (px, _gx) = xh.device_ptr(st);
        let (pa, _ga) = xa.device_ptr(st);
        let (py, _gy) = y.device_ptr(st);
        let (mut pw, mut ps, mut px, mut pa, mut py) = (pw, ps, px, pa, py);
        let (mut rb, mut rows, mut xs, mut scr) = (sh.row_bytes, sh.rows, sh.x_stride, sh.sc_row);
        let mut params: [*mut std::ffi::c_void; 9] = [
            (&raw mut pw).cast(),
            (&raw mut ps).cast(),
            (&raw mut px).cast(),
            (&raw mut pa).cast(),
            (&raw mut py).cast(),
            (&raw mut rb).cast(),
            (&raw mut rows).cast(),
            (&raw mut xs).cast(),
            (&raw mut scr).cast(),
        ];
        // SAFETY: `params` point at locals of exactly gemv.cu's gemv_mma_s<S> parameter types
        // (u8*, u8*, u16*, f32*, f32*, i64, i32, i32, i32: device pointers are 64-bit
        // CUdeviceptr values), alive across the call; the buffers are those `launch_rows`
        // documents (sizes checked by its callers), kept alive past the enqueue by the
        // device-pointer guards; `f` is a loaded kernel of this context.
        unsafe { self.launch_pdl(f, cfg, &mut params) }.map_err(CudaError::driver(
            "launching the GEMV (programmatic dependent launch)",
        ))
    }

    /// `cuLaunchKernelEx` of `f` on the backend's stream with
    /// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` (gemv.cu `pdl_wait`).
    ///
    /// # Safety
    /// `params` must point at one value of each of `f`'s parameter types, in order, valid
    /// for the kernel's whole run as far as they are device pointers (the driver copies the
    /// values themselves), and `f` must wait (`griddepcontrol.wait`) before it touches
    /// anything an earlier kernel of the stream may write.
    unsafe fn launch_pdl(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<(), cudarc::driver::DriverError> {
        // SAFETY: as this function's caller guarantees.
        unsafe { self.launch_ex(f, cfg, params, true) }
    }

    /// `cuLaunchKernelEx` of `f` on the backend's stream, with
    /// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` when `pdl`.
    ///
    /// # Safety
    /// As [`CudaBackend::launch_pdl`] (a plain launch needs no wait in `f`).
    unsafe fn launch_ex(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        params: &mut [*mut std::ffi::c_void],
        pdl: bool,
    ) -> Result<(), cudarc::driver::DriverError> {
        use cudarc::driver::sys;
        // SAFETY: CUlaunchAttribute is a plain C struct (an id and a union of C values), for
        // which all-zero bytes are a valid value; the id and the one union field read for it
        // are set below.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let lc = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &raw mut attr,
            numAttrs: u32::from(pdl),
        };
        self.ctx.bind_to_thread()?;
        // SAFETY: `lc` and `attr` outlive the call; `params` as the caller guarantees.
        unsafe {
            sys::cuLaunchKernelEx(
                &raw const lc,
                f.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
    }

    /// The split-K tile GEMV ([`Build::GemvTiles`]): blocks of 32 `tile_warps` rows, the
    /// row's stages split over gridDim.z so the launch fills the device
    /// ([`layout::tile_splits`]); the kernel reduces the splits itself (its last block per
    /// row block), so `y` is written once per output, in one launch.
    #[allow(clippy::too_many_arguments)]
    fn launch_tiles(
        &self,
        w: &DeviceTensor,
        kernel: KernelId,
        m: caps::MmaKernel,
        (l, xg, xa): (&GemmLayout, &CudaSlice<u16>, &CudaSlice<f32>),
        s: usize,
        y: &mut CudaViewMut<'_, f32>,
        tuning: &Tuning,
    ) -> Result<(), CudaError> {
        let key = self.key_tuned(
            kernel,
            Build::GemvTiles {
                mma: m,
                nt: l.nt as u32,
            },
            0,
            tuning,
        );
        let f = self.function_of(key)?;
        let sh = w.shape;
        let rows_per_block = 32 * tuning.tile_warps as usize;
        let gx = w.rows.div_ceil(rows_per_block);
        let stages = layout::tile_stages(kernel.fmt, m.chunk_bytes, sh.row_bytes as usize);
        let splits = layout::tile_splits(
            gx,
            stages,
            self.sms * tuning.tile_blocks_per_sm as usize,
            tuning.tile_min_stages as usize,
        );
        let shape_err = |what: String| CudaError::Shape {
            format: w.format,
            what,
        };
        let small = |v: usize, what: &str| {
            i32::try_from(v)
                .map_err(|_| shape_err(format!("{what} = {v} exceeds the kernel's 32-bit index")))
        };
        let (s_arg, tiles_arg, padded_arg) = (
            small(s, "S")?,
            small(l.tiles(s), "column tiles")?,
            small(l.padded(s), "padded S")?,
        );
        let gx32 = u32::try_from(gx).map_err(|_| shape_err(format!("{gx} row blocks")))?;
        let shared = l.shared_bytes(tuning.gemm_stages as usize);
        let cfg = LaunchConfig {
            grid_dim: (gx32, 1, splits as u32),
            block_dim: (rows_per_block as u32, 1, 1),
            shared_mem_bytes: u32::try_from(shared)
                .map_err(|_| shape_err(format!("shared memory {shared}")))?,
        };
        let mut scratch = self.split.lock().unwrap_or_else(|p| p.into_inner());
        let need = splits
            .checked_mul(s)
            .and_then(|v| v.checked_mul(w.rows))
            .ok_or_else(|| shape_err("split-K scratch overflows".into()))?;
        scratch.ensure(&self.stream, need, gx)?;
        let SplitScratch { partials, counters } = &mut *scratch;
        let mut b = self.stream.launch_builder(&f);
        b.arg(&w.weights)
            .arg(&w.scales)
            .arg(xg)
            .arg(xa)
            .arg(y)
            .arg(&sh.row_bytes)
            .arg(&sh.rows)
            .arg(&s_arg)
            .arg(&sh.x_stride)
            .arg(&sh.sc_row)
            .arg(&tiles_arg)
            .arg(&padded_arg)
            .arg(partials)
            .arg(counters);
        // SAFETY: the argument list matches gemv.cu's gemm_p<P> (u8*, u8*, u8*, f32*, f32*,
        // i64, i32, i32, i32, i32, i32, i32, f32*, u32*). `xg` / `xa` are
        // layout::gemm_activations (or tile_prep's twin) of this tensor's stride with the
        // layout the build was compiled for (nt = l.nt, two parts), gridDim.y = 1 = tiles / nt; `y` holds S * rows
        // floats (checked by the caller); `partials` holds splits * S * rows floats and
        // `counters` one zeroed word per row block (grown above; each launch's last block
        // per row block resets its word); `mma_for` admitted only rows of whole k-blocks;
        // the shared memory is below the 48 KB default (at most 4 tiles x 8 stages x 2 KB).
        unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching the tile GEMV"))?;
        Ok(())
    }

    /// The CUDA-core GEMV kernel of `kernel` over `x` ([s, x_stride] f32) into `y` ([s, O]).
    fn launch_cuda_cores(
        &self,
        w: &DeviceTensor,
        kernel: KernelId,
        x: &CudaView<'_, f32>,
        s: usize,
        y: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), CudaError> {
        let sh = w.shape;
        let need_x = s.checked_mul(sh.x_stride as usize);
        let need_y = s.checked_mul(w.rows);
        if need_x.is_none_or(|n| x.len() < n) || need_y.is_none_or(|n| y.len() < n) {
            return Err(CudaError::Shape {
                format: w.format,
                what: format!(
                    "CUDA-core launch at S={s}: {} activations, {} outputs",
                    x.len(),
                    y.len()
                ),
            });
        }
        let f = self.function(kernel, Build::Gemv, s)?;
        let cfg = LaunchConfig {
            grid_dim: (layout::grid_blocks(w.rows, s)?, 1, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&f);
        b.arg(&w.weights)
            .arg(&w.scales)
            .arg(x)
            .arg(y)
            .arg(&sh.row_bytes)
            .arg(&sh.rows)
            .arg(&sh.cols)
            .arg(&sh.x_stride)
            .arg(&sh.sc_row);
        // SAFETY: the argument list matches gemv.cu's kernel signature (u8*, u8*, f32*, f32*,
        // i64, i32, i32, i32, i32); the buffers hold what the kernel reads: `weights` and
        // `scales` the registry's byte counts for [rows, cols] (checked by QTensor), `x`
        // S * x_stride floats, `y` at least S * rows floats (both checked above), and the
        // kernel guards every row index against `rows` and every byte against `row_bytes`.
        unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching the GEMV"))?;
        Ok(())
    }

    /// Enqueues y[S, O] = x . W^T with `x` already on the device in the format's stored
    /// domain: [s, [`DeviceTensor::x_stride`]] floats, rotated for rotated formats, zero in
    /// the padding. No host copy and no synchronisation: the engine's resident decode path
    /// chains these launches on the backend's stream.
    pub fn gemv_launch_resident(
        &self,
        w: &DeviceTensor,
        x: &CudaView<'_, f32>,
        s: usize,
        y: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), CudaError> {
        self.gemv_launch_resident_tuned(w, x, s, y, &self.tuning)
    }

    /// [`CudaBackend::gemv_launch_resident`] with `tuning`'s kernels and launches instead of
    /// the backend's (benchmarks; the result is the same).
    pub fn gemv_launch_resident_tuned(
        &self,
        w: &DeviceTensor,
        x: &CudaView<'_, f32>,
        s: usize,
        y: &mut CudaViewMut<'_, f32>,
        tuning: &Tuning,
    ) -> Result<(), CudaError> {
        tuning.check().map_err(|what| CudaError::Input { what })?;
        let cap = caps::lookup(Op::Gemv, w.format, s)?;
        match cap.mma_for(w.shape.row_bytes as usize) {
            Some(m) => {
                let xs = w.shape.x_stride as usize;
                if s.checked_mul(xs).is_none_or(|n| x.len() < n) {
                    return Err(CudaError::Shape {
                        format: w.format,
                        what: format!("resident launch at S={s}: {} activations", x.len()),
                    });
                }
                let tiles = tiles_at(cap, tuning, s);
                let (px, _gx) = x.device_ptr(&self.stream);
                let src = PrepSource::Plain(px);
                self.launch_resident_mma(w, cap.kernel, m, tiles, src, s, y, tuning)
            }
            None => self.launch_cuda_cores(w, cap.kernel, x, s, y),
        }
    }

    /// The resident tensor-core GEMV: `tile_prep` splits `x` on the device into the layout
    /// the chosen kernel reads (the split-K tile GEMV's with `tiles`, else the 16-row
    /// GEMV's), into a buffer kept per layout, then that kernel runs; two launches, no host
    /// work. With a fused `src` (S = 1, the 16-row layout) the split computes the engine's
    /// RMSNorm on the way, in the same launch.
    #[allow(clippy::too_many_arguments)]
    fn launch_resident_mma(
        &self,
        w: &DeviceTensor,
        kernel: KernelId,
        m: caps::MmaKernel,
        tiles_kernel: bool,
        src: PrepSource,
        s: usize,
        y: &mut CudaViewMut<'_, f32>,
        tuning: &Tuning,
    ) -> Result<(), CudaError> {
        let xs = w.shape.x_stride as usize;
        let shape_err = |what: String| CudaError::Shape {
            format: w.format,
            what,
        };
        if s.checked_mul(w.rows).is_none_or(|n| y.len() < n) {
            return Err(shape_err(format!(
                "resident launch at S={s}: {} outputs",
                y.len()
            )));
        }
        if !matches!(src, PrepSource::Plain(_)) && (s != 1 || tiles_kernel) {
            return Err(shape_err(format!(
                "a fused prologue runs at S = 1 on the 16-row layout (S = {s}, tiles: {tiles_kernel})"
            )));
        }
        let nibbles = caps::nibble_codes(kernel.fmt);
        let l = layout::gemv_tiles(m.chunk_bytes, nibbles, s);
        // The 16-row layout: 2S rows of halves, S activations (no padding); keyed nt = 0.
        let (tiles, sp, key_nt) = if tiles_kernel {
            (l.tiles(s), l.padded(s), l.nt)
        } else {
            (0, s, 0)
        };
        let halves = if tiles_kernel {
            tiles * 8 * xs
        } else {
            2 * s * xs
        };
        // Tile layout: [sp] 1/p, then [sp, segs] sums; 16-row layout: [S, segs] 1/p of each
        // segment, then [S, segs] sums.
        let segs = xs / layout::MMA_SUM_SEGMENT;
        let aux = if tiles_kernel {
            sp + sp * segs
        } else {
            2 * s * segs
        };
        let mut cache = self.prep.lock().unwrap_or_else(|p| p.into_inner());
        let entry = match cache.entry((m.chunk_bytes, nibbles, key_nt, xs)) {
            // A buffer of this layout from a smaller S is too small for this one.
            std::collections::hash_map::Entry::Occupied(e)
                if e.get().0.len() >= halves && e.get().1.len() >= aux =>
            {
                e.into_mut()
            }
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let alloc = CudaError::driver("allocating tile activations");
                let xg = self.stream.alloc_zeros::<u16>(halves).map_err(alloc)?;
                let xa = self
                    .stream
                    .alloc_zeros::<f32>(aux)
                    .map_err(CudaError::driver("allocating tile activations"))?;
                e.insert((xg, xa));
                e.into_mut()
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                let alloc = CudaError::driver("allocating tile activations");
                let xg = self.stream.alloc_zeros::<u16>(halves).map_err(alloc)?;
                let xa = self
                    .stream
                    .alloc_zeros::<f32>(aux)
                    .map_err(CudaError::driver("allocating tile activations"))?;
                v.insert((xg, xa))
            }
        };
        let prep = self.function_of(self.key_tuned(
            KernelId { fmt: 0, group: 0 },
            Build::TilePrep {
                chunk_bytes: m.chunk_bytes,
                nibbles,
                rows: !tiles_kernel,
                input: src.input(),
            },
            0,
            tuning,
        ))?;
        let small = |v: usize, what: &str| {
            i32::try_from(v)
                .map_err(|_| shape_err(format!("{what} = {v} exceeds the kernel's 32-bit index")))
        };
        let (s_arg, xs_arg, tiles_arg, sp_arg) = (
            small(s, "S")?,
            small(xs, "x stride")?,
            small(tiles, "column tiles")?,
            small(sp, "padded S")?,
        );
        // tile_prep: blocks of 2048 columns (gemv.cu TS_PREP_COLS) per activation row;
        // norm_prep: blocks of 8 x PREP_FUSED_THREADS columns, one row.
        let cfg = match src {
            PrepSource::Plain(_) => LaunchConfig {
                grid_dim: (
                    small(xs.div_ceil(layout::PREP_COLS), "column blocks")? as u32,
                    sp as u32,
                    1,
                ),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            },
            PrepSource::Norm { .. } => LaunchConfig {
                grid_dim: (
                    small(xs.div_ceil(8 * layout::PREP_FUSED_THREADS), "column blocks")? as u32,
                    1,
                    1,
                ),
                block_dim: (layout::PREP_FUSED_THREADS as u32, 1, 1),
                shared_mem_bytes: 0,
            },
        };
        let (xg, xa) = (&mut entry.0, &mut entry.1);
        let st = &self.stream;
        let (pg, _gg) = xg.device_ptr(st);
        let (pa, _ga) = xa.device_ptr(st);
        let mut args: Vec<Param> = Vec::with_capacity(10);
        match src {
            PrepSource::Plain(px) => args.extend([
                Param::Ptr(px),
                Param::Ptr(pg),
                Param::Ptr(pa),
                Param::I32(s_arg),
                Param::I32(xs_arg),
                Param::I32(tiles_arg),
                Param::I32(sp_arg),
            ]),
            PrepSource::Norm {
                src,
                d,
                weight,
                dst,
                n,
                eps,
            } => args.extend([
                Param::Ptr(src),
                Param::Ptr(d),
                Param::Ptr(weight),
                Param::Ptr(dst),
                Param::I32(n),
                Param::F32(eps),
                Param::Ptr(pg),
                Param::Ptr(pa),
                Param::I32(xs_arg),
                Param::I32(tiles_arg),
            ]),
        }
        let mut params: Vec<*mut std::ffi::c_void> = args.iter_mut().map(Param::address).collect();
        // SAFETY: `args` holds one value of each parameter of the build's kernel, in order
        // (gemv.cu tile_prep: f32*, u16*, f32*, i32, i32, i32, i32; norm_prep: f32*, f32*
        // (0: none), f32*, f32*, i32, f32, u16*, f32*, i32, i32; device pointers as 64-bit
        // CUdeviceptr values) and outlives the call. The input pointers address what
        // `PrepSource` documents, checked by the public entries that made it (tile_prep
        // reads S x xs floats, block s < S row s only; norm_prep reads n floats of src, d
        // and weight and writes n of dst); `xg` holds at least tiles * 8 * xs halves (tile
        // layout) or 2 S xs (16-row layout), and `xa` sp + sp * xs / 128 floats (tile
        // layout) or 2 S xs / 128 (16-row layout), exactly
        // what the build's offsets and sums index for s < sp (sized or re-allocated above).
        // Built with -DTS_PDL when `tuning.pdl` (the key carries `tuning`), each of the two
        // waits for the previous kernel before any access, which the programmatic launch
        // needs.
        unsafe { self.launch_ex(&prep, cfg, &mut params, tuning.pdl) }.map_err(
            CudaError::driver(if tuning.pdl {
                "launching the activation split (programmatic dependent launch)"
            } else {
                "launching the activation split"
            }),
        )?;
        if tiles_kernel {
            self.launch_tiles(w, kernel, m, (&l, xg, xa), s, y, tuning)
        } else {
            self.launch_rows(w, kernel, m, (xg, xa), s, y, tuning)
        }
    }

    /// Whether an S = 1 resident launch of `w` splits its activations on the device into the
    /// 16-row GEMV's layout: then [`CudaBackend::gemv_launch_resident_norm`] takes it (the
    /// RMSNorm computed inside the split, one launch fewer); otherwise it refuses and the
    /// caller runs the norm as its own kernel.
    /// Rotated formats never fuse: their GEMV reads activations in the rotated domain,
    /// which the fused split does not produce.
    pub fn resident_prologue_fusable(&self, w: &DeviceTensor) -> bool {
        self.fused_kernel(w).is_some()
    }

    /// The capability row and 16-row kernel an S = 1 fused-prologue launch of `w` runs,
    /// or None where [`CudaBackend::resident_prologue_fusable`] is false.
    pub(crate) fn fused_kernel(
        &self,
        w: &DeviceTensor,
    ) -> Option<(&'static caps::Capability, caps::MmaKernel)> {
        if w.format.spec().rotation != quant_core::Rotation::None {
            return None;
        }
        let cap = caps::lookup(Op::Gemv, w.format, 1).ok()?;
        let m = cap.mma_for(w.shape.row_bytes as usize)?;
        (!tiles_at(cap, &self.tuning, 1)).then_some((cap, m))
    }

    /// The fused launch of a prologue (S = 1), after the caller checked its buffers;
    /// refuses tensors [`CudaBackend::resident_prologue_fusable`] refuses.
    fn launch_fused(
        &self,
        w: &DeviceTensor,
        src: PrepSource,
        y: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), CudaError> {
        let (cap, m) = self.fused_kernel(w).ok_or_else(|| CudaError::Shape {
            format: w.format,
            what: "a fused prologue needs the 16-row tensor-core GEMV at S = 1 \
                   (resident_prologue_fusable is false)"
                .to_string(),
        })?;
        self.launch_resident_mma(w, cap.kernel, m, false, src, 1, y, &self.tuning)
    }

    /// y = W . x at S = 1 with x = weight * v / sqrt(mean(v^2) + eps) over `n` columns (the
    /// engine's RMSNorm), v = src + d, or v = src without `d`, computed inside the GEMV's
    /// activation split (one launch fewer than the norm and the GEMV apart). With `d` the
    /// sum v is also stored into `dst` (the residual stream's next buffer: it must not be
    /// src's or d's memory, which every block of the launch reads whole). `n` is at most
    /// the tensor's x stride (columns past it are zero) and every buffer holds `n` floats.
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_launch_resident_norm(
        &self,
        w: &DeviceTensor,
        src: &CudaView<'_, f32>,
        d: Option<&CudaView<'_, f32>>,
        weight: &CudaView<'_, f32>,
        dst: &mut CudaViewMut<'_, f32>,
        n: usize,
        eps: f32,
        y: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), CudaError> {
        let xs = w.shape.x_stride as usize;
        let short = [
            ("residual", src.len()),
            ("norm weight", weight.len()),
            ("update", d.map_or(n, |v| v.len())),
            ("next residual", if d.is_some() { dst.len() } else { n }),
        ]
        .into_iter()
        .find(|&(_, len)| len < n);
        if n == 0 || n > xs || short.is_some() {
            return Err(CudaError::Shape {
                format: w.format,
                what: format!(
                    "fused RMSNorm over {n} columns (x stride {xs}){}",
                    short.map_or(String::new(), |(what, len)| format!(
                        ": the {what} holds {len} floats"
                    ))
                ),
            });
        }
        let n_arg = i32::try_from(n).map_err(|_| CudaError::Shape {
            format: w.format,
            what: format!("fused RMSNorm over {n} columns exceeds 32 bits"),
        })?;
        let st = &self.stream;
        let (ps, _gs) = src.device_ptr(st);
        let (pw, _gw) = weight.device_ptr(st);
        let (pd, _gd) = match d {
            Some(v) => {
                let (p, g) = v.device_ptr(st);
                (p, Some(g))
            }
            None => (0, None),
        };
        let (pt, _gt) = dst.device_ptr_mut(st);
        self.launch_fused(
            w,
            PrepSource::Norm {
                src: ps,
                d: pd,
                weight: pw,
                dst: if d.is_some() { pt } else { 0 },
                n: n_arg,
                eps,
            },
            y,
        )
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

    fn read_back(&self, y: &CudaSlice<f32>, during: &'static str) -> Result<Vec<f32>, CudaError> {
        let out = self
            .stream
            .clone_dtoh(y)
            .map_err(CudaError::driver("reading the output"))?;
        self.stream
            .synchronize()
            .map_err(CudaError::driver(during))?;
        Ok(out)
    }

    // ---- GEMM ----------------------------------------------------------------------------

    /// Rotates, pads, splits and uploads activations `x` ([s, I], logical domain) for GEMMs
    /// with `w` at `precision`, in the layout the kernel that will serve the shape reads.
    pub fn upload_gemm_activations(
        &self,
        w: &DeviceTensor,
        x: &[f32],
        s: usize,
        precision: GemmPrecision,
    ) -> Result<DeviceGemmActivations, CudaError> {
        let cap = caps::lookup(Op::Gemm, w.format, s)?;
        let x_stride = w.shape.x_stride as usize;
        let host = layout::prepare_activations(w.format, w.cols, w.rotation_seed, x, s, x_stride)?;
        let up = |what: &'static str| CudaError::driver(what);
        let input = match cap.mma_for(w.shape.row_bytes as usize) {
            Some(m) => {
                let l = self.gemm_layout(cap.kernel, m.chunk_bytes, precision.parts());
                let (halves, aux) = layout::gemm_activations(&host, s, x_stride, &l)?;
                GemmInput::Tiles {
                    layout: l,
                    tiles: l.tiles(s),
                    padded: l.padded(s),
                    xg: self
                        .stream
                        .clone_htod(&halves)
                        .map_err(up("uploading activations"))?,
                    xa: self
                        .stream
                        .clone_htod(&aux)
                        .map_err(up("uploading activations"))?,
                }
            }
            None => GemmInput::Rows {
                x: self
                    .stream
                    .clone_htod(&host)
                    .map_err(up("uploading activations"))?,
            },
        };
        Ok(DeviceGemmActivations {
            s,
            cols: w.cols,
            format: w.format,
            rotation_seed: w.rotation_seed,
            precision,
            input,
        })
    }

    /// Enqueues y[S, O] = x . W^T for S >= 17 (asynchronous; the caller syncs): the
    /// tensor-core GEMM where the rows are whole k-blocks, else the CUDA-core GEMV kernel
    /// in batches of 16.
    pub fn gemm_launch(
        &self,
        w: &DeviceTensor,
        x: &DeviceGemmActivations,
        y: &mut CudaSlice<f32>,
    ) -> Result<(), CudaError> {
        let cap = caps::lookup(Op::Gemm, w.format, x.s)?;
        check_prepared_for(w, x.format, x.cols, x.rotation_seed)?;
        let n_out = x.s.checked_mul(w.rows).ok_or_else(|| CudaError::Shape {
            format: w.format,
            what: format!("S={} x O={} overflows", x.s, w.rows),
        })?;
        if y.len() < n_out {
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
        match &x.input {
            GemmInput::Tiles {
                layout: l,
                tiles,
                padded,
                xg,
                xa,
            } => {
                let Some(mma) = cap.mma_for(sh.row_bytes as usize) else {
                    return Err(CudaError::Shape {
                        format: w.format,
                        what: "tensor-core activations for a shape without the tensor-core GEMM"
                            .into(),
                    });
                };
                if l.nt != self.tuning.gemm_nt(l.parts as u32) as usize {
                    return Err(CudaError::Shape {
                        format: w.format,
                        what: "activations prepared by a backend with another GEMM tiling".into(),
                    });
                }
                let dequant = x.precision.dequantizes(cap.kernel.fmt);
                let key = self.key(cap.kernel, x.precision.gemm_build(mma, cap.kernel.fmt), 0);
                let f = self.function_of(key.clone())?;
                let mut row_pow = w.row_pow.lock().unwrap_or_else(|p| p.into_inner());
                if dequant && row_pow.is_none() {
                    *row_pow = Some(self.row_powers(w, cap.kernel, mma)?);
                }
                let warps = self.tuning.gemm_warps;
                let (gx, gy) = layout::gemm_grid(w.rows, *tiles, l.nt, warps)?;
                let shared = l.shared_bytes(self.tuning.gemm_stages as usize);
                let stages =
                    layout::tile_stages(cap.kernel.fmt, mma.chunk_bytes, sh.row_bytes as usize);
                let splits = match self.tuning.gemm_split_k {
                    Some(n) => layout::whole_splits(stages, n as usize),
                    None => {
                        let per_sm = self.blocks_per_sm(&key, &f, 32 * warps, shared)?;
                        layout::gemm_splits(
                            gx as usize * gy as usize,
                            self.sms * per_sm as usize,
                            stages,
                        )
                    }
                };
                let cfg = LaunchConfig {
                    grid_dim: (gx, gy, splits as u32),
                    block_dim: (32 * warps, 1, 1),
                    shared_mem_bytes: u32::try_from(shared).map_err(|_| CudaError::Input {
                        what: format!("GEMM shared memory {shared} overflows"),
                    })?,
                };
                let small = |v: usize, what: &str| {
                    i32::try_from(v).map_err(|_| CudaError::Shape {
                        format: w.format,
                        what: format!("{what} = {v} exceeds the kernel's 32-bit index"),
                    })
                };
                let (s_arg, tiles_arg, padded_arg) = (
                    small(x.s, "S")?,
                    small(*tiles, "column tiles")?,
                    small(*padded, "padded S")?,
                );
                let mut b = self.stream.launch_builder(&f);
                b.arg(&w.weights)
                    .arg(&w.scales)
                    .arg(xg)
                    .arg(xa)
                    .arg(y)
                    .arg(&sh.row_bytes)
                    .arg(&sh.rows)
                    .arg(&s_arg)
                    .arg(&sh.x_stride)
                    .arg(&sh.sc_row)
                    .arg(&tiles_arg)
                    .arg(&padded_arg);
                // With one split the kernel writes `y` itself and never touches the scratch;
                // with z, each split's partials go to [z, S, O] and the last of a block's
                // splits to arrive (one counter per (row, activation) block) adds them.
                let mut scratch = self.split.lock().unwrap_or_else(|p| p.into_inner());
                if splits > 1 {
                    let need = splits.checked_mul(n_out).ok_or_else(|| CudaError::Shape {
                        format: w.format,
                        what: "split-K scratch overflows".into(),
                    })?;
                    scratch.ensure(&self.stream, need, gx as usize * gy as usize)?;
                }
                let SplitScratch { partials, counters } = &mut *scratch;
                b.arg(partials).arg(counters);
                if let (true, Some(p)) = (dequant, row_pow.as_ref()) {
                    b.arg(p);
                }
                // SAFETY: the argument list matches gemv.cu's gemm_p<P> (u8*, u8*, u8*, f32*,
                // f32*, i64, i32, i32, i32, i32, i32, i32, f32*, u32*, and with TS_DEQ f32*:
                // `row_pow`, one float a row, written above; the scratch pair unused
                // with one split, else grown above to splits * S * O floats and one zeroed
                // counter per (row, activation) block, each reset by its block's last
                // split). `xg` holds tiles * 8 * x_stride halves and `xa` padded * (1 +
                // x_stride / MMA_SUM_SEGMENT) floats for this tensor's stride
                // (layout::gemm_activations with the same layout the kernel was built for:
                // checked above); the grid covers tiles / nt column blocks exactly; `y`
                // holds S * rows floats (checked above) and the kernel writes only s < S,
                // row < O; `mma_for` admitted only rows made of whole k-blocks, so every
                // weight load stays inside its row; the dynamic shared memory is what the
                // function's attribute was raised to.
                unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching the GEMM"))?;
            }
            GemmInput::Rows { x: xr } => {
                let xs = sh.x_stride as usize;
                let mut k = 0;
                while k < x.s {
                    let n = (x.s - k).min(16);
                    let xv = xr.slice(k * xs..(k + n) * xs);
                    let mut yv = y.slice_mut(k * w.rows..(k + n) * w.rows);
                    self.launch_cuda_cores(w, cap.kernel, &xv, n, &mut yv)?;
                    k += n;
                }
            }
        }
        Ok(())
    }

    /// `w`'s power of two a row for the dequantized GEMM (gemv.cu `gemm_row_pow`), computed
    /// on the device from its scales.
    fn row_powers(
        &self,
        w: &DeviceTensor,
        kernel: KernelId,
        mma: caps::MmaKernel,
    ) -> Result<CudaSlice<f32>, CudaError> {
        let f = self.function(kernel, Build::GemmRowPow { mma }, 0)?;
        let mut out = self
            .stream
            .alloc_zeros::<f32>(w.rows.max(1))
            .map_err(CudaError::driver("allocating the GEMM's row powers"))?;
        let sh = w.shape;
        let blocks = u32::try_from(w.rows.div_ceil(256)).map_err(|_| CudaError::Shape {
            format: w.format,
            what: format!("{} rows overflow the row-power grid", w.rows),
        })?;
        let cfg = LaunchConfig {
            grid_dim: (blocks.max(1), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&f);
        b.arg(&w.weights)
            .arg(&w.scales)
            .arg(&mut out)
            .arg(&sh.row_bytes)
            .arg(&sh.rows)
            .arg(&sh.sc_row);
        // SAFETY: the argument list matches gemv.cu's gemm_row_pow_k (u8*, u8*, f32*, i64,
        // i32, i32); `out` holds one float per row and the kernel writes rows < O only; it
        // reads the scale words of every k-block of each row, which the GEMM itself reads
        // (`mma_for` admitted rows of whole k-blocks).
        unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching the row powers"))?;
        Ok(out)
    }

    /// y[S, O] = x[S, I] . W^T for S >= 17 at the default ([`GemmPrecision::Split`]) precision,
    /// `x` in the logical domain; the output is poisoned before the launch.
    pub fn gemm(&self, w: &DeviceTensor, x: &[f32], s: usize) -> Result<Vec<f32>, CudaError> {
        self.gemm_with(w, x, s, GemmPrecision::Split)
    }

    /// [`CudaBackend::gemm`] at a chosen precision.
    pub fn gemm_with(
        &self,
        w: &DeviceTensor,
        x: &[f32],
        s: usize,
        precision: GemmPrecision,
    ) -> Result<Vec<f32>, CudaError> {
        let xa = self.upload_gemm_activations(w, x, s, precision)?;
        let mut y = self.poisoned_output(w, s)?;
        self.gemm_launch(w, &xa, &mut y)?;
        self.read_back(&y, "waiting for the GEMM")
    }

    // ---- MoE -----------------------------------------------------------------------------

    /// The MoE grouped GEMV: for every (token, expert) pair p of top-k routing,
    /// y[p, :] = W_expert x[token, :], in one launch. `experts` share [O, I] but may each
    /// have their own format, group size and rotation; `x` is [tokens, I] in the logical
    /// domain. Returns y [pairs, O] in the order of `pairs`.
    ///
    /// Pairs are grouped by expert into work items of up to [`layout::MOE_PAIRS`] tokens,
    /// so an expert's weights are read once per item; the kernel switches per item to the
    /// (format, group) kernel of its expert (the CUDA-core GEMV kernels, compiled into one
    /// module for the set of kernels the call needs). Experts with no pairs cost nothing.
    pub fn moe_gemv(
        &self,
        experts: &[&DeviceTensor],
        pairs: &[(usize, usize)],
        x: &[f32],
        tokens: usize,
    ) -> Result<Vec<f32>, CudaError> {
        let input = |what: String| CudaError::Input { what };
        let first = experts
            .first()
            .ok_or_else(|| input("MoE GEMV with no experts".into()))?;
        let (rows, cols) = (first.rows, first.cols);
        if let Some((k, e)) = experts
            .iter()
            .enumerate()
            .find(|(_, e)| e.rows != rows || e.cols != cols)
        {
            return Err(input(format!(
                "expert {k} is [{}, {}], expert 0 [{rows}, {cols}]: experts must share a shape",
                e.rows, e.cols
            )));
        }
        if tokens.checked_mul(cols) != Some(x.len()) {
            return Err(input(format!(
                "activations hold {} values, expected {tokens} tokens x I = {cols}",
                x.len()
            )));
        }
        if let Some(&(t, e)) = pairs
            .iter()
            .find(|&&(t, e)| t >= tokens || e >= experts.len())
        {
            return Err(input(format!(
                "pair (token {t}, expert {e}) outside {tokens} tokens, {} experts",
                experts.len()
            )));
        }
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
        // The (format, group) kernel of each expert, and the call's distinct kernels.
        let kernels: Vec<KernelId> = experts
            .iter()
            .map(|e| caps::lookup(Op::Gemv, e.format, 1).map(|c| c.kernel))
            .collect::<Result<_, _>>()?;
        let mut variants = kernels.clone();
        variants.sort();
        variants.dedup();
        let variant_of = |k: &KernelId| variants.iter().position(|v| v == k).unwrap_or(0);

        // Work items: per expert, its pairs in chunks of MOE_PAIRS.
        let mut items: Vec<i32> = Vec::new();
        let mut item_rows: Vec<(usize, Vec<usize>)> = Vec::new();
        let to_i32 = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| input(format!("{what} {v} exceeds 32 bits")))
        };
        for e in 0..experts.len() {
            let mine: Vec<usize> = (0..pairs.len()).filter(|&p| pairs[p].1 == e).collect();
            for chunk in mine.chunks(layout::MOE_PAIRS) {
                items.push(to_i32(e, "expert")?);
                for k in 0..7 {
                    items.push(match chunk.get(k) {
                        Some(&p) => to_i32(p, "pair")?,
                        None => -1,
                    });
                }
                item_rows.push((e, chunk.to_vec()));
            }
        }
        let n_items = item_rows.len();
        if n_items > 65535 {
            return Err(input(format!(
                "{} pairs need {n_items} work items; one launch takes at most 65535",
                pairs.len()
            )));
        }
        // Each item's activations in its expert's stored domain, zero rows for empty slots.
        let xs = first.shape.x_stride as usize;
        let per_item = layout::MOE_PAIRS * xs;
        let mut xh = vec![0f32; n_items * per_item];
        for (k, (e, chunk)) in item_rows.iter().enumerate() {
            let ex = experts[*e];
            for (slot, &p) in chunk.iter().enumerate() {
                let t = pairs[p].0;
                let row = layout::prepare_activations(
                    ex.format,
                    cols,
                    ex.rotation_seed,
                    &x[t * cols..(t + 1) * cols],
                    1,
                    xs,
                )?;
                let at = k * per_item + slot * xs;
                xh[at..at + xs].copy_from_slice(&row);
            }
        }
        // Per-expert descriptors: weights, scales, row bytes, (variant << 32) | sc_row.
        let mut desc: Vec<u64> = Vec::with_capacity(4 * experts.len());
        for (e, k) in experts.iter().zip(&kernels) {
            let (wp, _w_sync) = e.weights.device_ptr(&self.stream);
            let (sp, _s_sync) = e.scales.device_ptr(&self.stream);
            desc.push(wp);
            desc.push(sp);
            desc.push(e.shape.row_bytes as u64);
            desc.push(((variant_of(k) as u64) << 32) | (e.shape.sc_row as u32 as u64));
        }
        let f = self.function(
            KernelId { fmt: 0, group: 0 },
            Build::Moe { variants },
            layout::MOE_PAIRS,
        )?;
        let up = CudaError::driver("uploading the MoE work list");
        let d_desc = self.stream.clone_htod(&desc).map_err(up)?;
        let d_items = self
            .stream
            .clone_htod(&items)
            .map_err(CudaError::driver("uploading the MoE work list"))?;
        let d_x = self
            .stream
            .clone_htod(&xh)
            .map_err(CudaError::driver("uploading activations"))?;
        let n_out = pairs
            .len()
            .checked_mul(rows)
            .ok_or_else(|| input(format!("{} pairs x O = {rows} overflows", pairs.len())))?;
        let mut y = self
            .stream
            .clone_htod(&vec![POISON; n_out])
            .map_err(CudaError::driver("allocating the output"))?;
        let sh = first.shape;
        let cfg = LaunchConfig {
            grid_dim: (
                layout::grid_blocks(rows, layout::MOE_PAIRS)?,
                n_items as u32,
                1,
            ),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&f);
        b.arg(&d_desc)
            .arg(&d_items)
            .arg(&d_x)
            .arg(&mut y)
            .arg(&sh.rows)
            .arg(&sh.cols)
            .arg(&sh.x_stride);
        // SAFETY: the argument list matches gemv.cu's moe_gemv (u64*, i32*, f32*, f32*, i32,
        // i32, i32). Every descriptor names a live device tensor of `experts` (borrowed for
        // this call, which synchronizes before returning) with its own row bytes and scale
        // count, and a variant index of the module's TS_MOE_LIST; every item names an
        // expert < experts.len() and pair indices < pairs.len() or -1; `d_x` holds
        // items x MOE_PAIRS x x_stride floats; `y` pairs x O floats. The kernels guard rows
        // against O and bytes against each expert's row bytes.
        unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching the MoE GEMV"))?;
        self.read_back(&y, "waiting for the MoE GEMV")
    }
}
