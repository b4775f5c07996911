//! bench_gemm: CUDA GEMM timings (S >= 17) at the issue-4 shapes, both activation
//! precisions, against cuBLAS bf16 measured by `anchor_gemm.py` in the same device call.
//!
//! Conventions as bench_gemv (bench_common): medians of single launches bracketed by CUDA
//! events, and the queued figure (launches back to back, no host latency); weight copies
//! rotate through at least 256 MB. The rate is 2 S O I / t, the useful multiply-adds
//! (the split precision does twice as many on the tensor cores). Each row spot-checks the
//! first 128 output rows of the first 32 activations against the f64 oracle.
//!
//! Usage: bench_gemm [--quick] [--formats a,b] [--batches 128,512] [--shapes 4096x4096,...]
//!                   [--tunings default,s4f4st3,s8f8st4b2c100,...]
//! `--tunings` compares GEMM tilings (`s<n8 tiles, split>f<n8 tiles, f16>st<stages>`, then
//! optionally `b<min blocks an SM>d<weight stages>c<shared carveout %>z<k splits>w<warps>`, see
//! `kernels_cuda::Tuning`), each on its own backend. Prints a markdown table; with $OUT set also writes $OUT/bench_gemm.json. Without a GPU
//! it prints "skipped: ..." and exits 0.

mod bench_common;

use bench_common::{check_head, fail, parse_shapes, time, time_queued, tuning_fields};
use kernels_cuda::{CudaBackend, DeviceTensor, GemmPrecision, Tuning};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, Format, encode};

const SHAPES: [(usize, usize); 5] = [
    (4096, 4096),
    (14336, 4096),
    (4096, 14336),
    (6144, 16384),
    (16384, 6144),
];
const FORMATS: [Format; 5] = [
    Format::Int8Row,
    Format::Int4Row,
    Format::Int4G64,
    Format::Fp8E4m3B128,
    Format::Mq4G256V2,
];
const ROTATE_BYTES: usize = 256 << 20;

/// "default", or s<nt split>f<nt f16>st<stages>[b<min blocks>][d<weight depth>][c<carveout %>]
/// [z<k splits>][w<warps>][g<0: mma.sync, 1: warpgroup MMA for the row formats, 2: for all>], e.g. "s8f4st4" or "s8f8st4b2c100" or "s8f8st4z0" (split by the rule).
fn parse_tuning(name: &str) -> Result<Tuning, String> {
    if name == "default" {
        return Ok(Tuning::default());
    }
    let bad =
        || format!("tuning {name}: expected s<n>f<n>st<n>[b<n>][d<n>][c<n>][z<n>][w<n>][g<0|1|2>]");
    let rest = name.strip_prefix('s').ok_or_else(bad)?;
    let (a, rest) = rest.split_once('f').ok_or_else(bad)?;
    let (b, rest) = rest.split_once("st").ok_or_else(bad)?;
    let num = |v: &str| v.parse::<u32>().map_err(|_| bad());
    // The stage count, then optional letter-number pairs.
    let fields = tuning_fields('s', rest);
    let mut t = Tuning {
        gemm_nt_split: num(a)?,
        gemm_nt_f16: num(b)?,
        ..Tuning::default()
    };
    for (k, v) in &fields {
        match k {
            's' => t.gemm_stages = num(v)?,
            'b' => t.gemm_min_blocks = num(v)?,
            'd' => t.gemm_depth = num(v)?,
            'c' => t.shared_carveout = Some(num(v)?),
            // z0: layout::gemm_splits' rule.
            'z' => t.gemm_split_k = Some(num(v)?).filter(|&z| z != 0),
            'w' => t.gemm_warps = num(v)?,
            'g' => {
                // 0: mma.sync; 1: the warpgroup MMA for the row formats only; 2: for all.
                let g = num(v)?;
                t.gemm_wgmma = g >= 1;
                t.gemm_wgmma_scaled = g == 2;
            }
            _ => return Err(bad()),
        }
    }
    t.check()?;
    Ok(t)
}

struct Row {
    tuning: String,
    rows: usize,
    cols: usize,
    format: Format,
    s: usize,
    precision: GemmPrecision,
    tensor_cores: bool,
    secs: f64,
    queued: f64,
    check: f64,
}

fn main() {
    let mut reps = 30;
    let mut formats = FORMATS.to_vec();
    let mut batches = vec![512];
    let mut shapes = SHAPES.to_vec();
    let mut tunings = vec![("default".to_string(), Tuning::default())];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| fail(format!("{a} needs a value")))
        };
        match a.as_str() {
            "--quick" => reps = 8,
            "--formats" => {
                formats = value()
                    .split(',')
                    .map(|f| f.parse::<Format>().unwrap_or_else(|e| fail(e)))
                    .collect()
            }
            "--batches" => {
                batches = value()
                    .split(',')
                    .map(|s| s.parse::<usize>().unwrap_or_else(|e| fail(e)))
                    .collect()
            }
            "--shapes" => shapes = parse_shapes(&value()).unwrap_or_else(|e| fail(e)),
            "--tunings" => {
                tunings = value()
                    .split(',')
                    .map(|n| (n.to_string(), parse_tuning(n).unwrap_or_else(|e| fail(e))))
                    .collect()
            }
            other => fail(format!("unknown argument {other}")),
        }
    }
    let backends: Vec<(String, CudaBackend)> = match tunings
        .iter()
        .map(|(n, t)| CudaBackend::with_tuning(t.clone()).map(|b| (n.clone(), b)))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(b) => b,
        Err(e) if e.is_unavailable() => {
            println!("skipped: {e}");
            return;
        }
        Err(e) => fail(e),
    };
    let b0 = &backends[0].1;
    println!("device {} ({})", b0.device_name(), b0.arch());
    let precisions = GemmPrecision::ALL;
    let t0 = std::time::Instant::now();
    for (_, b) in &backends {
        b.prewarm_gemm(&formats, &precisions, &batches)
            .unwrap_or_else(|e| fail(e));
    }
    eprintln!("NVRTC builds ready in {:.1} s", t0.elapsed().as_secs_f64());
    let mut rng = Rng::new(0x6E33);
    let mut results = Vec::new();
    for &(rows, cols) in &shapes {
        let w = weights(&mut rng, rows, cols);
        let xs: Vec<Vec<f32>> = batches
            .iter()
            .map(|&s| activations(&mut rng, s, cols))
            .collect();
        for &format in &formats {
            let t = encode(format, rows, cols, &w, &EncodeOptions::default())
                .unwrap_or_else(|e| fail(e));
            for (tuning, b) in &backends {
                let first = b.upload(&t.view()).unwrap_or_else(|e| fail(e));
                let copies = ROTATE_BYTES.div_ceil(first.stored_bytes()).max(2);
                let mut ws: Vec<DeviceTensor> = Vec::with_capacity(copies);
                for _ in 1..copies {
                    ws.push(b.duplicate(&first).unwrap_or_else(|e| fail(e)));
                }
                ws.push(first);
                for (&s, x) in batches.iter().zip(&xs) {
                    for precision in precisions {
                        let xa = b
                            .upload_gemm_activations(&ws[0], x, s, precision)
                            .unwrap_or_else(|e| fail(e));
                        let mut y = b.poisoned_output(&ws[0], s).unwrap_or_else(|e| fail(e));
                        let secs = time(b, reps, 3, |k| {
                            b.gemm_launch(&ws[k % ws.len()], &xa, &mut y)
                        })
                        .unwrap_or_else(|e| fail(e));
                        let queued =
                            time_queued(b, reps, |k| b.gemm_launch(&ws[k % ws.len()], &xa, &mut y))
                                .unwrap_or_else(|e| fail(e));
                        let yh = b
                            .stream()
                            .clone_dtoh(&y)
                            .unwrap_or_else(|e| fail(format!("{e:?}")));
                        // The first 32 activations of the head rows (the f64 oracle over all
                        // 512 would take seconds a row).
                        let sc = s.min(32);
                        let check = check_head(&t, &x[..sc * cols], sc, &yh);
                        let row = Row {
                            tuning: tuning.clone(),
                            rows,
                            cols,
                            format,
                            s,
                            precision,
                            tensor_cores: xa.uses_tensor_cores(),
                            secs,
                            queued,
                            check,
                        };
                        eprintln!(
                            "[{rows} x {cols}] {format} S={s} {precision:?} {tuning}: {:.1} us, queued {:.1} us, {:.0} TFLOP/s, check {check:.1e}",
                            secs * 1e6,
                            queued * 1e6,
                            tflops(&row, queued)
                        );
                        results.push(row);
                    }
                }
            }
        }
    }
    println!();
    println!(
        "| shape | format | S | precision | tuning | us | TFLOP/s | us queued | TFLOP/s queued | max err (128 rows) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in &results {
        println!(
            "| {} x {} | {} | {} | {:?}{} | {} | {:.1} | {:.0} | {:.1} | {:.0} | {:.1e} |",
            r.rows,
            r.cols,
            r.format,
            r.s,
            r.precision,
            if r.tensor_cores { "" } else { " (cuda cores)" },
            r.tuning,
            r.secs * 1e6,
            tflops(r, r.secs),
            r.queued * 1e6,
            tflops(r, r.queued),
            r.check
        );
    }
    if let Ok(dir) = std::env::var("OUT") {
        let mut json = format!(
            "{{\n \"device\": \"{}\",\n \"arch\": \"{}\",\n \"rows\": [\n",
            b0.device_name(),
            b0.arch()
        );
        for (k, r) in results.iter().enumerate() {
            json.push_str(&format!(
                "  {{\"tuning\": \"{}\", \"O\": {}, \"I\": {}, \"format\": \"{}\", \"S\": {}, \"precision\": \"{:?}\", \"tensor_cores\": {}, \"us\": {}, \"us_queued\": {}, \"TFLOPs_queued\": {}, \"max_err_head\": {}}}{}\n",
                r.tuning,
                r.rows,
                r.cols,
                r.format,
                r.s,
                r.precision,
                r.tensor_cores,
                r.secs * 1e6,
                r.queued * 1e6,
                tflops(r, r.queued),
                if r.check.is_finite() { format!("{}", r.check) } else { "null".into() },
                if k + 1 < results.len() { "," } else { "" }
            ));
        }
        json.push_str(" ]\n}\n");
        let path = std::path::Path::new(&dir).join("bench_gemm.json");
        if let Err(e) = std::fs::write(&path, json) {
            eprintln!("bench_gemm: writing {}: {e}", path.display());
        }
    }
}

/// Useful rate, 2 S O I / t, in TFLOP/s.
fn tflops(r: &Row, secs: f64) -> f64 {
    2.0 * r.s as f64 * r.rows as f64 * r.cols as f64 / secs / 1e12
}
