//! [`WgpuBackend`]: one wgpu adapter and device running the WGSL GEMV kernels.
//!
//! - Pipelines are compiled once per device and (shader file, override constants), in a
//!   cache; shader modules once per file.
//! - Weights are uploaded once, in the container's own layout ([`GpuTensor`]).
//! - Activation, output and readback buffers come from pools keyed by usage and size class
//!   (the next power of two), and go back when a GEMV's result has been read.
//! - Submission is asynchronous: [`WgpuBackend::submit_gemv`] encodes, submits and asks for
//!   the readback mapping with a callback; only [`PendingGemv::wait`] polls the device.
//! - Failures are typed: no adapter, or an adapter without immediates, is
//!   `BackendError::Unavailable { why }`; a shader or pipeline the device rejects is
//!   `BackendError::Device`; a combination outside [`CAPABILITIES`] is `NotImplemented`.

use crate::caps::CAPABILITIES;
use crate::kernels::{self, KernelSpec, Params};
use quant_core::capability::{BackendError, Op, lookup};
use quant_core::{Format, QTensor, QuantError, Rotation};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

const NAME: &str = "wgpu";

/// Whether to reduce with subgroup operations.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Subgroups {
    /// Where the adapter offers subgroup arithmetic (and subgroups of at least 4).
    Auto,
    /// Never: the shared-memory kernels (the path every adapter can run).
    Never,
    /// Always: unavailable where the adapter cannot.
    Require,
}

/// The runtime checks naga adds to the kernels when wgpu compiles them
/// (`wgpu::ShaderRuntimeChecks`). Buffer sizes, shapes, rows a workgroup and S are checked
/// by the host before any dispatch (`Params::new`, [`WgpuBackend::encode_gemv`],
/// `KernelSpec::admits`), so the checks only matter for a kernel bug.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ShaderChecks {
    /// wgpu's default (`create_shader_module`): index clamping (buffers: the driver's
    /// robustBufferAccess2 where Vulkan offers it, else clamped too), loop counters that
    /// bound every loop, guarded integer division.
    All,
    /// Index and buffer bounds checks kept; no loop counters, no division guards: what the
    /// Vulkan tier's SPIR-V carries (kernels-rocm `build/shaders.rs`).
    Bounds,
    /// None of naga's checks (on Vulkan the driver's robustBufferAccess2, which wgpu
    /// enables where offered, still bounds buffer accesses).
    None,
}

/// [`Options::checks`] without `TESSERA_WGPU_CHECKED`.
pub const SHADER_CHECKS_DEFAULT: ShaderChecks = ShaderChecks::Bounds;

impl ShaderChecks {
    /// `TESSERA_WGPU_CHECKED`: `1` / `all` [`ShaderChecks::All`], `bounds`
    /// [`ShaderChecks::Bounds`], `0` / `none` [`ShaderChecks::None`]; unset or anything
    /// else: [`SHADER_CHECKS_DEFAULT`].
    pub fn from_env() -> ShaderChecks {
        match std::env::var("TESSERA_WGPU_CHECKED").as_deref() {
            Ok("1" | "all") => ShaderChecks::All,
            Ok("bounds") => ShaderChecks::Bounds,
            Ok("0" | "none") => ShaderChecks::None,
            _ => SHADER_CHECKS_DEFAULT,
        }
    }

    /// The name the bench and `describe` print.
    pub const fn name(self) -> &'static str {
        match self {
            ShaderChecks::All => "all checks",
            ShaderChecks::Bounds => "bounds checks only",
            ShaderChecks::None => "no shader checks",
        }
    }
}

/// A deliberate defect compiled into every kernel through its `MUTATE` override, so the
/// conformance tests can be shown to fail (docs/WGPU.md).
#[cfg(feature = "mutation-test")]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The two nibbles of every byte swapped (4-bit formats).
    SwapNibbles,
    /// Every group, tile or block scale taken from the next group.
    GroupOffByOne,
    /// Every scale 1% high.
    Scale1Pct,
}

#[cfg(feature = "mutation-test")]
impl Mutation {
    /// The mutation `TESSERA_WGPU_MUTATE` names (swap-nibbles, group-off-by-one,
    /// scale-1pct), if any.
    pub fn from_env() -> Option<Mutation> {
        match std::env::var("TESSERA_WGPU_MUTATE").ok()?.as_str() {
            "swap-nibbles" => Some(Mutation::SwapNibbles),
            "group-off-by-one" => Some(Mutation::GroupOffByOne),
            "scale-1pct" => Some(Mutation::Scale1Pct),
            _ => None,
        }
    }

    /// The shaders' `MUTATE` value.
    pub const fn code(self) -> u32 {
        match self {
            Mutation::SwapNibbles => 1,
            Mutation::GroupOffByOne => 2,
            Mutation::Scale1Pct => 3,
        }
    }
}

/// How to open the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub subgroups: Subgroups,
    /// Only adapters whose name contains this (case-insensitive); `None`: the best one
    /// (discrete, then integrated, virtual, CPU).
    pub adapter: Option<String>,
    /// `MUTATE` for every pipeline (0 = none).
    pub mutate: u32,
    /// The int4 formats at S = 1 take packed int8 activations (`dot4I8Packed`;
    /// `kernels::int8_activations`); `false`: the f32 path everywhere.
    pub int8_activations: bool,
    /// naga's runtime checks in the compiled kernels.
    pub checks: ShaderChecks,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            subgroups: Subgroups::Auto,
            adapter: None,
            mutate: 0,
            int8_activations: true,
            checks: SHADER_CHECKS_DEFAULT,
        }
    }
}

impl Options {
    /// Defaults, changed by the environment: `TESSERA_WGPU_SUBGROUPS` = `never` / `require`
    /// / `auto`, `TESSERA_WGPU_ADAPTER` = a name substring, `TESSERA_WGPU_INT8_X=0` (the f32
    /// path for the int4 formats at S = 1 too), `TESSERA_WGPU_CHECKED`
    /// ([`ShaderChecks::from_env`]), and (with the `mutation-test` feature only)
    /// `TESSERA_WGPU_MUTATE`.
    pub fn from_env() -> Options {
        let mut o = Options::default();
        match std::env::var("TESSERA_WGPU_SUBGROUPS").as_deref() {
            Ok("never") => o.subgroups = Subgroups::Never,
            Ok("require") => o.subgroups = Subgroups::Require,
            _ => {}
        }
        o.int8_activations = std::env::var("TESSERA_WGPU_INT8_X").as_deref() != Ok("0");
        o.checks = ShaderChecks::from_env();
        o.adapter = std::env::var("TESSERA_WGPU_ADAPTER")
            .ok()
            .filter(|s| !s.is_empty());
        #[cfg(feature = "mutation-test")]
        {
            o.mutate = Mutation::from_env().map_or(0, Mutation::code);
        }
        o
    }
}

fn unavailable(why: impl Into<String>) -> BackendError {
    BackendError::Unavailable { why: why.into() }
}

fn device_err(why: impl Into<String>) -> BackendError {
    BackendError::Device {
        backend: NAME,
        why: why.into(),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while a pool or cache was locked leaves it consistent (inserts are atomic).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Weights on the device, in the container's own layout.
pub struct GpuTensor {
    format: Format,
    rows: usize,
    cols: usize,
    rotation_seed: u64,
    weights: wgpu::Buffer,
    scales: wgpu::Buffer,
    weight_bytes: u64,
    scale_bytes: u64,
}

impl GpuTensor {
    pub fn format(&self) -> Format {
        self.format
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// Stored weight bytes (the registry's count, without padding).
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }
    /// Stored sidecar scale bytes.
    pub fn scale_bytes(&self) -> u64 {
        self.scale_bytes
    }
}

/// Buffer kinds the pool keeps apart.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// Activations: storage, written by the queue.
    Input,
    /// Outputs: storage, copied out.
    Output,
    /// Readback: mappable.
    Readback,
}

impl Kind {
    fn usage(self) -> wgpu::BufferUsages {
        match self {
            Kind::Input => wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            Kind::Output => {
                wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST
            }
            Kind::Readback => wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        }
    }
}

/// Free buffers by (kind, size class).
#[derive(Default)]
struct Pool {
    free: HashMap<(Kind, u64), Vec<wgpu::Buffer>>,
}

/// Buffers a pool keeps of one (kind, size class); more are dropped when returned.
const POOL_KEEP: usize = 4;

/// One adapter and device, with its pipeline cache and buffer pools.
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    subgroups: bool,
    timestamps: bool,
    mutate: u32,
    int8_x: bool,
    checks: ShaderChecks,
    /// `Params::reserved0` of the packed int8 path: the layout (`kernels::int8_x_layout`).
    int8_layout: u32,
    layout: wgpu::BindGroupLayout,
    pipeline_layout: wgpu::PipelineLayout,
    modules: Mutex<HashMap<&'static str, wgpu::ShaderModule>>,
    pipelines: Mutex<HashMap<String, wgpu::ComputePipeline>>,
    pool: Mutex<Pool>,
    dummy_scales: wgpu::Buffer,
    /// The first error wgpu reported outside an error scope, if any.
    uncaptured: Arc<Mutex<Option<String>>>,
}

fn device_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    }
}

/// The smallest subgroup the subgroup kernels accept (their reduction holds 32 partials).
const MIN_SUBGROUP: u32 = 4;

impl WgpuBackend {
    /// Opens the backend with [`Options::from_env`].
    pub fn new() -> Result<WgpuBackend, BackendError> {
        Self::with_options(&Options::from_env())
    }

    /// Opens the best adapter that `opts` admits.
    pub fn with_options(opts: &Options) -> Result<WgpuBackend, BackendError> {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        if adapters.is_empty() {
            return Err(unavailable(
                "no wgpu adapter (no Vulkan, Metal or DX12 driver found)",
            ));
        }
        let seen: Vec<String> = adapters
            .iter()
            .map(|a| {
                let i = a.get_info();
                format!("{} ({:?}, {:?})", i.name, i.backend, i.device_type)
            })
            .collect();
        if let Some(want) = &opts.adapter {
            let want = want.to_lowercase();
            adapters.retain(|a| a.get_info().name.to_lowercase().contains(&want));
        }
        adapters.sort_by_key(|a| device_rank(a.get_info().device_type));
        let Some(adapter) = adapters.into_iter().next() else {
            return Err(unavailable(format!(
                "no wgpu adapter matches TESSERA_WGPU_ADAPTER={:?}; found: {}",
                opts.adapter.as_deref().unwrap_or(""),
                seen.join(", ")
            )));
        };
        let info = adapter.get_info();
        let features = adapter.features();
        let limits = adapter.limits();
        if !features.contains(wgpu::Features::IMMEDIATES) {
            return Err(unavailable(format!(
                "adapter {} lacks immediates (push constants)",
                info.name
            )));
        }
        // unpack2x16float (gemv_fp8's S = 1 decode, affine256's packed path): every Vulkan,
        // Metal and DX12 device has it; wgpu grants it on llvmpipe only with shaderFloat16.
        if !adapter
            .get_downlevel_capabilities()
            .flags
            .contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32)
        {
            return Err(unavailable(format!(
                "adapter {} lacks SHADER_F16_IN_F32 (unpack2x16float)",
                info.name
            )));
        }
        if (limits.max_immediate_size as usize) < std::mem::size_of::<Params>() {
            return Err(unavailable(format!(
                "adapter {} offers {} bytes of immediates, the kernels need {}",
                info.name,
                limits.max_immediate_size,
                std::mem::size_of::<Params>()
            )));
        }
        let sg_offered =
            features.contains(wgpu::Features::SUBGROUP) && info.subgroup_min_size >= MIN_SUBGROUP;
        let subgroups = match opts.subgroups {
            Subgroups::Auto => sg_offered,
            Subgroups::Never => false,
            Subgroups::Require if sg_offered => true,
            Subgroups::Require => {
                return Err(unavailable(format!(
                    "adapter {} offers no subgroup arithmetic with subgroups of at least {MIN_SUBGROUP} \
                     (features {}, subgroup sizes {}..{})",
                    info.name,
                    features.contains(wgpu::Features::SUBGROUP),
                    info.subgroup_min_size,
                    info.subgroup_max_size
                )));
            }
        };
        let timestamps = features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let mut required_features = wgpu::Features::IMMEDIATES;
        if subgroups {
            required_features |= wgpu::Features::SUBGROUP;
        }
        if timestamps {
            required_features |= wgpu::Features::TIMESTAMP_QUERY;
            // Lets the bench bracket buffer copies (outside passes) with timestamps.
            required_features |= features & wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
        }
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("tessera"),
            required_features,
            // Everything the adapter offers: large weight buffers need its real limits.
            required_limits: limits,
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| unavailable(format!("adapter {}: request_device: {e}", info.name)))?;
        let uncaptured = Arc::new(Mutex::new(None));
        let sink = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = lock(&sink);
            if slot.is_none() {
                *slot = Some(e.to_string());
            }
        }));
        let storage = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("tessera gemv"),
            entries: &[
                storage(0, true),
                storage(1, true),
                storage(2, true),
                storage(3, false),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tessera gemv"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: std::mem::size_of::<Params>() as u32,
        });
        let dummy_scales = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera no scales"),
            size: kernels::BUFFER_ALIGN as u64,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        Ok(WgpuBackend {
            device,
            queue,
            info,
            subgroups,
            timestamps,
            mutate: opts.mutate,
            int8_x: opts.int8_activations,
            checks: opts.checks,
            int8_layout: kernels::int8_x_layout(),
            layout,
            pipeline_layout,
            modules: Mutex::new(HashMap::new()),
            pipelines: Mutex::new(HashMap::new()),
            pool: Mutex::new(Pool::default()),
            dummy_scales,
            uncaptured,
        })
    }

    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }
    /// Whether the kernels reduce with subgroup operations on this device.
    pub fn uses_subgroups(&self) -> bool {
        self.subgroups
    }
    /// naga's runtime checks in this device's kernels.
    pub fn shader_checks(&self) -> ShaderChecks {
        self.checks
    }
    /// Whether the device was given `Features::TIMESTAMP_QUERY`.
    pub fn has_timestamps(&self) -> bool {
        self.timestamps
    }
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// One line naming the adapter and the reduction path.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {:?}, driver {} {}), {} reduction{}",
            self.info.name,
            self.info.backend,
            self.info.device_type,
            self.info.driver,
            self.info.driver_info,
            if self.subgroups {
                "subgroup"
            } else {
                "shared-memory"
            },
            if self.mutate != 0 {
                format!(", MUTATE={}", self.mutate)
            } else {
                String::new()
            }
        ) + &format!(", {}", self.checks.name())
    }

    fn check_uncaptured(&self) -> Result<(), BackendError> {
        match lock(&self.uncaptured).take() {
            Some(e) => Err(device_err(e)),
            None => Ok(()),
        }
    }

    /// Uploads `t`'s weight and scale bytes as the kernels bind them (zero-padded):
    /// `kernels::weight_binding` and `kernels::scale_binding` (as stored, but for the fp8
    /// rows' NaN flags after the scales and the affine blocks' headers apart).
    pub fn upload(&self, t: &QTensor<'_>) -> Result<GpuTensor, BackendError> {
        let spec = t.format().spec();
        let (rows, cols) = (t.rows(), t.cols());
        // The byte counts a QTensor carries were checked against the registry when it was
        // built; Params::new checks that they fit the kernels' 32-bit indexing.
        Params::new(t.format(), rows, cols, 1)?;
        let weights = self.storage_from(&kernels::weight_binding(t), "tessera weights")?;
        let binding = kernels::scale_binding(t);
        let scales = if binding.is_empty() {
            self.dummy_scales.clone()
        } else {
            self.storage_from(&binding, "tessera scales")?
        };
        self.check_uncaptured()?;
        Ok(GpuTensor {
            format: t.format(),
            rows,
            cols,
            rotation_seed: t.rotation_seed(),
            weights,
            scales,
            weight_bytes: spec.weight_bytes(rows, cols)?,
            scale_bytes: spec.scale_bytes(rows, cols)?,
        })
    }

    /// A new storage buffer holding `bytes`, zero-padded to `kernels::padded_len`.
    fn storage_from(&self, bytes: &[u8], label: &str) -> Result<wgpu::Buffer, BackendError> {
        let size = kernels::padded_len(bytes.len())
            .ok_or_else(|| device_err(format!("{label}: {} bytes overflow", bytes.len())))?;
        let max = self.device.limits().max_storage_buffer_binding_size;
        if size as u64 > max {
            return Err(device_err(format!(
                "{label}: {size} bytes exceed the device's storage binding limit of {max}"
            )));
        }
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: size as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.write_padded(&buf, bytes);
        Ok(buf)
    }

    /// Writes `bytes` at offset 0 (queue writes need a multiple of 4 bytes: the tail is
    /// padded with zeros; new buffers are zero-initialised, so the padding stays zero).
    fn write_padded(&self, buf: &wgpu::Buffer, bytes: &[u8]) {
        let whole = bytes.len() / 4 * 4;
        if whole > 0 {
            self.queue.write_buffer(buf, 0, &bytes[..whole]);
        }
        if whole < bytes.len() {
            let mut tail = [0u8; 4];
            tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
            self.queue.write_buffer(buf, whole as u64, &tail);
        }
    }

    fn take(&self, kind: Kind, len: u64) -> wgpu::Buffer {
        let class = len.max(256).next_power_of_two();
        if let Some(b) = lock(&self.pool)
            .free
            .get_mut(&(kind, class))
            .and_then(Vec::pop)
        {
            return b;
        }
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tessera pooled"),
            size: class,
            usage: kind.usage(),
            mapped_at_creation: false,
        })
    }

    fn give(&self, kind: Kind, buf: wgpu::Buffer) {
        let mut pool = lock(&self.pool);
        let v = pool.free.entry((kind, buf.size())).or_default();
        if v.len() < POOL_KEEP {
            v.push(buf);
        }
    }

    fn module(&self, file: &'static str) -> Result<wgpu::ShaderModule, BackendError> {
        if let Some(m) = lock(&self.modules).get(file) {
            return Ok(m.clone());
        }
        let src = kernels::shader_source(file)
            .ok_or_else(|| device_err(format!("no shader source {file}")))?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(file),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        };
        let module = match self.checks {
            ShaderChecks::All => self.device.create_shader_module(desc),
            ShaderChecks::Bounds | ShaderChecks::None => {
                let mut checks = wgpu::ShaderRuntimeChecks::checked();
                checks.force_loop_bounding = false;
                checks.int_div_checks = false;
                checks.bounds_checks = self.checks == ShaderChecks::Bounds;
                // SAFETY: `create_shader_module_trusted` requires that the kernels, for
                // every input the host lets through, never loop forever, never divide an
                // integer by zero (or i32::MIN by -1) and (with `bounds_checks` off) never
                // index outside an array or binding. The host lets through only:
                // - a `GpuTensor` made by `upload` from a registry-checked `QTensor`:
                //   weight and scale buffers of at least the registry's byte counts,
                //   zero-padded by `kernels::padded_len` (16 bytes past the last whole
                //   vec4), and `Params` from `Params::new` for that tensor's (format, O, I,
                //   S), which fails unless O, I and every byte count fit the kernels' u32
                //   arithmetic;
                // - an S in `CAPABILITIES` (1..=16) and rows a workgroup `KernelSpec::admits`
                //   (rows * S <= 16 on the per-row path, so the private `acc`/`t`/`u`
                //   arrays, 16 long, are indexed below 16);
                // - x and y buffers that `encode_gemv` checked hold [S, x_stride] floats
                //   (plus the packed planes where `reserved0` = 1) and [S, O] floats.
                // The kernels then read rows < O only (`row0 + r < p.o` or `min(.., O - 1)`),
                // bytes below `row_bytes` of a row plus at most one vec4 past it (inside
                // the padding), activation columns below x_stride (blocks below
                // x_stride / 32 for the planes), scales below the registry's count, and
                // workgroup slots below 512 (`red[k * 32 + sgid]`, k < 16, fewer than 32
                // subgroups: subgroups of at least `MIN_SUBGROUP` are required); they write
                // y[s * O + row] for s < S and row < O only. Every loop runs to a bound
                // taken from the immediates or a constant (row chunks, blocks, rows, S,
                // subgroups: all below 2^28, as a row's bytes and I fit u32), stepping by a
                // nonzero constant, so no counter wraps. Integer divisors are nonzero
                // constants (GS, BITS, block sizes), S (>= 1), or row bytes over blocks a
                // row (ggml: I / 32 or I / 256, at least 1: the registry refuses empty
                // shapes and partial GGML blocks). The conformance suites run every format,
                // S and edge shape (odd O, odd I, partial groups, O = 1) with the default
                // (`ShaderChecks::Bounds`); tests/device.rs runs long rows of the S = 1
                // fast paths with every check and with none.
                unsafe { self.device.create_shader_module_trusted(desc, checks) }
            }
        };
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(device_err(format!("{file}: {e}")));
        }
        lock(&self.modules).insert(file, module.clone());
        Ok(module)
    }

    /// The pipeline of `spec` at batch `s` with `rows` rows a workgroup, compiled once per
    /// device and (file, overrides).
    pub fn pipeline(
        &self,
        spec: &KernelSpec,
        s: usize,
        rows: u32,
    ) -> Result<wgpu::ComputePipeline, BackendError> {
        if !spec.admits(s, rows) {
            return Err(device_err(format!(
                "no kernel variant of {} for S={s} with {rows} rows a workgroup (KernelSpec::admits)",
                spec.file
            )));
        }
        let file = spec.file_for(self.subgroups);
        let overrides = spec.overrides(s, rows, self.mutate);
        let mut key = file.to_string();
        for (n, v) in &overrides {
            key.push_str(&format!("|{n}={v}"));
        }
        if let Some(p) = lock(&self.pipelines).get(&key) {
            return Ok(p.clone());
        }
        let module = self.module(file)?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&key),
                layout: Some(&self.pipeline_layout),
                module: &module,
                entry_point: Some(spec.entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &overrides,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(device_err(format!("{key}: {e}")));
        }
        lock(&self.pipelines).insert(key, pipeline.clone());
        Ok(pipeline)
    }

    /// Pipelines compiled so far (the cache's size).
    pub fn cached_pipelines(&self) -> usize {
        lock(&self.pipelines).len()
    }

    /// Whether a GEMV of `format` at batch `s` takes packed int8 activations here
    /// ([`Options::int8_activations`] and `kernels::int8_activations`).
    pub fn uses_int8_activations(&self, format: Format, s: usize) -> bool {
        self.int8_x && kernels::int8_activations(format, s)
    }

    /// `x` ([s, I], logical domain) rotated into `w`'s stored domain and laid out as the
    /// kernels read it: [s, x_stride], zero past I; where [`Self::uses_int8_activations`],
    /// followed by `kernels::pack_int8_activations_as` (u32 words, as f32 bits).
    pub fn prepare_activations(
        &self,
        w: &GpuTensor,
        x: &[f32],
        s: usize,
    ) -> Result<Vec<f32>, BackendError> {
        let cols = w.cols;
        if s.checked_mul(cols) != Some(x.len()) {
            return Err(QuantError::ActivationSize {
                format: w.format,
                s,
                cols,
                got: x.len(),
            }
            .into());
        }
        let stride = kernels::x_stride(cols).ok_or(QuantError::SizeOverflow {
            format: w.format,
            rows: s,
            cols,
        })?;
        let mut out = vec![0f32; s * stride];
        for (dst, src) in out.chunks_exact_mut(stride).zip(x.chunks_exact(cols)) {
            dst[..cols].copy_from_slice(src);
            match w.format.spec().rotation {
                Rotation::None => {}
                // The registry guarantees I % 256 == 0 for every rotated format.
                Rotation::Fwht256 => {
                    quant_core::rotation::forward_rows(&mut dst[..cols], cols, w.rotation_seed)
                }
            }
        }
        if self.uses_int8_activations(w.format, s) {
            let packed = kernels::pack_int8_activations_as(&out, self.int8_layout);
            out.extend(packed.into_iter().map(f32::from_bits));
        }
        Ok(out)
    }

    /// The bytes the x and y bindings of a GEMV of `w` at batch `s` must hold: [s,
    /// x_stride] floats (plus the packed planes where [`Self::uses_int8_activations`]),
    /// and [s, O] floats.
    pub fn binding_bytes(&self, w: &GpuTensor, s: usize) -> Result<(u64, u64), BackendError> {
        let overflow = QuantError::SizeOverflow {
            format: w.format,
            rows: w.rows,
            cols: w.cols,
        };
        let floats = kernels::x_stride(w.cols)
            .and_then(|st| st.checked_mul(s))
            .ok_or(overflow.clone())?;
        let packed = if self.uses_int8_activations(w.format, s) {
            (floats / 32)
                .checked_mul(kernels::INT8_X_VEC4S_PER_BLOCK * 4)
                .ok_or(overflow.clone())?
        } else {
            0
        };
        let x = floats
            .checked_add(packed)
            .and_then(|n| n.checked_mul(4))
            .ok_or(overflow.clone())?;
        let y = s
            .checked_mul(w.rows)
            .and_then(|n| n.checked_mul(4))
            .ok_or(overflow)?;
        Ok((x as u64, y as u64))
    }

    /// Records one GEMV dispatch of `w` into `pass` (pipeline, bindings, immediates), reading
    /// `x` (prepared, [`Self::prepare_activations`]) and writing `y` ([s, O] f32). `rows`:
    /// rows a workgroup (`KernelSpec::rows(s)` unless tuning).
    pub fn encode_gemv(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        w: &GpuTensor,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        s: usize,
        rows: u32,
    ) -> Result<(), BackendError> {
        let spec = kernels::kernel_for(w.format).ok_or(BackendError::NotImplemented {
            backend: NAME,
            op: Op::Gemv.name(),
            format: w.format,
            s,
        })?;
        let mut params = Params::new(w.format, w.rows, w.cols, s)?;
        // The kernels index x and y from the immediates alone (see `module`'s SAFETY):
        // buffers too small for this tensor and S are refused here, before any dispatch.
        let (x_need, y_need) = self.binding_bytes(w, s)?;
        if x.size() < x_need || y.size() < y_need {
            return Err(device_err(format!(
                "{} at S={s}: x buffer {} bytes (needs {x_need}), y buffer {} bytes (needs {y_need})",
                w.format.name(),
                x.size(),
                y.size()
            )));
        }
        if self.uses_int8_activations(w.format, s) {
            // `x` came from prepare_activations, which appended the packed planes.
            params.reserved0 = self.int8_layout;
        }
        let pipeline = self.pipeline(&spec, s, rows)?;
        let grid = spec.dispatch(w.rows, rows)?;
        let bind = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tessera gemv"),
            layout: &self.layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: w.weights.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: w.scales.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: x.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: y.as_entire_binding(),
                },
            ],
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.set_immediates(0, &params.to_bytes());
        pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        Ok(())
    }

    /// Encodes and submits y[s, O] = x[s, I] · Wᵀ and requests the readback; returns at once.
    /// Outputs are poisoned (NaN) on the device before the kernel runs, so an output the
    /// kernel does not write is caught.
    pub fn submit_gemv<'a>(
        &'a self,
        w: &GpuTensor,
        x: &[f32],
        s: usize,
    ) -> Result<PendingGemv<'a>, BackendError> {
        if lookup(CAPABILITIES, Op::Gemv, w.format, s).is_none() {
            return Err(BackendError::NotImplemented {
                backend: NAME,
                op: Op::Gemv.name(),
                format: w.format,
                s,
            });
        }
        let prepared = self.prepare_activations(w, x, s)?;
        let y_len = s.checked_mul(w.rows).and_then(|n| n.checked_mul(4)).ok_or(
            QuantError::SizeOverflow {
                format: w.format,
                rows: w.rows,
                cols: s,
            },
        )? as u64;
        let xb = self.take(Kind::Input, (prepared.len() * 4) as u64);
        self.queue
            .write_buffer(&xb, 0, bytemuck::cast_slice(&prepared));
        let yb = self.take(Kind::Output, y_len);
        let rb = self.take(Kind::Readback, y_len);
        // NaN in every byte pattern: 0xFFFFFFFF.
        self.queue
            .write_buffer(&yb, 0, &vec![0xFFu8; yb.size() as usize]);
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("tessera gemv"),
            });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("tessera gemv"),
                timestamp_writes: None,
            });
            let rows = kernels::kernel_for(w.format).map_or(1, |k| k.rows(s));
            let encoded = self.encode_gemv(&mut pass, w, &xb, &yb, s, rows);
            if let Err(e) = encoded {
                drop(pass);
                self.give(Kind::Input, xb);
                self.give(Kind::Output, yb);
                self.give(Kind::Readback, rb);
                return Err(e);
            }
        }
        enc.copy_buffer_to_buffer(&yb, 0, &rb, 0, y_len);
        let index = self.queue.submit([enc.finish()]);
        let done: Arc<Mutex<Option<Result<(), String>>>> = Arc::new(Mutex::new(None));
        let slot = done.clone();
        rb.map_async(wgpu::MapMode::Read, 0..y_len, move |r| {
            *lock(&slot) = Some(r.map_err(|e| e.to_string()));
        });
        Ok(PendingGemv {
            backend: self,
            index,
            done,
            len: y_len,
            buffers: Some((xb, yb, rb)),
        })
    }

    /// [`Self::submit_gemv`] and wait for the result.
    pub fn gemv(&self, w: &GpuTensor, x: &[f32], s: usize) -> Result<Vec<f32>, BackendError> {
        self.submit_gemv(w, x, s)?.wait()
    }
}

/// A submitted GEMV whose result has not been read yet. Dropping it without `wait` still
/// returns its buffers to the pool once the device is done with them.
pub struct PendingGemv<'a> {
    backend: &'a WgpuBackend,
    index: wgpu::SubmissionIndex,
    done: Arc<Mutex<Option<Result<(), String>>>>,
    len: u64,
    buffers: Option<(wgpu::Buffer, wgpu::Buffer, wgpu::Buffer)>,
}

impl PendingGemv<'_> {
    /// Whether the readback is already mapped (never blocks; polls once).
    pub fn is_ready(&self) -> bool {
        let _ = self.backend.device.poll(wgpu::PollType::Poll);
        lock(&self.done).is_some()
    }

    /// Waits for this submission, then reads y [s, O].
    pub fn wait(mut self) -> Result<Vec<f32>, BackendError> {
        let b = self.backend;
        b.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(self.index.clone()),
                timeout: None,
            })
            .map_err(|e| device_err(format!("poll: {e}")))?;
        b.check_uncaptured()?;
        // Another thread polling the same device may have collected this mapping's callback
        // and be about to run it: wait for the callback itself, not only the submission.
        let start = std::time::Instant::now();
        let state = loop {
            if let Some(state) = lock(&self.done).take() {
                break Some(state);
            }
            if start.elapsed() > std::time::Duration::from_secs(60) {
                break None;
            }
            let _ = b.device.poll(wgpu::PollType::Poll);
            std::thread::yield_now();
        };
        let Some((xb, yb, rb)) = self.buffers.take() else {
            return Err(device_err("result already taken"));
        };
        let out = match state {
            Some(Ok(())) => {
                let out = match rb.get_mapped_range(0..self.len) {
                    Ok(view) => Ok(view
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect()),
                    Err(e) => Err(device_err(format!("readback: {e}"))),
                };
                rb.unmap();
                out
            }
            Some(Err(e)) => Err(device_err(format!("readback mapping failed: {e}"))),
            None => Err(device_err(
                "readback not mapped 60 s after the submission completed",
            )),
        };
        b.give(Kind::Input, xb);
        b.give(Kind::Output, yb);
        if out.is_ok() {
            b.give(Kind::Readback, rb);
        }
        out
    }
}

impl Drop for PendingGemv<'_> {
    fn drop(&mut self) {
        if let Some((xb, yb, rb)) = self.buffers.take() {
            // The buffers may still be in use by the queue: wait, then recycle what is
            // safely unmapped.
            let _ = self.backend.device.poll(wgpu::PollType::Wait {
                submission_index: Some(self.index.clone()),
                timeout: None,
            });
            self.backend.give(Kind::Input, xb);
            self.backend.give(Kind::Output, yb);
            if matches!(*lock(&self.done), Some(Ok(()))) {
                rb.unmap();
                self.backend.give(Kind::Readback, rb);
            }
        }
    }
}
