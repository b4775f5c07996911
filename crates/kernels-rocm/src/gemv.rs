//! GEMV on the Vulkan device: tensors uploaded once in their container layout, one
//! descriptor set and one pre-recorded command buffer per (tensor, S), reused by every call.
//!
//! A call writes the prepared activations into the (tensor, S) staging buffer and resubmits
//! the recorded commands: copy x to the device, fill y with [`POISON`] (so a kernel that
//! misses an output cannot pass on the previous call's value), dispatch, copy y back. The
//! activation is rotated on the host for rotated formats and laid out [S, x_stride], zero
//! past I, as kernels_metal::kernels says; for the int4 kernels at S = 1 (where the device
//! has integer dot products, unless `set_int8_activations(false)`) the packed int8 planes
//! of `kernels::pack_int8_activations_as` follow, and `Params::reserved0` is their layout
//! (`kernels::int8_x_layout`: planar unless `TESSERA_INT8_X_LAYOUT=interleaved`).

use crate::caps;
use crate::device::{
    AdapterInfo, Buffer, Commands, Context, DescriptorSet, Options, Params, cmd_barrier,
    cmd_dispatch, lock,
};
use crate::error::VulkanError;
use crate::spirv::{self, ModuleEntry};
use ash::vk;
use kernels_metal::kernels::{self as table, padded_len, x_stride};
use quant_core::oracle::POISON;
use quant_core::{Format, QTensor, Rotation};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Mutex;

/// A deliberate defect, so tests can show the conformance suite catches it.
#[cfg(feature = "mutation-test")]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The shaders' `MUTATE` override (1 = swap nibbles, 2 = group off by one, 3 = scales
    /// 1% high); build.rs compiles these modules for int4-g64 and int4-row only.
    Decode(u32),
    /// The `row_bytes` push constant 16 bytes too large: every row but the first is read
    /// from the wrong place.
    RowBytes,
}

/// The Vulkan tier: one device, its pipelines, and GEMV on uploaded tensors.
pub struct VulkanBackend {
    ctx: Context,
    /// Whether the int4 and affine256 formats at S = 1 (`kernels::int8_activations`) take
    /// packed int8 activations where the device has integer dot products
    /// ([`VulkanBackend::set_int8_activations`]).
    int8_x: bool,
    /// Their layout, as `Params::reserved0` (`kernels::int8_x_layout`, read when opened).
    int8_layout: u32,
    #[cfg(feature = "mutation-test")]
    mutation: Option<Mutation>,
}

/// A weight tensor on the device in its container layout (weight bytes and sidecar scale
/// bytes as stored, zero-padded to `padded_len`), with the per-S bindings made for it.
pub struct DeviceTensor {
    format: Format,
    rows: usize,
    cols: usize,
    rotation_seed: u64,
    weight_bytes: usize,
    scale_bytes: usize,
    weights: Buffer,
    scales: Buffer,
    /// Keyed by (S, packed int8 activations).
    bindings: Mutex<HashMap<(usize, bool), Bindings>>,
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
    /// Stored weight plus sidecar bytes: what one GEMV must read.
    pub fn stored_bytes(&self) -> usize {
        self.weight_bytes + self.scale_bytes
    }
}

/// Everything one (tensor, S) needs, made once: activation and output buffers (device and
/// host staging), the descriptor set, and the recorded commands.
struct Bindings {
    x_host: Buffer,
    y_host: Buffer,
    // Referenced by the descriptor set and the recorded commands.
    x_dev: Buffer,
    y_dev: Buffer,
    set: DescriptorSet,
    cmds: Commands,
    pipeline: vk::Pipeline,
    params: Params,
    grid: [u32; 3],
    x_len: u64,
    y_len: u64,
}

fn shape(format: Format, what: String) -> VulkanError {
    VulkanError::Shape { format, what }
}

/// `x` ([s, cols], logical domain) rotated into `format`'s stored domain and laid out
/// [s, x_stride], zero-padded, as the kernels read it.
pub fn prepare_activations(
    format: Format,
    cols: usize,
    rotation_seed: u64,
    x: &[f32],
    s: usize,
) -> Result<Vec<f32>, VulkanError> {
    if s.checked_mul(cols) != Some(x.len()) {
        return Err(shape(
            format,
            format!(
                "activation has {} values, expected S={s} x I={cols}",
                x.len()
            ),
        ));
    }
    let stride = x_stride(cols).ok_or_else(|| shape(format, format!("I = {cols} overflows")))?;
    let total = s
        .checked_mul(stride)
        .ok_or_else(|| shape(format, format!("S={s} x stride {stride} overflows")))?;
    let mut out = vec![0f32; total];
    if cols == 0 {
        return Ok(out);
    }
    for (dst, src) in out.chunks_exact_mut(stride).zip(x.chunks_exact(cols)) {
        dst[..cols].copy_from_slice(src);
        match format.spec().rotation {
            Rotation::None => {}
            // The registry guarantees cols % 256 == 0 for every rotated format.
            Rotation::Fwht256 => {
                quant_core::rotation::forward_rows(&mut dst[..cols], cols, rotation_seed)
            }
        }
    }
    Ok(out)
}

/// Bytes of the packed int8 activations appended to an x row of `x_stride` floats.
fn int8_bytes(x_stride: u32) -> Option<u64> {
    (u64::from(x_stride) / 32).checked_mul(16 * table::INT8_X_VEC4S_PER_BLOCK as u64)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_le_bytes()).collect()
}

impl VulkanBackend {
    /// The device `Options::from_env()` picks (`TESSERA_VK_ADAPTER`, ...), or why none.
    pub fn new() -> Result<VulkanBackend, VulkanError> {
        Self::with_options(&Options::from_env()?)
    }

    pub fn with_options(options: &Options) -> Result<VulkanBackend, VulkanError> {
        Ok(VulkanBackend {
            ctx: Context::new(options)?,
            int8_x: true,
            int8_layout: table::int8_x_layout(),
            #[cfg(feature = "mutation-test")]
            mutation: None,
        })
    }

    /// A backend on an existing device (e.g. [`Context::shared`]).
    pub fn with_context(ctx: Context) -> VulkanBackend {
        VulkanBackend {
            ctx,
            int8_x: true,
            int8_layout: table::int8_x_layout(),
            #[cfg(feature = "mutation-test")]
            mutation: None,
        }
    }

    /// A backend whose kernels or push constants carry `m` (mutation tests only).
    #[cfg(feature = "mutation-test")]
    pub fn with_mutation(options: &Options, m: Mutation) -> Result<VulkanBackend, VulkanError> {
        Ok(Self::mutant(Context::new(options)?, m))
    }

    /// As [`VulkanBackend::with_mutation`], on an existing device.
    #[cfg(feature = "mutation-test")]
    pub fn mutant(ctx: Context, m: Mutation) -> VulkanBackend {
        let mut b = Self::with_context(ctx);
        b.mutation = Some(m);
        b
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Whether the int4 and affine256 formats at S = 1 may take packed int8 activations
    /// (`dot4I8Packed`; the default, where the device has integer dot products) or always
    /// the f32 path (the bench times both).
    pub fn set_int8_activations(&mut self, on: bool) {
        self.int8_x = on;
    }

    /// Whether a GEMV of `format` at batch `s` takes packed int8 activations here.
    pub fn uses_int8_activations(&self, format: Format, s: usize) -> bool {
        self.int8_x && self.info().integer_dot_product && table::int8_activations(format, s)
    }

    pub fn info(&self) -> &AdapterInfo {
        self.ctx.info()
    }

    fn mutate_decode(&self) -> u32 {
        #[cfg(feature = "mutation-test")]
        if let Some(Mutation::Decode(m)) = self.mutation {
            return m;
        }
        0
    }

    fn mutate_params(&self, p: &mut Params) {
        #[cfg(feature = "mutation-test")]
        if self.mutation == Some(Mutation::RowBytes) {
            p.row_bytes = p.row_bytes.wrapping_add(16);
        }
        let _ = p;
    }

    /// The module and pipeline running `format` at batch `s` on this device.
    fn kernel(
        &self,
        format: Format,
        s: usize,
    ) -> Result<(vk::Pipeline, &'static ModuleEntry), VulkanError> {
        if caps::lookup(format, s).is_none() {
            return Err(VulkanError::NotImplemented {
                format,
                s,
                why: "not a row of kernels_rocm::CAPABILITIES".into(),
            });
        }
        let sg = self.info().use_subgroups;
        let m = spirv::module_for(format, sg, s, self.mutate_decode())?;
        if m.needs_integer_dot_product() && !self.info().integer_dot_product {
            return Err(VulkanError::NotImplemented {
                format,
                s,
                why: format!(
                    "{} uses OpSDot and the device lacks shaderIntegerDotProduct (Vulkan 1.3 or VK_KHR_shader_integer_dot_product)",
                    m.name
                ),
            });
        }
        let p = self.ctx.pipeline(m.name, m.bytes(), m.entry, m.workgroup)?;
        Ok((p, m))
    }

    /// Uploads `t`'s stored bytes once (the fp8 rows' NaN flags after the scales,
    /// `kernels::scale_binding`); every later GEMV on it reuses them.
    pub fn upload(&self, t: &QTensor<'_>) -> Result<DeviceTensor, VulkanError> {
        let format = t.format();
        let limit = u64::from(self.info().max_storage_buffer_range);
        let padded = |len: usize, what: &str| -> Result<u64, VulkanError> {
            let p = padded_len(len)
                .and_then(|p| u64::try_from(p).ok())
                .ok_or_else(|| shape(format, format!("{what} of {len} bytes overflows")))?;
            if p > limit {
                return Err(shape(
                    format,
                    format!(
                        "{what} of {len} bytes exceeds the device's maxStorageBufferRange ({limit} bytes)"
                    ),
                ));
            }
            Ok(p)
        };
        let binding = table::scale_binding(t);
        let weights = table::weight_binding(t);
        let wlen = padded(weights.len(), "weight buffer")?;
        let slen = padded(binding.len(), "scale buffer")?;
        Ok(DeviceTensor {
            format,
            rows: t.rows(),
            cols: t.cols(),
            rotation_seed: t.rotation_seed(),
            weight_bytes: t.weights().len(),
            scale_bytes: t.scales().len(),
            weights: self.ctx.upload(&weights, wlen)?,
            scales: self.ctx.upload(&binding, slen)?,
            bindings: Mutex::new(HashMap::new()),
        })
    }

    /// A second device copy of `t` (device-to-device), for benchmarks that rotate weights.
    pub fn duplicate(&self, t: &DeviceTensor) -> Result<DeviceTensor, VulkanError> {
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_DST
            | vk::BufferUsageFlags::TRANSFER_SRC;
        let w = self.ctx.buffer(t.weights.size, usage, false)?;
        let sc = self.ctx.buffer(t.scales.size, usage, false)?;
        self.ctx.one_shot(|d, cmd| {
            // SAFETY: recording; source and destination are live and of equal size.
            unsafe {
                d.cmd_copy_buffer(
                    cmd,
                    t.weights.buffer,
                    w.buffer,
                    &[vk::BufferCopy::default().size(w.size)],
                );
                d.cmd_copy_buffer(
                    cmd,
                    t.scales.buffer,
                    sc.buffer,
                    &[vk::BufferCopy::default().size(sc.size)],
                );
            }
        })?;
        Ok(DeviceTensor {
            format: t.format,
            rows: t.rows,
            cols: t.cols,
            rotation_seed: t.rotation_seed,
            weight_bytes: t.weight_bytes,
            scale_bytes: t.scale_bytes,
            weights: w,
            scales: sc,
            bindings: Mutex::new(HashMap::new()),
        })
    }

    /// Makes the (tensor, S) bindings and records their commands.
    fn bindings(&self, t: &DeviceTensor, s: usize, int8_x: bool) -> Result<Bindings, VulkanError> {
        let format = t.format;
        let (pipeline, module) = self.kernel(format, s)?;
        let mut params = Params::new(format, t.rows, t.cols, s)?;
        if int8_x {
            params.reserved0 = self.int8_layout;
        }
        self.mutate_params(&mut params);
        let grid = table::kernel_for(format)
            .ok_or_else(|| VulkanError::NotImplemented {
                format,
                s,
                why: "no WGSL kernel".into(),
            })?
            .dispatch(t.rows, module.rows)?;
        let max = self.info().max_workgroup_count;
        if grid.iter().zip(max).any(|(g, m)| *g > m) {
            return Err(shape(
                format,
                format!(
                    "dispatch grid {grid:?} exceeds the device's maxComputeWorkGroupCount {max:?}"
                ),
            ));
        }
        let too_big = || {
            shape(
                format,
                format!("S={s} x [{}, {}] overflows", t.rows, t.cols),
            )
        };
        let x_len = u64::from(params.x_stride)
            .checked_mul(s as u64)
            .and_then(|n| n.checked_mul(4))
            .and_then(|n| {
                n.checked_add(if int8_x {
                    int8_bytes(params.x_stride)?
                } else {
                    0
                })
            })
            .ok_or_else(too_big)?;
        let y_len = (t.rows as u64)
            .checked_mul(s as u64)
            .and_then(|n| n.checked_mul(4))
            .ok_or_else(too_big)?;
        let limit = u64::from(self.info().max_storage_buffer_range);
        if x_len > limit || y_len > limit {
            return Err(shape(
                format,
                format!("activations or outputs exceed maxStorageBufferRange ({limit} bytes)"),
            ));
        }
        let c = &self.ctx;
        let dev_usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_DST
            | vk::BufferUsageFlags::TRANSFER_SRC;
        let x_dev = c.buffer(x_len, dev_usage, false)?;
        let y_dev = c.buffer(y_len, dev_usage, false)?;
        let x_host = c.buffer(x_len, vk::BufferUsageFlags::TRANSFER_SRC, true)?;
        let y_host = c.buffer(y_len, vk::BufferUsageFlags::TRANSFER_DST, true)?;
        let set = DescriptorSet::new(c, [&t.weights, &t.scales, &x_dev, &y_dev])?;
        let cmds = Commands::new(c)?;
        let b = Bindings {
            x_host,
            y_host,
            x_dev,
            y_dev,
            set,
            cmds,
            pipeline,
            params,
            grid,
            x_len,
            y_len,
        };
        b.cmds.record(|d, cmd| {
            let transfer = vk::PipelineStageFlags::TRANSFER;
            let compute = vk::PipelineStageFlags::COMPUTE_SHADER;
            // SAFETY: recording into a fresh command buffer of this device; every buffer,
            // the set and the pipeline are live objects of the device and outlive the
            // command buffer (all are owned by `b`, the command buffer last dropped after
            // them is waited on before any drop).
            unsafe {
                d.cmd_copy_buffer(
                    cmd,
                    b.x_host.buffer,
                    b.x_dev.buffer,
                    &[vk::BufferCopy::default().size(b.x_len)],
                );
                d.cmd_fill_buffer(cmd, b.y_dev.buffer, 0, b.y_len, POISON.to_bits());
                cmd_barrier(
                    d,
                    cmd,
                    (transfer, vk::AccessFlags::TRANSFER_WRITE),
                    (
                        compute,
                        vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
                    ),
                );
                cmd_dispatch(c, cmd, b.pipeline, b.set.set, b.params, b.grid);
                cmd_barrier(
                    d,
                    cmd,
                    (compute, vk::AccessFlags::SHADER_WRITE),
                    (transfer, vk::AccessFlags::TRANSFER_READ),
                );
                d.cmd_copy_buffer(
                    cmd,
                    b.y_dev.buffer,
                    b.y_host.buffer,
                    &[vk::BufferCopy::default().size(b.y_len)],
                );
                cmd_barrier(
                    d,
                    cmd,
                    (transfer, vk::AccessFlags::TRANSFER_WRITE),
                    (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ),
                );
            }
        })?;
        Ok(b)
    }

    /// Runs `f` on the (t, s) bindings, making them on first use.
    fn with_bindings<R>(
        &self,
        t: &DeviceTensor,
        s: usize,
        f: impl FnOnce(&Bindings) -> Result<R, VulkanError>,
    ) -> Result<R, VulkanError> {
        let int8_x = self.uses_int8_activations(t.format, s);
        let mut map = lock(&t.bindings);
        let b = match map.entry((s, int8_x)) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => v.insert(self.bindings(t, s, int8_x)?),
        };
        f(b)
    }

    /// y[S, O] = x[S, I] . W^T for `x` in the logical domain (rotated here if the format is).
    pub fn gemv(&self, t: &DeviceTensor, x: &[f32], s: usize) -> Result<Vec<f32>, VulkanError> {
        if caps::lookup(t.format, s).is_none() {
            return Err(VulkanError::NotImplemented {
                format: t.format,
                s,
                why: format!("S must be in 1..={}", kernels_metal::kernels::MAX_S),
            });
        }
        let xp = prepare_activations(t.format, t.cols, t.rotation_seed, x, s)?;
        let mut bytes = f32_bytes(&xp);
        if self.uses_int8_activations(t.format, s) {
            for w in table::pack_int8_activations_as(&xp, self.int8_layout) {
                bytes.extend_from_slice(&w.to_le_bytes());
            }
        }
        self.with_bindings(t, s, |b| {
            b.x_host.write(&bytes, b.x_len)?;
            b.cmds.run()?;
            let mut raw = vec![0u8; usize::try_from(b.y_len).unwrap_or(usize::MAX)];
            b.y_host.read(&mut raw)?;
            Ok(raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        })
    }

    /// GPU seconds of each of `reps` GEMV dispatches at batch `s`, rotating over `tensors`
    /// (all of one shape), queued in one command buffer with a compute barrier between
    /// dispatches (each waits for the last, as on one CUDA stream), timed by timestamps.
    pub fn time_gemv(
        &self,
        tensors: &[&DeviceTensor],
        x: &[f32],
        s: usize,
        reps: usize,
    ) -> Result<Vec<f64>, VulkanError> {
        self.time_gemv_stamped(tensors, x, s, reps, Stamps::Each)
    }

    /// [`VulkanBackend::time_gemv`]'s dispatches with timestamps only before the first and
    /// after the last: their mean GPU seconds, barriers included, without a timestamp
    /// between each two (the wgpu bench's "one pass"; docs/VULKAN.md, "Session 12").
    pub fn time_gemv_span(
        &self,
        tensors: &[&DeviceTensor],
        x: &[f32],
        s: usize,
        reps: usize,
    ) -> Result<f64, VulkanError> {
        let t = self.time_gemv_stamped(tensors, x, s, reps, Stamps::Ends)?;
        Ok(t.iter().sum::<f64>() / reps.max(1) as f64)
    }

    fn time_gemv_stamped(
        &self,
        tensors: &[&DeviceTensor],
        x: &[f32],
        s: usize,
        reps: usize,
        stamps: Stamps,
    ) -> Result<Vec<f64>, VulkanError> {
        let period = self.timestamp_period()?;
        // Each tensor's bindings are locked for the whole run: a tensor listed twice would
        // wait on itself.
        for (k, a) in tensors.iter().enumerate() {
            if tensors[..k].iter().any(|b| std::ptr::eq(*a, *b)) {
                return Err(shape(
                    a.format,
                    "time_gemv: a tensor is listed twice (use duplicate() for copies)".into(),
                ));
            }
        }
        // One ordinary call per tensor: makes its bindings and uploads x into them.
        for t in tensors {
            self.gemv(t, x, s)?;
        }
        let mut guards = Vec::with_capacity(tensors.len());
        for t in tensors {
            guards.push(lock(&t.bindings));
        }
        let mut binds = Vec::with_capacity(tensors.len());
        for (t, g) in tensors.iter().zip(&guards) {
            let key = (s, self.uses_int8_activations(t.format, s));
            binds.push(g.get(&key).ok_or_else(|| VulkanError::Vk {
                during: "timing",
                result: "bindings missing".into(),
            })?);
        }
        if binds.is_empty() || reps == 0 {
            return Ok(vec![]);
        }
        let c = &self.ctx;
        self.timed(
            reps,
            period,
            |d, cmd, k| {
                let b = binds[k % binds.len()];
                // SAFETY: recording on this device; the bindings are locked for the whole run.
                unsafe { cmd_dispatch(c, cmd, b.pipeline, b.set.set, b.params, b.grid) };
                let compute = vk::PipelineStageFlags::COMPUTE_SHADER;
                let rw = vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
                // SAFETY: as above.
                unsafe { cmd_barrier(d, cmd, (compute, rw), (compute, rw)) };
            },
            vk::PipelineStageFlags::COMPUTE_SHADER,
            stamps,
        )
    }

    /// GPU seconds of each of `reps` device-to-device copies of `bytes` bytes.
    pub fn time_copy(&self, bytes: u64, reps: usize) -> Result<Vec<f64>, VulkanError> {
        let period = self.timestamp_period()?;
        let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
        let a = self.ctx.buffer(bytes, usage, false)?;
        let b = self.ctx.buffer(bytes, usage, false)?;
        self.timed(
            reps,
            period,
            |d, cmd, _| {
                let t = vk::PipelineStageFlags::TRANSFER;
                // SAFETY: recording on this device; both buffers are live and `bytes` long.
                unsafe {
                    d.cmd_copy_buffer(
                        cmd,
                        a.buffer,
                        b.buffer,
                        &[vk::BufferCopy::default().size(bytes)],
                    );
                    cmd_barrier(
                        d,
                        cmd,
                        (t, vk::AccessFlags::TRANSFER_WRITE),
                        (
                            t,
                            vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE,
                        ),
                    );
                }
            },
            vk::PipelineStageFlags::TRANSFER,
            Stamps::Each,
        )
    }

    /// GPU seconds of each of `reps` copies of `bytes` bytes (rounded up to 16) by a vec4
    /// copy shader (`build/shaders.rs` `COPY_WGSL`, the wgpu tier's): the ceiling a shader
    /// GEMV is compared with. NVIDIA's vkCmdCopyBuffer ([`VulkanBackend::time_copy`]) runs
    /// at about a fifth of it there.
    pub fn time_copy_shader(&self, bytes: u64, reps: usize) -> Result<Vec<f64>, VulkanError> {
        let period = self.timestamp_period()?;
        let (spv, wg) = spirv::copy_shader();
        let pipeline = self.ctx.pipeline("copy-shader", spv, "main", wg)?;
        let bytes = bytes.div_ceil(16).max(1) * 16;
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let a = self.ctx.buffer(bytes, usage, false)?;
        let b = self.ctx.buffer(bytes, usage, false)?;
        // Every page written once before timing.
        self.ctx.one_shot(|d, cmd| {
            // SAFETY: recording; both buffers are live and `bytes` long.
            unsafe {
                d.cmd_fill_buffer(cmd, a.buffer, 0, bytes, 0x3F80_0000);
                d.cmd_fill_buffer(cmd, b.buffer, 0, bytes, 0);
            }
        })?;
        let set = DescriptorSet::new(&self.ctx, [&a, &a, &a, &b])?;
        let groups = (bytes / 16).div_ceil(4 * u64::from(wg)).clamp(1, 65535) as u32;
        let c = &self.ctx;
        self.timed(
            reps,
            period,
            |d, cmd, _| {
                let compute = vk::PipelineStageFlags::COMPUTE_SHADER;
                let rw = vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
                // SAFETY: recording on this device; the set, its buffers and the pipeline
                // live until `timed` has waited for the commands.
                unsafe {
                    cmd_dispatch(c, cmd, pipeline, set.set, Params::default(), [groups, 1, 1]);
                    cmd_barrier(d, cmd, (compute, rw), (compute, rw));
                }
            },
            vk::PipelineStageFlags::COMPUTE_SHADER,
            Stamps::Each,
        )
    }

    fn timestamp_period(&self) -> Result<f64, VulkanError> {
        self.info()
            .timestamp_period
            .map(f64::from)
            .ok_or_else(|| VulkanError::Vk {
                during: "timing",
                result: "the compute queue has no timestamps".into(),
            })
    }

    /// Records `reps` steps, a timestamp after each (at `stage`), runs them once, and
    /// returns the seconds between consecutive timestamps.
    fn timed(
        &self,
        reps: usize,
        period_ns: f64,
        step: impl Fn(&ash::Device, vk::CommandBuffer, usize),
        stage: vk::PipelineStageFlags,
        stamps: Stamps,
    ) -> Result<Vec<f64>, VulkanError> {
        let c = &self.ctx;
        let d = &c.shared.device;
        let count = match stamps {
            Stamps::Each => reps + 1,
            Stamps::Ends => 2,
        };
        let n = u32::try_from(count).map_err(|_| VulkanError::Vk {
            during: "timing",
            result: format!("{reps} repetitions"),
        })?;
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(n);
        // SAFETY: live device.
        let pool = unsafe { d.create_query_pool(&info, None) }
            .map_err(VulkanError::vk("creating a timestamp query pool"))?;
        let cmds = Commands::new(c)?;
        let run = cmds
            .record(|d, cmd| {
                // SAFETY: recording; the pool has `n` queries.
                unsafe {
                    d.cmd_reset_query_pool(cmd, pool, 0, n);
                    d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, 0);
                }
                for k in 0..reps {
                    step(d, cmd, k);
                    let last = k + 1 == reps;
                    if stamps == Stamps::Each || last {
                        let q = if last { n - 1 } else { (k + 1) as u32 };
                        // SAFETY: as above; q < n.
                        unsafe { d.cmd_write_timestamp(cmd, stage, pool, q) };
                    }
                }
            })
            .and_then(|()| cmds.run());
        let mut ticks = vec![0u64; n as usize];
        let read = run.and_then(|()| {
            // SAFETY: the command buffer completed (fence waited); every query was written.
            unsafe {
                d.get_query_pool_results(
                    pool,
                    0,
                    &mut ticks,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
            }
            .map_err(VulkanError::vk("reading timestamps"))
        });
        drop(cmds);
        // SAFETY: no pending command buffer uses the pool any more.
        unsafe { d.destroy_query_pool(pool, None) };
        read?;
        Ok(ticks
            .windows(2)
            .map(|w| w[1].wrapping_sub(w[0]) as f64 * period_ns * 1e-9)
            .collect())
    }
}

/// Where [`VulkanBackend::timed`] writes timestamps: after every step (one interval a
/// step), or only before the first and after the last (one interval over all of them).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Stamps {
    Each,
    Ends,
}

impl DeviceTensor {
    /// The `Params` a GEMV at batch `s` pushes (for diagnostics and tests).
    pub fn params(&self, s: usize) -> Result<Params, VulkanError> {
        Ok(Params::new(self.format, self.rows, self.cols, s)?)
    }
}
