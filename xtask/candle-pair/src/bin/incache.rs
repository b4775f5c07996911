//! Tessera's GEMV at S = 1 on one thread (or N) with the tensor resident in cache: what a kernel
//! computes per second when memory is not the limit, set beside `read-pair`'s streaming
//! figures to tell arithmetic from fetching (docs/PERF.md quotes both).
//!
//! Usage: `incache [FORMATS] [O] [I]` (defaults: int4-row, int4-g64, mq4-g256-v2,
//! fp8-e4m3-b128, int8-row; [1024 x 16384], about 8 MB of 4-bit weights, inside a 32 MB
//! L3). Each path a format has (exact, and int8-act where it exists) is called 50 times to
//! warm up, then timed over 300 calls in a one-thread rayon pool (`TESSERA_INCACHE_THREADS`,
//! below, for more). Output, one line each: `<format> <path> <O>x<I> <N> thread(s) in cache:
//! <median> us, <GB/s> GB/s, min <fastest> us` (the fastest call is the steadier figure on a shared VM: interference only adds time).
//! `TESSERA_INCACHE_UNIFORM=1` replaces `testdata::weights` (outlier rows, many small codes)
//! by uniform weights in [-1, 1). `TESSERA_INCACHE_THREADS=N` runs the pool with N threads
//! instead of one (what the cores compute together, against `read-pair`'s two-thread
//! streams). `TESSERA_INCACHE_OFFSET=M` (0..64) copies the weights to start M bytes past a
//! cache line: the encoder's buffers, like any large `Vec` from glibc's allocator, start 16
//! bytes past one, and a 64-byte load there always splits two lines.

use quant_core::kernels::{KernelPath, gemm_with, has_int8_activations};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, Format, QTensor, encode};
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("incache: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let formats = args.first().map_or(
        "int4-row,int4-g64,mq4-g256-v2,fp8-e4m3-b128,int8-row",
        |s| s,
    );
    let dim = |k: usize, default: usize| -> Result<usize, String> {
        args.get(k).map_or(Ok(default), |s| {
            s.parse()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("expected a positive size, got {s:?}"))
        })
    };
    let (o, i) = (dim(1, 1024)?, dim(2, 16384)?);
    let mut rng = Rng::new(5);
    let mut w = weights(&mut rng, o, i);
    if std::env::var("TESSERA_INCACHE_UNIFORM").as_deref() == Ok("1") {
        let mut state = 12345u64;
        for v in &mut w {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *v = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
        }
    }
    let x = activations(&mut rng, 1, i);
    let threads = match std::env::var("TESSERA_INCACHE_THREADS") {
        Ok(v) => v.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
            format!("TESSERA_INCACHE_THREADS: expected a positive count, got {v:?}")
        })?,
        Err(_) => 1,
    };
    let offset = match std::env::var("TESSERA_INCACHE_OFFSET") {
        Ok(v) => Some(v.parse::<usize>().ok().filter(|&m| m < 64).ok_or_else(|| {
            format!("TESSERA_INCACHE_OFFSET: expected a byte offset below 64, got {v:?}")
        })?),
        Err(_) => None,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| format!("{threads}-thread pool: {e}"))?;
    for name in formats.split(',') {
        let format: Format = name.parse().map_err(|e| format!("format {name:?}: {e}"))?;
        let enc = encode(format, o, i, &w, &EncodeOptions::default())
            .map_err(|e| format!("encoding {name} [{o} x {i}]: {e}"))?;
        let bytes = enc.weights.len() + enc.scales.len();
        // The weights where the encoder left them, or copied to start `offset` bytes past a
        // cache line.
        let mut store = Vec::new();
        let weights: &[u8] = match offset {
            Some(m) => {
                store.resize(enc.weights.len() + 128, 0u8);
                let at = (64 - store.as_ptr() as usize % 64) % 64 + m;
                store[at..at + enc.weights.len()].copy_from_slice(&enc.weights);
                &store[at..at + enc.weights.len()]
            }
            None => &enc.weights,
        };
        let view = QTensor::new(format, o, i, weights, &enc.scales, enc.rotation_seed)
            .map_err(|e| format!("{name}: {e}"))?;
        let mut paths = vec![KernelPath::Exact];
        if has_int8_activations(format) {
            paths.push(KernelPath::Int8Activations);
        }
        for path in paths {
            let mut y = vec![0f32; o];
            let mut ts = pool.install(|| -> Result<Vec<f64>, String> {
                let call = |y: &mut [f32]| {
                    gemm_with(path, &view, &x, 1, y)
                        .map(|_| ())
                        .map_err(|e| format!("{name} {}: {e}", path.name()))
                };
                for _ in 0..50 {
                    call(&mut y)?;
                }
                (0..300)
                    .map(|_| {
                        let t = Instant::now();
                        call(&mut y)?;
                        Ok(t.elapsed().as_secs_f64())
                    })
                    .collect()
            })?;
            ts.sort_by(f64::total_cmp);
            let median = ts[ts.len() / 2];
            println!(
                "{name} {} {o}x{i} {threads} thread{} in cache: {:.1} us, {:.1} GB/s, min {:.1} us",
                path.name(),
                if threads == 1 { "" } else { "s" },
                median * 1e6,
                bytes as f64 / median / 1e9,
                ts[0] * 1e6
            );
        }
    }
    Ok(())
}
