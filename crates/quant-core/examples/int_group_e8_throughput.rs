//! Encode throughput of every registry format (or the ones named) on a [4096, 4096] f32
//! tensor, in MB/s of f32 input, and the relative MSE (Σ(w - ŵ)² / Σw²) of the encoding.
//!
//! `RAYON_NUM_THREADS=1 cargo run -p quant-core --release --example int_group_e8_throughput -- \
//!  [format ...]` (no names: every format of the registry, then a markdown table of them). Weights are
//! `testdata::weights` (Gaussian rows with outlier rows); the best of 5 timed runs after one
//! warm-up is reported, since other work on a shared machine only ever slows a run down.
//! On Linux the process CPU time of the runs is reported too: on a machine shared with
//! other jobs, input bytes over CPU-seconds is the per-core figure that load does not skew.

use quant_core::testdata::{Rng, weights};
use quant_core::{EncodeOptions, Format, decode, encode};
use std::time::Instant;

fn main() {
    let (rows, cols) = (4096usize, 4096usize);
    let mut names: Vec<String> = std::env::args().skip(1).collect();
    let table = names.is_empty();
    if table {
        names = Format::all().map(|f| f.name().to_string()).collect();
    }
    let mut rows_md = Vec::new();
    let w = weights(&mut Rng::new(42), rows, cols);
    let mb = (rows * cols * 4) as f64 / 1e6;
    let threads = rayon::current_num_threads();
    for name in names {
        let f: Format = name.parse().expect("format name");
        let opts = EncodeOptions::default();
        let t = encode(f, rows, cols, &w, &opts).expect("encode");
        let y = decode(&t.view()).expect("decode");
        let (num, den) = w.iter().zip(&y).fold((0f64, 0f64), |(n, d), (&a, &b)| {
            (n + ((a - b) as f64).powi(2), d + (a as f64).powi(2))
        });
        let mut best = f64::INFINITY;
        let runs = 5;
        let cpu0 = cpu_seconds();
        for _ in 0..runs {
            let t0 = Instant::now();
            let t = encode(f, rows, cols, &w, &opts).expect("encode");
            best = best.min(t0.elapsed().as_secs_f64());
            std::hint::black_box(t);
        }
        let per_cpu = match (cpu0, cpu_seconds()) {
            (Some(a), Some(b)) if b > a => Some(mb * runs as f64 / (b - a)),
            _ => None,
        };
        let cpu = per_cpu.map_or(String::new(), |v| format!(", {v:.0} MB/s per CPU-second"));
        rows_md.push(format!(
            "| `{name}` | {:.0} | {} | {:.5} |",
            mb / best / threads as f64,
            per_cpu.map_or("-".to_string(), |v| format!("{v:.0}")),
            num / den
        ));
        println!(
            "{name:>12} [{rows}, {cols}] {threads} threads: best {:.1} ms, {:.0} MB/s ({:.0} MB/s per thread){cpu}; rel MSE {:.5}",
            best * 1e3,
            mb / best,
            mb / best / threads as f64,
            num / den
        );
    }
    if table {
        println!("\n| format | MB/s (1 thread) | MB/s per CPU-second | rel MSE |");
        println!("| --- | ---: | ---: | ---: |");
        for r in rows_md {
            println!("{r}");
        }
    }
}

/// User + system CPU time of this process (all threads), from /proc/self/stat; `None`
/// where that file does not exist.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux ABI Rust supports.
    Some(ticks / 100.0)
}
