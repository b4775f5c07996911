//! Encode throughput of fp8-e4m3-b128 (and its UE8M0 twin) on a [4096, 4096] f32 tensor,
//! in MB/s of f32 input: one thread (`encode_rows` over the whole tensor) and all threads
//! (`encode`, rayon across 128-row bands). On Linux the single-thread figure is also given per
//! CPU-second of the encoding thread (from /proc/thread-self/schedstat), which a machine
//! shared with other jobs does not distort.
//!
//! `cargo run -p quant-core --release --example fp8_encode_throughput [rows cols reps]`

use quant_core::testdata::{Rng, weights};
use quant_core::{EncodeOptions, Format, encode, encode_rows};
use std::time::Instant;

/// Nanoseconds this thread has spent on a CPU, where the kernel reports it.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (rows, cols, reps) = match args[..] {
        [r, c, n] => (r, c, n),
        _ => (4096, 4096, 7),
    };
    let w = weights(&mut Rng::new(7), rows, cols);
    let mb = (rows * cols * 4) as f64 / 1e6;
    let opts = EncodeOptions::default();
    println!(
        "[{rows}, {cols}] f32 = {mb:.1} MB, {reps} reps, rayon threads = {}",
        rayon::current_num_threads()
    );
    for f in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0] {
        let spec = f.spec();
        let mut wb = vec![0u8; spec.weight_bytes(rows, cols).unwrap() as usize];
        let mut sb = vec![0u8; spec.scale_bytes(rows, cols).unwrap() as usize];
        let (mut one, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let c0 = thread_cpu_ns();
            let t0 = Instant::now();
            encode_rows(f, rows, cols, 0, &w, &mut wb, &mut sb, &opts).unwrap();
            one.push(mb / t0.elapsed().as_secs_f64());
            if let (Some(a), Some(b)) = (c0, thread_cpu_ns()) {
                cpu.push(mb / ((b - a) as f64 * 1e-9));
            }
        }
        let mut all = Vec::new();
        for _ in 0..reps {
            let t0 = Instant::now();
            let t = encode(f, rows, cols, &w, &opts).unwrap();
            all.push(mb / t0.elapsed().as_secs_f64());
            assert_eq!(t.weights, wb, "single- and multi-threaded encodes agree");
        }
        if !cpu.is_empty() {
            println!(
                "{:>20}: 1 thread median {:.0} MB per CPU-second",
                f.name(),
                median(cpu)
            );
        }
        println!(
            "{:>20}: 1 thread median {:.0} MB/s (best {:.0}); all threads median {:.0} MB/s (best {:.0})",
            f.name(),
            median(one.clone()),
            one.iter().cloned().fold(0.0, f64::max),
            median(all.clone()),
            all.iter().cloned().fold(0.0, f64::max),
        );
    }
}
