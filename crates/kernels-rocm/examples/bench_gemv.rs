//! bench_gemv: Vulkan-tier GEMV timings against the copy ceiling measured through Vulkan in
//! the same process, on the adapter `TESSERA_VK_ADAPTER` picks.
//!
//! Convention (the same as kernels-cuda's bench_gemv and ../shared/anchors/anchor_gpu.py):
//! a copy of n bytes moves 2n bytes (read + write), `copy GB/s = 2n / t`, timed on a vec4
//! copy shader through Vulkan (the wgpu tier's; vkCmdCopyBuffer is printed beside it, but on
//! NVIDIA it reaches about a fifth of a shader copy, so it is not the ceiling); a GEMV must read
//! its stored weight + scale bytes, `weight GB/s = (weight + scale bytes) / t`; "% copy" is
//! their ratio. Times are GPU timestamps (vkCmdWriteTimestamp), medians over `reps`
//! dispatches queued in one command buffer with a compute barrier between dispatches (each
//! waits for the previous one, as on one CUDA stream; host launch latency is not included),
//! a timestamp after each; and ("us span") the mean over the same dispatches with
//! timestamps only before the first and after the last (`time_gemv_span`: the wgpu bench's
//! "one pass").
//! The dispatches rotate over weight copies totalling at least `--rotate-mb` (512 MB by
//! default), so no cache holds the next dispatch's weights. Before timing, the first 128
//! output rows of each (format, S) are checked against the f64 oracle. Where a kernel can
//! take packed int8 activations (int4-row, int4-g* and the affine256 formats at S = 1, on a
//! device with integer dot products), both paths are timed: "f32 x" (the float path) and
//! then "i8 x" (`dot4I8Packed`, the default).
//!
//! Usage: bench_gemv [--quick] [--reps N] [--formats a,b] [--batches 1,16]
//!                   [--shapes 6144x16384,...] [--copy-mb N] [--rotate-mb N] [--warm-ms 1500]
//! Prints a markdown table; with $OUT set also writes $OUT/bench_gemv_vulkan.json. Without
//! a Vulkan device it prints "skipped: ..." and exits 0.

use kernels_rocm::{DeviceTensor, VulkanBackend, VulkanError};
use quant_core::oracle::{reference_gemm, worst_error};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, EncodedTensor, Format, encode};
use std::fmt::Write as _;

const FORMATS: [Format; 5] = [
    Format::Int4Row,
    Format::Int4G64,
    Format::Int8Row,
    Format::Fp8E4m3B128,
    Format::Mq4G256V2,
];

struct Opts {
    reps: usize,
    formats: Vec<Format>,
    batches: Vec<usize>,
    shapes: Vec<(usize, usize)>,
    copy_mb: u64,
    rotate_mb: usize,
    /// Sustained timing runs of the kernel under test, discarded, before it is timed: at
    /// least this long (default 1500 ms), then until the times settle (`warm_up`). The H200
    /// drops its SM clock to 345 MHz about 2 s after the GPU goes idle (the host encodes each
    /// format's weights meanwhile); with 300 ms the first kernel after such a gap was
    /// sometimes timed at that clock, 4-5x slow (docs/VULKAN.md).
    warm_ms: u64,
    /// `--default-only`: time only the path a user gets (packed int8 x where it applies),
    /// not the f32 path beside it.
    default_only: bool,
}

fn list<T>(v: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    v.split(',').map(|s| f(s.trim())).collect()
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        reps: 30,
        formats: FORMATS.to_vec(),
        batches: vec![1, 16],
        shapes: vec![(6144, 16384)],
        copy_mb: 1024,
        rotate_mb: 512,
        warm_ms: 1500,
        default_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        let num = |s: &str| s.parse::<usize>().map_err(|e| format!("{s}: {e}"));
        match a.as_str() {
            "--warm-ms" => o.warm_ms = num(&value()?)? as u64,
            "--quick" => {
                o.reps = 8;
                o.copy_mb = 256;
            }
            "--reps" => o.reps = num(&value()?)?.max(1),
            "--formats" => {
                o.formats = list(&value()?, |s| {
                    s.parse::<Format>().map_err(|e| e.to_string())
                })?
            }
            "--batches" => o.batches = list(&value()?, num)?,
            "--shapes" => {
                o.shapes = list(&value()?, |s| {
                    let (a, b) = s
                        .split_once('x')
                        .ok_or(format!("shape {s}: expected OxI"))?;
                    Ok((num(a)?, num(b)?))
                })?
            }
            "--copy-mb" => o.copy_mb = num(&value()?)? as u64,
            "--rotate-mb" => o.rotate_mb = num(&value()?)?,
            "--default-only" => o.default_only = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(o)
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("bench_gemv: {e}");
    std::process::exit(1)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The first 128 rows of `t` (a whole fp8 tile band) as their own tensor.
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

/// Worst oracle error over the first 128 rows of y = x W^T at batch `s`.
fn spot_check(
    b: &VulkanBackend,
    t: &EncodedTensor,
    w: &DeviceTensor,
    x: &[f32],
    s: usize,
) -> Result<f64, VulkanError> {
    let y = b.gemv(w, x, s)?;
    let Some(h) = head(t) else {
        return Ok(f64::NAN);
    };
    let r = reference_gemm(&h.view(), x, s);
    let n = h.rows;
    let mut sub = Vec::with_capacity(s * n);
    for k in 0..s {
        sub.extend_from_slice(&y[k * t.rows..k * t.rows + n]);
    }
    Ok(worst_error(&sub, &r).error)
}

struct Row {
    format: Format,
    path: &'static str,
    rows: usize,
    cols: usize,
    s: usize,
    secs: f64,
    /// Mean seconds a dispatch with timestamps only at both ends (`time_gemv_span`).
    span: f64,
    bytes: usize,
    check: f64,
}

/// Runs the kernel under test until the GPU's clock has settled: at least `--warm-ms`, then
/// until two medians taken at least 500 ms apart agree within 1% (at most 10 s). On the H200
/// the SM clock falls to 345 MHz while the host encodes the next format and climbs back over
/// about 3 s of this load (nvidia-smi every 200 ms, session 12: docs/VULKAN.md); the 4-bit
/// kernels, which issue more instructions a byte than the 8-bit ones, were timed on that
/// ramp after a fixed 1500 ms (int4-row 20 to 38 us from call to call).
///
/// Each round is one submission of about 50 ms of back-to-back dispatches
/// (`time_gemv_span`). Rounds of 100 timestamped dispatches, each preceded by the host's
/// ordinary call per weight copy, kept the GPU busy less than half the time, and the driver
/// then held the SM clock at 1300-1635 MHz through the whole run (session 13, nvidia-smi
/// every 250 ms; int4-row 26.4 us against 19.1 through wgpu in the same call).
fn warm_up(b: &VulkanBackend, refs: &[&DeviceTensor], x: &[f32], s: usize, opts: &Opts) {
    let start = std::time::Instant::now();
    let mut last: Option<(std::time::Instant, f64)> = None;
    let mut reps = opts.reps.max(100);
    loop {
        let t = b
            .time_gemv_span(refs, x, s, reps)
            .unwrap_or_else(|e| fail(e));
        if t > 0.0 {
            reps = ((0.05 / t) as usize).clamp(100, 20_000);
        }
        let now = std::time::Instant::now();
        let ms = start.elapsed().as_millis();
        match last {
            Some((at, prev)) if now.duration_since(at).as_millis() >= 500 => {
                if (ms >= u128::from(opts.warm_ms) && (t - prev).abs() <= 0.01 * prev)
                    || ms >= 10_000
                {
                    return;
                }
                last = Some((now, t));
            }
            Some(_) => {}
            None => last = Some((now, t)),
        }
    }
}

fn main() {
    let opts = parse_args().unwrap_or_else(|e| fail(e));
    let mut b = match VulkanBackend::new() {
        Ok(b) => b,
        Err(e) if e.is_unavailable() => {
            println!("skipped: {e}");
            return;
        }
        Err(e) => fail(e),
    };
    let info = b.info().clone();
    let copy_bytes = opts.copy_mb << 20;
    let copy_reps = opts.reps.clamp(3, 12);
    let shader_t = median(
        b.time_copy_shader(copy_bytes, copy_reps)
            .unwrap_or_else(|e| fail(e)),
    );
    let copy = 2.0 * copy_bytes as f64 / shader_t / 1e9;
    let cmd_t = median(
        b.time_copy(copy_bytes, copy_reps)
            .unwrap_or_else(|e| fail(e)),
    );
    let cmd_copy = 2.0 * copy_bytes as f64 / cmd_t / 1e9;
    println!("adapter: {}", info.summary());
    if !info.driver_info.is_empty() {
        println!("driver: {} {}", info.driver, info.driver_info);
    }
    println!(
        "copy ceiling: vec4 copy shader of {} MiB through Vulkan, {copy:.1} GB/s (2 x bytes / t, median of {copy_reps}); vkCmdCopyBuffer {cmd_copy:.1} GB/s (not the ceiling)",
        opts.copy_mb,
    );
    println!(
        "gemv: median of {} timestamped dispatches rotating over >= {} MB of weight copies\n",
        opts.reps, opts.rotate_mb
    );
    println!(
        "| format | x | shape | S | us | GB/s | % of copy | us span | % of copy (span) | check (worst err, 128 rows) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut rng = Rng::new(0x5EED);
    let mut results = Vec::new();
    for &(rows, cols) in &opts.shapes {
        let w = weights(&mut rng, rows, cols);
        for &format in &opts.formats {
            let t = encode(format, rows, cols, &w, &EncodeOptions::default())
                .unwrap_or_else(|e| fail(e));
            let first = b.upload(&t.view()).unwrap_or_else(|e| fail(e));
            let copies = (opts.rotate_mb << 20).div_ceil(first.stored_bytes()).max(2);
            let mut ws: Vec<DeviceTensor> = Vec::with_capacity(copies);
            for _ in 1..copies {
                ws.push(b.duplicate(&first).unwrap_or_else(|e| fail(e)));
            }
            ws.push(first);
            let refs: Vec<&DeviceTensor> = ws.iter().collect();
            for &s in &opts.batches {
                let x = activations(&mut rng, s, cols);
                let paths: &[(bool, &'static str)] =
                    if kernels_metal::kernels::int8_activations(format, s)
                        && info.integer_dot_product
                    {
                        if opts.default_only {
                            &[(true, "i8")]
                        } else {
                            &[(false, "f32"), (true, "i8")]
                        }
                    } else {
                        &[(true, "f32")]
                    };
                for &(int8_x, path) in paths {
                    b.set_int8_activations(int8_x);
                    let last = refs.last().copied().unwrap_or_else(|| fail("no copies"));
                    let check = spot_check(&b, &t, last, &x, s).unwrap_or_else(|e| fail(e));
                    warm_up(&b, &refs, &x, s, &opts);
                    let secs = median(
                        b.time_gemv(&refs, &x, s, opts.reps)
                            .unwrap_or_else(|e| fail(e)),
                    );
                    let span = b
                        .time_gemv_span(&refs, &x, s, opts.reps)
                        .unwrap_or_else(|e| fail(e));
                    let bytes = last.stored_bytes();
                    let gbs = bytes as f64 / secs / 1e9;
                    println!(
                        "| {format} | {path} | {rows}x{cols} | {s} | {:.1} | {gbs:.1} | {:.1}% | {:.1} | {:.1}% | {check:.1e} |",
                        secs * 1e6,
                        100.0 * gbs / copy,
                        span * 1e6,
                        100.0 * bytes as f64 / span / 1e9 / copy
                    );
                    results.push(Row {
                        format,
                        path,
                        rows,
                        cols,
                        s,
                        secs,
                        span,
                        bytes,
                        check,
                    });
                }
            }
        }
    }
    // The copy shader over each timed tensor's own byte count (50-100 MB here, against the
    // ceiling's 1 GiB): how much of the ceiling a pass of that size reaches at all.
    let mut sizes: Vec<u64> = results.iter().map(|r| r.bytes as u64).collect();
    sizes.sort_unstable();
    sizes.dedup();
    if !sizes.is_empty() {
        println!("\n| copy shader of n bytes | us | GB/s (2 n / t) | % of the ceiling |");
        println!("| --- | --- | --- | --- |");
    }
    for n in sizes {
        let t = median(
            b.time_copy_shader(n, opts.reps.max(3))
                .unwrap_or_else(|e| fail(e)),
        );
        let gbs = 2.0 * n as f64 / t / 1e9;
        println!(
            "| {n} | {:.1} | {gbs:.1} | {:.1}% |",
            t * 1e6,
            100.0 * gbs / copy
        );
    }
    if let Some(out) = std::env::var_os("OUT") {
        let mut j = String::new();
        let _ = write!(
            j,
            "{{\n  \"adapter\": {:?},\n  \"copy_gbs\": {copy},\n  \"copy_ceiling\": \"vec4 copy shader\",\n  \"cmd_copy_gbs\": {cmd_copy},\n  \"rows\": [\n",
            info.summary()
        );
        for (k, r) in results.iter().enumerate() {
            let _ = writeln!(
                j,
                "    {{\"format\": \"{}\", \"x\": \"{}\", \"rows\": {}, \"cols\": {}, \"s\": {}, \"us\": {}, \"us_span\": {}, \"bytes\": {}, \"gbs\": {}, \"check\": {}}}{}",
                r.format,
                r.path,
                r.rows,
                r.cols,
                r.s,
                r.secs * 1e6,
                r.span * 1e6,
                r.bytes,
                r.bytes as f64 / r.secs / 1e9,
                if r.check.is_finite() {
                    format!("{:e}", r.check)
                } else {
                    "null".into()
                },
                if k + 1 < results.len() { "," } else { "" }
            );
        }
        j.push_str("  ]\n}\n");
        let path = std::path::Path::new(&out).join("bench_gemv_vulkan.json");
        if let Err(e) = std::fs::write(&path, j) {
            eprintln!("bench_gemv: {}: {e}", path.display());
        }
    }
    print_pipeline_statistics(&b);
    let bad: Vec<&Row> = results
        .iter()
        .filter(|r| r.check.is_nan() || r.check > 1e-4)
        .collect();
    if !bad.is_empty() {
        fail(format!(
            "{} timed kernels failed the oracle spot check (worst {:?})",
            bad.len(),
            bad.iter()
                .map(|r| (r.format.name(), r.s, r.check))
                .collect::<Vec<_>>()
        ));
    }
}

/// With `TESSERA_VK_PIPELINE_STATS=1`: what the driver reported for every pipeline the run
/// created (registers and the like: docs/VULKAN.md), one line each.
fn print_pipeline_statistics(b: &VulkanBackend) {
    if std::env::var("TESSERA_VK_PIPELINE_STATS").as_deref() != Ok("1") {
        return;
    }
    let Some(all) = b.context().pipeline_statistics() else {
        println!(
            "pipeline statistics: not offered by this device (VK_KHR_pipeline_executable_properties)"
        );
        return;
    };
    println!("\npipeline statistics (the driver's names and values):\n");
    for (key, stats) in all {
        let list: Vec<String> = stats
            .iter()
            .map(|s| format!("{} = {}", s.name, s.value))
            .collect();
        println!("- `{key}`: {}", list.join("; "));
    }
}
