//! bench_gemv: wgpu GEMV timings on the chosen adapter, against a buffer-to-buffer copy
//! measured through wgpu in the same process.
//!
//! Convention (as crates/kernels-cuda's bench and ../shared/anchors/anchor_gpu.py): a copy
//! of n bytes moves 2n bytes (read + write), `copy GB/s = 2n / t`; a GEMV must read its
//! stored weight + scale bytes, `weight GB/s = (weight + scale bytes) / t`; "% of copy" is
//! their ratio. GEMV times are medians of single dispatches bracketed by timestamp queries
//! where the adapter offers them (`Features::TIMESTAMP_QUERY`), otherwise wall time of many
//! dispatches in one submission divided by their count ("queued"), which is also printed
//! beside the timestamps; also printed: dispatches back to back, a pass each, with encoder
//! timestamps between them, and many dispatches in one pass bracketed by its timestamps
//! ("one pass": barriers between them, no pass begin and end each; the Vulkan tier's bench
//! times its dispatches so). The copy ceiling is described below. Weight copies rotate through at least 512 MB so the next dispatch's
//! weights are never in the L2.
//!
//! Usage: bench_gemv [--quick] [--no-sweep] [--default-only] [--warm-ms 1500] [--formats a,b] [--batches 1,16]
//!                   [--shapes 6144x16384,...] [--rotate-mb 512] [--copy-mb 1024]
//!                   [--record FILE]
//! Adapter: TESSERA_WGPU_ADAPTER=<name substring>. Prints markdown tables on stdout (the
//! default kernel per format and S; then every rows-per-workgroup and reduction variant);
//! with $OUT set also writes $OUT/bench_gemv_wgpu.json; with `--record FILE` it writes the
//! default kernels' figures as xtask's perf record (`{"backend", "device", "date",
//! "command", "ceiling": {"name", "gbps"}, "series": [{"label", "kind", "s", "points":
//! [{"shape", "us", "gbps"}]}]}`, one series per format and S). Without an adapter it prints
//! "skipped: ..." and exits 0. Where a kernel takes packed int8 activations (int4-row,
//! int4-g* and the affine256 formats at S = 1), a second device with `Options::int8_activations` off times the f32 path too
//! (reduction column "subgroup, f32 x").
//!
//! The copy ceiling: buffers of up to 1 GiB are copied both ways 3 times first (every page
//! resident), then timed with timestamps only around the copies: 10 `copy_buffer_to_buffer`
//! between two encoder timestamps (where TIMESTAMP_QUERY_INSIDE_ENCODERS is offered), and
//! single dispatches of a vec4 copy shader bracketed by pass timestamps; the ceiling is the
//! faster of the two, 2n / t (read + write). Ticks are scaled by the queue's
//! timestampPeriod, which is printed. A wall-clock buffer copy is printed beside it.

use kernels_metal::kernels::kernel_for;
use kernels_metal::{GpuTensor, Options, Subgroups, WgpuBackend};
use quant_core::oracle::{reference_gemm, worst_error};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, EncodedTensor, Format, encode};
use std::time::Instant;

const SHAPES: [(usize, usize); 1] = [(6144, 16384)];
const FORMATS: [Format; 5] = [
    Format::Int4Row,
    Format::Int4G64,
    Format::Int8Row,
    Format::Fp8E4m3B128,
    Format::Mq4G256V2,
];

struct Opts {
    reps: usize,
    sweep: bool,
    /// `--default-only`: not the f32 path of the formats that take packed int8 x either.
    default_only: bool,
    formats: Vec<Format>,
    batches: Vec<usize>,
    shapes: Vec<(usize, usize)>,
    /// Weight copies cover at least this many bytes (default 512 MiB).
    rotate_bytes: u64,
    /// Bytes of the timed copy (default 1 GiB, capped by the device's buffer limit).
    copy_bytes: u64,
    /// Where to write the perf record (xtask's schema), if anywhere.
    record: Option<String>,
    /// Sustained dispatches of the kernel under test before it is timed (default 1500 ms):
    /// the H200 drops its SM clock to 345 MHz about 2 s after the GPU goes idle (the host
    /// encodes each format's weights meanwhile); with 300 ms the first kernel after such a
    /// gap was sometimes timed at that clock, 4-5x slow (issue #5's int4-row "regression";
    /// docs/VULKAN.md).
    warm: std::time::Duration,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        reps: 50,
        warm: std::time::Duration::from_millis(1500),
        sweep: true,
        default_only: false,
        formats: FORMATS.to_vec(),
        batches: vec![1, 16],
        shapes: SHAPES.to_vec(),
        rotate_bytes: 512 << 20,
        copy_bytes: 1 << 30,
        record: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => o.reps = 10,
            "--no-sweep" => o.sweep = false,
            "--default-only" => {
                o.sweep = false;
                o.default_only = true;
            }
            "--warm-ms" => {
                let v = value()?;
                let ms = v
                    .parse::<u64>()
                    .map_err(|e| format!("--warm-ms {v}: {e}"))?;
                o.warm = std::time::Duration::from_millis(ms);
            }
            "--rotate-mb" => {
                let v = value()?;
                o.rotate_bytes = v.parse::<u64>().map_err(|e| format!("{v}: {e}"))? << 20;
            }
            "--copy-mb" => {
                let v = value()?;
                o.copy_bytes = (v.parse::<u64>().map_err(|e| format!("{v}: {e}"))? << 20).max(4);
            }
            "--record" => o.record = Some(value()?),
            "--formats" => {
                o.formats = quant_core::conformance::parse_formats(&value()?)?;
            }
            "--batches" => {
                o.batches = value()?
                    .split(',')
                    .map(|v| v.trim().parse::<usize>().map_err(|e| format!("{v}: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            "--shapes" => {
                o.shapes = value()?
                    .split(',')
                    .map(|v| {
                        let (r, c) = v.split_once('x').ok_or(format!("{v}: want OxI"))?;
                        Ok::<_, String>((
                            r.trim().parse().map_err(|e| format!("{v}: {e}"))?,
                            c.trim().parse().map_err(|e| format!("{v}: {e}"))?,
                        ))
                    })
                    .collect::<Result<_, _>>()?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(o)
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("bench_gemv: {e}");
    std::process::exit(1)
}

fn wait(b: &WgpuBackend) {
    if let Err(e) = b.device().poll(wgpu::PollType::wait_indefinitely()) {
        fail(format!("poll: {e}"));
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A copy through a compute shader: each invocation moves 4 vec4s a round, grid-strided.
const COPY_WGSL: &str = "
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
    let total = arrayLength(&dst);
    let stride = n.x * 256u;
    var k = g.x;
    while (k < total) {
        for (var j = 0u; j < 4u; j++) {
            if (k < total) {
                dst[k] = src[k];
            }
            k += stride;
        }
    }
}
";

/// The copy ceiling, measured through wgpu in this process (read + write bytes, as
/// CUDA's D2D figure and anchor_gpu.py count them).
struct Ceiling {
    /// Bytes each copy moves one way.
    n: u64,
    /// copy_buffer_to_buffer timed by encoder timestamps around 10 copies (None where the
    /// adapter lacks TIMESTAMP_QUERY_INSIDE_ENCODERS).
    buffer_stamped: Option<f64>,
    /// copy_buffer_to_buffer, wall time of 20 copies in one submission.
    buffer_wall: f64,
    /// The copy shader, median of single dispatches timed by pass timestamps (None without
    /// timestamps).
    shader_stamped: Option<f64>,
    /// Nanoseconds a timestamp tick (the queue's timestampPeriod).
    period_ns: f32,
}

impl Ceiling {
    /// The ceiling in GB/s: the best timestamped copy (buffer copy or copy shader), or the
    /// wall-clock buffer copy where no timestamps exist.
    fn gbps(&self) -> f64 {
        let stamped = [self.buffer_stamped, self.shader_stamped]
            .into_iter()
            .flatten()
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        stamped.unwrap_or(self.buffer_wall)
    }

    fn describe(&self) -> String {
        let f = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0}"));
        format!(
            "copy ceiling {:.0} GB/s = max(timestamped buffer copy {}, timestamped copy shader {}) \
             GB/s, 2 x {} MiB (read + write) / t; wall-clock buffer copy {:.0} GB/s; \
             timestampPeriod {} ns",
            self.gbps(),
            f(self.buffer_stamped),
            f(self.shader_stamped),
            self.n >> 20,
            self.buffer_wall,
            self.period_ns
        )
    }
}

/// Resolves `count` timestamps of `qs` and returns the ticks.
fn read_ticks(b: &WgpuBackend, qs: &wgpu::QuerySet, count: u32) -> Vec<u64> {
    let bytes = u64::from(count) * 8;
    let resolve = b.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("stamps"),
        size: bytes,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let read = b.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("stamps read"),
        size: bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = b.device().create_command_encoder(&Default::default());
    enc.resolve_query_set(qs, 0..count, &resolve, 0);
    enc.copy_buffer_to_buffer(&resolve, 0, &read, 0, bytes);
    b.queue().submit([enc.finish()]);
    read.map_async(wgpu::MapMode::Read, .., |r| {
        if let Err(e) = r {
            fail(format!("map timestamps: {e}"));
        }
    });
    wait(b);
    let ticks = read
        .get_mapped_range(..)
        .unwrap_or_else(|e| fail(format!("timestamps: {e}")))
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect();
    read.unmap();
    ticks
}

/// Measures the copy ceiling with buffers of up to `bytes` (capped by the device's buffer
/// and binding limits): warm-up copies first (every page touched and resident), then
/// timestamped buffer copies, the copy shader, and a wall-clock run.
fn copy_ceiling(b: &WgpuBackend, bytes: u64) -> Ceiling {
    let limits = b.device().limits();
    let n = bytes
        .min(limits.max_buffer_size)
        .min(limits.max_storage_buffer_binding_size)
        / 16
        * 16;
    let mk = |label| {
        b.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: n,
            usage: wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let src = mk("copy src");
    let dst = mk("copy dst");
    let period = b.queue().get_timestamp_period();
    let secs = |ticks: u64| ticks as f64 * f64::from(period) * 1e-9;
    // Warm-up: both directions, so both buffers are written and resident.
    let mut enc = b.device().create_command_encoder(&Default::default());
    for _ in 0..3 {
        enc.copy_buffer_to_buffer(&src, 0, &dst, 0, n);
        enc.copy_buffer_to_buffer(&dst, 0, &src, 0, n);
    }
    b.queue().submit([enc.finish()]);
    wait(b);
    let enc_stamps = b.has_timestamps()
        && b.device()
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
    let buffer_stamped = enc_stamps.then(|| {
        let reps = 5u32;
        let qs = b.device().create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("copy"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * reps,
        });
        let mut enc = b.device().create_command_encoder(&Default::default());
        for r in 0..reps {
            enc.write_timestamp(&qs, 2 * r);
            for _ in 0..10 {
                enc.copy_buffer_to_buffer(&src, 0, &dst, 0, n);
            }
            enc.write_timestamp(&qs, 2 * r + 1);
        }
        b.queue().submit([enc.finish()]);
        wait(b);
        let ticks = read_ticks(b, &qs, 2 * reps);
        let times = (0..reps as usize)
            .map(|r| secs(ticks[2 * r + 1].wrapping_sub(ticks[2 * r])) / 10.0)
            .collect();
        2.0 * n as f64 / median(times) / 1e9
    });
    let mut enc = b.device().create_command_encoder(&Default::default());
    for _ in 0..20 {
        enc.copy_buffer_to_buffer(&src, 0, &dst, 0, n);
    }
    let t0 = Instant::now();
    b.queue().submit([enc.finish()]);
    wait(b);
    let buffer_wall = 2.0 * n as f64 / (t0.elapsed().as_secs_f64() / 20.0) / 1e9;
    let shader_stamped = b.has_timestamps().then(|| {
        let module = b
            .device()
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("copy"),
                source: wgpu::ShaderSource::Wgsl(COPY_WGSL.into()),
            });
        let pipeline = b
            .device()
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("copy"),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        let bg = b.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("copy"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: src.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: dst.as_entire_binding(),
                },
            ],
        });
        let vecs = n / 16;
        let groups = vecs.div_ceil(4 * 256);
        let gx = groups.clamp(1, 65535) as u32;
        let reps = 12u32;
        let qs = b.device().create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("copy shader"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * reps,
        });
        let mut enc = b.device().create_command_encoder(&Default::default());
        for r in 0..reps {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("copy"),
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &qs,
                    beginning_of_pass_write_index: Some(2 * r),
                    end_of_pass_write_index: Some(2 * r + 1),
                }),
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(gx, 1, 1);
        }
        b.queue().submit([enc.finish()]);
        wait(b);
        let ticks = read_ticks(b, &qs, 2 * reps);
        // The first two dispatches pay for pipeline warm-up.
        let times = (2..reps as usize)
            .map(|r| secs(ticks[2 * r + 1].wrapping_sub(ticks[2 * r])))
            .collect();
        2.0 * n as f64 / median(times) / 1e9
    });
    Ceiling {
        n,
        buffer_stamped,
        buffer_wall,
        shader_stamped,
        period_ns: period,
    }
}

/// The contents of `buf` (f32), read back.
fn read_f32(b: &WgpuBackend, buf: &wgpu::Buffer) -> Vec<f32> {
    let read = b.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("read"),
        size: buf.size(),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = b.device().create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buf, 0, &read, 0, buf.size());
    b.queue().submit([enc.finish()]);
    read.map_async(wgpu::MapMode::Read, .., |r| {
        if let Err(e) = r {
            fail(format!("map: {e}"));
        }
    });
    wait(b);
    let out = read
        .get_mapped_range(..)
        .unwrap_or_else(|e| fail(format!("read: {e}")))
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    read.unmap();
    out
}

/// The first 128 rows of `t` (one fp8 tile band), for the spot check.
fn head(t: &EncodedTensor) -> Option<EncodedTensor> {
    let n = t.rows.min(128);
    let spec = t.format.spec();
    let wr = spec.weight_range(0, n, t.cols).ok()?;
    let sr = spec.scale_range(0, n, t.rows, t.cols).ok()?;
    EncodedTensor::from_parts(
        t.format,
        n,
        t.cols,
        t.weights[wr].to_vec(),
        t.scales[sr].to_vec(),
        Some(t.rotation_seed),
    )
    .ok()
}

struct Timing {
    /// Median single-dispatch time from timestamps (None without timestamp queries).
    stamped: Option<f64>,
    /// Wall time of `reps` dispatches in one submission, divided by `reps`.
    queued: f64,
    /// Median time between encoder timestamps around each of `reps` dispatches queued
    /// back to back in one command buffer (one pass each; wgpu puts a barrier between
    /// them, as y is written by each): the Vulkan tier's bench method (None without
    /// TIMESTAMP_QUERY_INSIDE_ENCODERS).
    b2b: Option<f64>,
    /// `reps` dispatches in one compute pass bracketed by its two timestamps, divided by
    /// `reps`: wgpu puts a barrier between them (each writes y, a read-write storage
    /// binding), so none overlaps the next, as between the Vulkan tier's timestamped
    /// dispatches; without the pass begin and end of every dispatch (None without
    /// timestamp queries).
    one_pass: Option<f64>,
}

/// Times `reps` dispatches of `s` over the rotating copies `ws`.
fn time_gemv(
    b: &WgpuBackend,
    ws: &[GpuTensor],
    x: &wgpu::Buffer,
    y: &wgpu::Buffer,
    s: usize,
    rows: u32,
    opts: &Opts,
) -> Timing {
    let (reps, warm) = (opts.reps, opts.warm);
    let run = |enc: &mut wgpu::CommandEncoder, k: usize, stamps: Option<(&wgpu::QuerySet, u32)>| {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("gemv"),
            timestamp_writes: stamps.map(|(q, i)| wgpu::ComputePassTimestampWrites {
                query_set: q,
                beginning_of_pass_write_index: Some(i),
                end_of_pass_write_index: Some(i + 1),
            }),
        });
        if let Err(e) = b.encode_gemv(&mut pass, &ws[k % ws.len()], x, y, s, rows) {
            fail(e);
        }
    };
    // Warm-up: compiles the pipeline and touches every copy.
    let mut enc = b.device().create_command_encoder(&Default::default());
    for k in 0..ws.len().max(3) {
        run(&mut enc, k, None);
    }
    b.queue().submit([enc.finish()]);
    wait(b);
    // Sustained load until the clocks have ramped (see Opts::warm).
    let t_warm = Instant::now();
    while t_warm.elapsed() < warm {
        let mut enc = b.device().create_command_encoder(&Default::default());
        for k in 0..reps.max(100) {
            run(&mut enc, k, None);
        }
        b.queue().submit([enc.finish()]);
        wait(b);
    }
    // Queued: many dispatches, one submission.
    let mut enc = b.device().create_command_encoder(&Default::default());
    for k in 0..reps {
        run(&mut enc, k, None);
    }
    let t0 = Instant::now();
    b.queue().submit([enc.finish()]);
    wait(b);
    let queued = t0.elapsed().as_secs_f64() / reps as f64;
    let stamped = b.has_timestamps().then(|| {
        let n = 2 * reps as u32;
        let qs = b.device().create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("gemv"),
            ty: wgpu::QueryType::Timestamp,
            count: n,
        });
        let bytes = u64::from(n) * 8;
        let resolve = b.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("stamps"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let read = b.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("stamps read"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut times = Vec::with_capacity(reps);
        // One submission per dispatch, as the CUDA bench brackets single launches.
        for k in 0..reps {
            let mut enc = b.device().create_command_encoder(&Default::default());
            run(&mut enc, k, Some((&qs, 2 * k as u32)));
            b.queue().submit([enc.finish()]);
        }
        let mut enc = b.device().create_command_encoder(&Default::default());
        enc.resolve_query_set(&qs, 0..n, &resolve, 0);
        enc.copy_buffer_to_buffer(&resolve, 0, &read, 0, bytes);
        b.queue().submit([enc.finish()]);
        read.map_async(wgpu::MapMode::Read, .., |r| {
            if let Err(e) = r {
                fail(format!("map timestamps: {e}"));
            }
        });
        wait(b);
        let period = f64::from(b.queue().get_timestamp_period()) * 1e-9;
        {
            let view = read
                .get_mapped_range(..)
                .unwrap_or_else(|e| fail(format!("timestamps: {e}")));
            let ticks: Vec<u64> = view
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect();
            for k in 0..reps {
                times.push(ticks[2 * k + 1].wrapping_sub(ticks[2 * k]) as f64 * period);
            }
        }
        read.unmap();
        median(times)
    });
    let enc_stamps = b.has_timestamps()
        && b.device()
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
    let b2b = enc_stamps.then(|| {
        let n = reps as u32 + 1;
        let qs = b.device().create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("gemv b2b"),
            ty: wgpu::QueryType::Timestamp,
            count: n,
        });
        let mut enc = b.device().create_command_encoder(&Default::default());
        enc.write_timestamp(&qs, 0);
        for k in 0..reps {
            run(&mut enc, k, None);
            enc.write_timestamp(&qs, k as u32 + 1);
        }
        b.queue().submit([enc.finish()]);
        wait(b);
        let ticks = read_ticks(b, &qs, n);
        let period = f64::from(b.queue().get_timestamp_period()) * 1e-9;
        median(
            ticks
                .windows(2)
                .map(|w| w[1].wrapping_sub(w[0]) as f64 * period)
                .collect(),
        )
    });
    let one_pass = b.has_timestamps().then(|| {
        let qs = b.device().create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("gemv one pass"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let mut enc = b.device().create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("gemv one pass"),
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &qs,
                    beginning_of_pass_write_index: Some(0),
                    end_of_pass_write_index: Some(1),
                }),
            });
            for k in 0..reps {
                if let Err(e) = b.encode_gemv(&mut pass, &ws[k % ws.len()], x, y, s, rows) {
                    fail(e);
                }
            }
        }
        b.queue().submit([enc.finish()]);
        wait(b);
        let ticks = read_ticks(b, &qs, 2);
        let period = f64::from(b.queue().get_timestamp_period()) * 1e-9;
        ticks[1].wrapping_sub(ticks[0]) as f64 * period / reps as f64
    });
    Timing {
        stamped,
        queued,
        b2b,
        one_pass,
    }
}

struct Row {
    rows: usize,
    cols: usize,
    format: Format,
    s: usize,
    path: &'static str,
    rows_wg: u32,
    default: bool,
    t: Timing,
    bytes: u64,
    check: f64,
}

impl Row {
    fn secs(&self) -> f64 {
        self.t.stamped.unwrap_or(self.t.queued)
    }
}

fn main() {
    let opts = parse_args().unwrap_or_else(|e| fail(e));
    let base = Options::from_env();
    let b = match WgpuBackend::with_options(&base) {
        Ok(b) => b,
        Err(e) => {
            println!("skipped: {e}");
            return;
        }
    };
    // The shared-memory reduction too, where the default uses subgroups.
    let shm = if b.uses_subgroups() && opts.sweep {
        WgpuBackend::with_options(&Options {
            subgroups: Subgroups::Never,
            ..base.clone()
        })
        .ok()
    } else {
        None
    };
    // The f32 path of the kernels that can take packed int8 activations (old against new).
    let f32x = WgpuBackend::with_options(&Options {
        int8_activations: false,
        ..base.clone()
    })
    .ok()
    .filter(|_| base.int8_activations && !opts.default_only);
    let ceiling = copy_ceiling(&b, opts.copy_bytes);
    let copy = ceiling.gbps();
    println!(
        "adapter: {}; timestamps: {}; {}\n",
        b.describe(),
        b.has_timestamps(),
        ceiling.describe()
    );
    let mut rng = Rng::new(0x5EED);
    let mut out: Vec<Row> = Vec::new();
    for &(rows, cols) in &opts.shapes {
        let w = weights(&mut rng, rows, cols);
        for &format in &opts.formats {
            let t = encode(format, rows, cols, &w, &EncodeOptions::default())
                .unwrap_or_else(|e| fail(e));
            let mut variants: Vec<(&WgpuBackend, &'static str)> = vec![(
                &b,
                if b.uses_subgroups() {
                    "subgroup"
                } else {
                    "shared-memory"
                },
            )];
            if let Some(s) = &shm {
                variants.push((s, "shared-memory"));
            }
            if let Some(f) = &f32x
                && opts
                    .batches
                    .iter()
                    .any(|&s| b.uses_int8_activations(format, s))
            {
                variants.push((f, "subgroup, f32 x"));
            }
            for (dev, path) in variants {
                let first = dev.upload(&t.view()).unwrap_or_else(|e| fail(e));
                let bytes = first.weight_bytes() + first.scale_bytes();
                let copies = opts.rotate_bytes.div_ceil(bytes).max(2) as usize;
                let mut ws = vec![first];
                for _ in 1..copies {
                    ws.push(dev.upload(&t.view()).unwrap_or_else(|e| fail(e)));
                }
                for &s in &opts.batches {
                    let x = activations(&mut rng, s, cols);
                    let prepared = dev
                        .prepare_activations(&ws[0], &x, s)
                        .unwrap_or_else(|e| fail(e));
                    let xb = dev.device().create_buffer(&wgpu::BufferDescriptor {
                        label: Some("x"),
                        size: (prepared.len() * 4) as u64,
                        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    });
                    dev.queue()
                        .write_buffer(&xb, 0, bytemuck::cast_slice(&prepared));
                    let yb = dev.device().create_buffer(&wgpu::BufferDescriptor {
                        label: Some("y"),
                        size: (s * rows * 4) as u64,
                        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                        mapped_at_creation: false,
                    });
                    let spec =
                        kernel_for(format).unwrap_or_else(|| fail(format!("{format}: no kernel")));
                    let default_rows = spec.rows(s);
                    let mut rows_list = vec![default_rows];
                    if opts.sweep && std::ptr::eq(dev, &b) {
                        rows_list.extend(
                            [1u32, 2, 4, 8]
                                .into_iter()
                                .filter(|&r| r != default_rows && spec.admits(s, r)),
                        );
                    }
                    for rows_wg in rows_list {
                        let timing = time_gemv(dev, &ws, &xb, &yb, s, rows_wg, &opts);
                        // Spot check of this variant: the first 128 rows against the oracle.
                        let check = head(&t).map_or(f64::NAN, |h| {
                            let got = read_f32(dev, &yb);
                            let r = reference_gemm(&h.view(), &x, s);
                            let n = h.rows;
                            let mut ys = Vec::with_capacity(s * n);
                            for k in 0..s {
                                ys.extend_from_slice(&got[k * rows..k * rows + n]);
                            }
                            worst_error(&ys, &r).error
                        });
                        let row = Row {
                            rows,
                            cols,
                            format,
                            s,
                            path,
                            rows_wg,
                            default: std::ptr::eq(dev, &b) && rows_wg == default_rows,
                            t: timing,
                            bytes,
                            check,
                        };
                        let gbps = bytes as f64 / row.secs() / 1e9;
                        eprintln!(
                            "[{rows} x {cols}] {format} S={s} {path} rows/wg={rows_wg}: {:.1} us ({}), {gbps:.0} GB/s ({:.0}% of copy), queued {:.1} us, {copies} copies, check {check:.1e}",
                            row.secs() * 1e6,
                            if row.t.stamped.is_some() {
                                "timestamps"
                            } else {
                                "wall"
                            },
                            100.0 * gbps / copy,
                            row.t.queued * 1e6,
                        );
                        out.push(row);
                    }
                }
            }
        }
    }
    let line = |r: &Row, extra: bool| {
        let gbps = r.bytes as f64 / r.secs() / 1e9;
        let us_pct = |t: Option<f64>| {
            t.map_or((f64::NAN, f64::NAN), |t| {
                (t * 1e6, 100.0 * r.bytes as f64 / t / 1e9 / copy)
            })
        };
        let (b2b_us, b2b_pct) = us_pct(r.t.b2b);
        let (one_us, one_pct) = us_pct(r.t.one_pass);
        let mut s = format!(
            "| {} | {}x{} | {} | {:.1} | {gbps:.1} | {:.1}% | {b2b_us:.1} | {b2b_pct:.1}% | {one_us:.1} | {one_pct:.1}% |",
            r.format,
            r.rows,
            r.cols,
            r.s,
            r.secs() * 1e6,
            100.0 * gbps / copy
        );
        if extra {
            s.push_str(&format!(
                " {} | {} | {:.1} | {:.1e} |",
                r.path,
                r.rows_wg,
                r.t.queued * 1e6,
                r.check
            ));
        }
        s
    };
    println!("## wgpu GEMV, default kernels ({})\n", b.describe());
    println!(
        "| format | shape | S | us | GB/s (weight + scale bytes) | % of copy | us back to back | % of copy (back to back) | us in one pass | % of copy (one pass) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in out.iter().filter(|r| r.default) {
        println!("{}", line(r, false));
    }
    println!("\n## every variant (reduction path, rows per workgroup)\n");
    println!(
        "| format | shape | S | us | GB/s | % of copy | us b2b | % b2b | us 1 pass | % 1 pass | reduction | rows/wg | us queued | max err (128 rows) |"
    );
    println!(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for r in &out {
        println!("{}", line(r, true));
    }
    if let Ok(dir) = std::env::var("OUT") {
        let mut j = format!(
            "{{\n \"adapter\": {:?},\n \"timestamps\": {},\n \"copy_GBps\": {copy},\n \"rows\": [\n",
            b.describe(),
            b.has_timestamps()
        );
        for (k, r) in out.iter().enumerate() {
            j.push_str(&format!(
                "  {{\"format\": \"{}\", \"rows\": {}, \"cols\": {}, \"s\": {}, \"reduction\": \"{}\", \"rows_per_wg\": {}, \"default\": {}, \"us\": {}, \"us_queued\": {}, \"us_b2b\": {}, \"us_one_pass\": {}, \"bytes\": {}, \"check\": {}}}{}\n",
                r.format,
                r.rows,
                r.cols,
                r.s,
                r.path,
                r.rows_wg,
                r.default,
                r.secs() * 1e6,
                r.t.queued * 1e6,
                r.t.b2b.map_or("null".to_string(), |t| (t * 1e6).to_string()),
                r.t.one_pass
                    .map_or("null".to_string(), |t| (t * 1e6).to_string()),
                r.bytes,
                if r.check.is_finite() { r.check.to_string() } else { "null".into() },
                if k + 1 < out.len() { "," } else { "" }
            ));
        }
        j.push_str(" ]\n}\n");
        let path = std::path::Path::new(&dir).join("bench_gemv_wgpu.json");
        if let Err(e) = std::fs::write(&path, j) {
            eprintln!("bench_gemv: writing {}: {e}", path.display());
        }
    }
    if let Some(path) = &opts.record {
        let mut series = String::new();
        for r in out.iter().filter(|r| r.default) {
            if !series.is_empty() {
                series.push_str(",\n");
            }
            series.push_str(&format!(
                "  {{\"label\": \"{}\", \"kind\": \"ours\", \"s\": {}, \"points\": [{{\"shape\": \"{}x{}\", \"us\": {}, \"gbps\": {}}}]}}",
                r.format,
                r.s,
                r.rows,
                r.cols,
                r.secs() * 1e6,
                r.bytes as f64 / r.secs() / 1e9
            ));
        }
        let args: Vec<String> = std::env::args().skip(1).collect();
        let adapter = std::env::var("TESSERA_WGPU_ADAPTER").unwrap_or_default();
        let command = format!(
            "TESSERA_WGPU_ADAPTER={adapter} cargo run -p kernels-metal --release --example bench_gemv -- {}",
            args.join(" ")
        );
        let j = format!(
            "{{\n \"backend\": \"wgpu\",\n \"device\": {:?},\n \"date\": \"{}\",\n \"command\": {:?},\n \"ceiling\": {{\"name\": {:?}, \"gbps\": {}}},\n \"series\": [\n{series}\n ]\n}}\n",
            b.describe(),
            utc_now(),
            command,
            "wgpu copy (max of timestamped copy_buffer_to_buffer and vec4 copy shader), 2 x bytes (read + write) / t",
            copy
        );
        if let Err(e) = std::fs::write(path, j) {
            fail(format!("writing {path}: {e}"));
        }
    }
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (days to civil date: Howard Hinnant's
/// algorithm), so the bench needs no date crate.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
