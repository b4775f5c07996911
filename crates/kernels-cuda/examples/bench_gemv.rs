//! bench_gemv: CUDA GEMV timings at the issue-4 shapes, against the device-to-device copy
//! bandwidth measured in the same process.
//!
//! Convention (the same as ../shared/anchors/anchor_gpu.py, so the figures compare with its
//! peers): a copy of n bytes moves 2n bytes (read + write), `copy GB/s = 2n / t`; a GEMV
//! must read its stored weight + scale bytes, `weight GB/s = (weight + scale bytes) / t`;
//! "% copy" is their ratio. Times are medians of single launches bracketed by CUDA events,
//! each followed by a synchronize (as anchor_gpu.py times torch). Weight copies rotate
//! through at least 512 MB so the 60 MB L2 never holds the next launch's weights.
//!
//! Usage: bench_gemv [--quick] [--formats a,b] [--batches 1,16] [--shapes 4096x4096,...]
//! Prints a markdown table; with $OUT set also writes $OUT/bench_gemv.json. Without a GPU
//! it prints "skipped: ..." and exits 0.

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream};
use kernels_cuda::{CudaBackend, CudaError, DeviceTensor, KernelPath};
use quant_core::oracle::{reference_gemm, worst_error};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, EncodedTensor, Format, encode};
use std::sync::Arc;

const SHAPES: [(usize, usize); 5] = [
    (4096, 4096),
    (14336, 4096),
    (4096, 14336),
    (6144, 16384),
    (16384, 6144),
];
const FORMATS: [Format; 5] = [
    Format::Int4Row,
    Format::Int4G64,
    Format::Mq4G256V2,
    Format::Fp8E4m3B128,
    Format::Int8Row,
];
const ROTATE_BYTES: usize = 512 << 20;

struct Opts {
    reps: usize,
    formats: Vec<Format>,
    batches: Vec<usize>,
    shapes: Vec<(usize, usize)>,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        reps: 50,
        formats: FORMATS.to_vec(),
        batches: vec![1, 16],
        shapes: SHAPES.to_vec(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => o.reps = 10,
            "--formats" => {
                o.formats = value()?
                    .split(',')
                    .map(|f| f.parse::<Format>().map_err(|e| e.to_string()))
                    .collect::<Result<_, _>>()?
            }
            "--batches" => {
                o.batches = value()?
                    .split(',')
                    .map(|s| s.parse::<usize>().map_err(|e| e.to_string()))
                    .collect::<Result<_, _>>()?
            }
            "--shapes" => {
                o.shapes = value()?
                    .split(',')
                    .map(|s| {
                        let (a, b) = s
                            .split_once('x')
                            .ok_or(format!("shape {s}: expected OxI"))?;
                        Ok((
                            a.parse().map_err(|e| format!("{e}"))?,
                            b.parse().map_err(|e| format!("{e}"))?,
                        ))
                    })
                    .collect::<Result<_, String>>()?
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds of `f` over `reps` single calls, each bracketed by events and synced.
fn time(
    b: &CudaBackend,
    reps: usize,
    warm: usize,
    mut f: impl FnMut(usize) -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    let stream: &Arc<CudaStream> = b.stream();
    let drv = |during| {
        move |e| CudaError::Driver {
            during,
            detail: format!("{e:?}"),
        }
    };
    for k in 0..warm {
        f(k)?;
    }
    stream.synchronize().map_err(drv("warm-up"))?;
    let mut ts = Vec::with_capacity(reps);
    for k in 0..reps {
        let a = b
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv("event"))?;
        let e = b
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv("event"))?;
        a.record(stream).map_err(drv("event record"))?;
        f(warm + k)?;
        e.record(stream).map_err(drv("event record"))?;
        stream.synchronize().map_err(drv("timed call"))?;
        ts.push(a.elapsed_ms(&e).map_err(drv("event time"))? as f64 * 1e-3);
    }
    Ok(median(ts))
}

/// Seconds per call of `n` calls of `f` queued back to back between one pair of events:
/// the GPU time without the host's launch latency (which the single-launch figure, like
/// anchor_gpu.py's, includes). Reported next to it, not instead of it.
fn time_queued(
    b: &CudaBackend,
    n: usize,
    mut f: impl FnMut(usize) -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    let stream: &Arc<CudaStream> = b.stream();
    let drv = |during| {
        move |e| CudaError::Driver {
            during,
            detail: format!("{e:?}"),
        }
    };
    f(0)?;
    stream.synchronize().map_err(drv("warm-up"))?;
    let a = b
        .context()
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(drv("event"))?;
    let e = b
        .context()
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(drv("event"))?;
    a.record(stream).map_err(drv("event record"))?;
    for k in 0..n {
        f(1 + k)?;
    }
    e.record(stream).map_err(drv("event record"))?;
    stream.synchronize().map_err(drv("queued calls"))?;
    Ok(a.elapsed_ms(&e).map_err(drv("event time"))? as f64 * 1e-3 / n as f64)
}

fn copy_bandwidth(b: &CudaBackend, reps: usize) -> Result<f64, CudaError> {
    let n = 1usize << 30;
    let drv = |during| {
        move |e| CudaError::Driver {
            during,
            detail: format!("{e:?}"),
        }
    };
    let src: CudaSlice<u8> = b.stream().alloc_zeros(n).map_err(drv("allocating 1 GiB"))?;
    let mut dst: CudaSlice<u8> = b.stream().alloc_zeros(n).map_err(drv("allocating 1 GiB"))?;
    let t = time(b, reps.min(20), 3, |_| {
        b.stream().memcpy_dtod(&src, &mut dst).map_err(drv("copy"))
    })?;
    Ok(2.0 * n as f64 / t / 1e9)
}

/// The first 128 rows of `t` (a whole fp8 tile band) as their own tensor, for a spot check
/// of the big-shape output against the f64 oracle.
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

struct Row {
    rows: usize,
    cols: usize,
    format: Format,
    s: usize,
    path: &'static str,
    secs: f64,
    queued: f64,
    bytes: usize,
    check: f64,
}

fn main() {
    let opts = parse_args().unwrap_or_else(|e| fail(e));
    let b = match CudaBackend::new() {
        Ok(b) => b,
        Err(e) if e.is_unavailable() => {
            println!("skipped: {e}");
            return;
        }
        Err(e) => fail(e),
    };
    let copy = copy_bandwidth(&b, opts.reps).unwrap_or_else(|e| fail(e));
    println!(
        "device {} ({}); device-to-device copy {copy:.0} GB/s (2 x 1 GiB / t)",
        b.device_name(),
        b.arch()
    );
    let mut rng = Rng::new(0x5EED);
    let mut results = Vec::new();
    for &(rows, cols) in &opts.shapes {
        let w = weights(&mut rng, rows, cols);
        for &format in &opts.formats {
            let t = encode(format, rows, cols, &w, &EncodeOptions::default())
                .unwrap_or_else(|e| fail(e));
            let first = b.upload(&t.view()).unwrap_or_else(|e| fail(e));
            let copies = ROTATE_BYTES.div_ceil(first.stored_bytes()).max(2);
            let mut ws: Vec<DeviceTensor> = Vec::with_capacity(copies);
            for _ in 1..copies {
                ws.push(b.duplicate(&first).unwrap_or_else(|e| fail(e)));
            }
            ws.push(first);
            for &s in &opts.batches {
                let x = activations(&mut rng, s, cols);
                let xa = b
                    .upload_activations(&ws[0], &x, s)
                    .unwrap_or_else(|e| fail(e));
                // The default path, and the CUDA-core kernel too where the default is the
                // tensor cores, for comparison.
                let mut paths = vec![(KernelPath::Auto, "cuda cores")];
                if ws[0].uses_tensor_cores(s) {
                    paths = vec![
                        (KernelPath::Auto, "tensor cores"),
                        (KernelPath::CudaCores, "cuda cores"),
                    ];
                }
                for (path, path_name) in paths {
                    let mut y = b.poisoned_output(&ws[0], s).unwrap_or_else(|e| fail(e));
                    let secs = time(&b, opts.reps, 5, |k| {
                        b.gemv_launch_path(&ws[k % ws.len()], &xa, &mut y, path)
                    })
                    .unwrap_or_else(|e| fail(e));
                    let queued = time_queued(&b, opts.reps, |k| {
                        b.gemv_launch_path(&ws[k % ws.len()], &xa, &mut y, path)
                    })
                    .unwrap_or_else(|e| fail(e));
                    // Spot check: the first 128 rows of the last output against the oracle.
                    let yh = b
                        .stream()
                        .clone_dtoh(&y)
                        .unwrap_or_else(|e| fail(format!("{e:?}")));
                    let check = head(&t).map_or(f64::NAN, |h| {
                        let r = reference_gemm(&h.view(), &x, s);
                        let n = h.rows;
                        let mut ys = Vec::with_capacity(s * n);
                        for k in 0..s {
                            ys.extend_from_slice(&yh[k * rows..k * rows + n]);
                        }
                        worst_error(&ys, &r).error
                    });
                    let row = Row {
                        rows,
                        cols,
                        format,
                        s,
                        path: path_name,
                        secs,
                        queued,
                        bytes: ws[0].stored_bytes(),
                        check,
                    };
                    let gbps = row.bytes as f64 / secs / 1e9;
                    eprintln!(
                        "[{rows} x {cols}] {format} S={s} {path_name}: {:.1} us, {gbps:.0} GB/s ({:.0}% of copy), {copies} copies, check {check:.1e}",
                        secs * 1e6,
                        100.0 * gbps / copy
                    );
                    results.push(row);
                }
            }
            drop(ws);
        }
    }
    println!();
    println!(
        "| shape | format | S | kernel | us | weight GB/s | % of copy | us queued | % of copy queued | max err (128 rows) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in &results {
        let gbps = r.bytes as f64 / r.secs / 1e9;
        println!(
            "| {} x {} | {} | {} | {} | {:.1} | {:.0} | {:.0}% | {:.1} | {:.0}% | {:.1e} |",
            r.rows,
            r.cols,
            r.format,
            r.s,
            r.path,
            r.secs * 1e6,
            gbps,
            100.0 * gbps / copy,
            r.queued * 1e6,
            100.0 * (r.bytes as f64 / r.queued / 1e9) / copy,
            r.check
        );
    }
    if let Ok(dir) = std::env::var("OUT") {
        let mut json = format!(
            "{{\n \"device\": \"{}\",\n \"arch\": \"{}\",\n \"copy_GBps\": {copy},\n \"rows\": [\n",
            b.device_name(),
            b.arch()
        );
        for (k, r) in results.iter().enumerate() {
            json.push_str(&format!(
                "  {{\"O\": {}, \"I\": {}, \"format\": \"{}\", \"S\": {}, \"kernel\": \"{}\", \"us\": {}, \"us_queued\": {}, \"bytes\": {}, \"GBps\": {}, \"max_err_head\": {}}}{}\n",
                r.rows,
                r.cols,
                r.format,
                r.s,
                r.path,
                r.secs * 1e6,
                r.queued * 1e6,
                r.bytes,
                r.bytes as f64 / r.secs / 1e9,
                if r.check.is_finite() { format!("{}", r.check) } else { "null".into() },
                if k + 1 < results.len() { "," } else { "" }
            ));
        }
        json.push_str(" ]\n}\n");
        let path = std::path::Path::new(&dir).join("bench_gemv.json");
        if let Err(e) = std::fs::write(&path, json) {
            eprintln!("bench_gemv: writing {}: {e}", path.display());
        }
    }
}
