//! Single-core encode throughput of the rotated 4-bit formats on one [4096, 4096] f32 tensor:
//! the whole `encode_rows` path (copy + FWHT-256 + codec), and the FWHT and the codec alone,
//! in MB/s of f32 input (1 MB = 10^6 bytes). Best and median of several runs.
//!
//! `RAYON_NUM_THREADS=1 cargo run -p quant-core --release --example encode_throughput
//! [rows cols runs]` (the `encode` line uses rayon; the others are single-threaded anyway).

use quant_core::codec::codec_for;
use quant_core::testdata::{Rng, weights};
use quant_core::{EncodeOptions, Format, encode, encode_rows, rotation};
use std::time::Instant;

fn time<F: FnMut()>(runs: usize, mut f: F) -> (f64, f64) {
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    (t[0], t[t.len() / 2])
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("number"))
        .collect();
    let (rows, cols, runs) = match args[..] {
        [r, c, n] => (r, c, n),
        _ => (4096, 4096, 7),
    };
    let w = weights(&mut Rng::new(1), rows, cols);
    let mb = (rows * cols * 4) as f64 / 1e6;
    let opts = EncodeOptions::default();
    let report = |what: &str, (best, median): (f64, f64)| {
        println!(
            "{what:<48} best {:>8.1} MB/s   median {:>8.1} MB/s",
            mb / best,
            mb / median
        );
    };
    println!("[{rows}, {cols}] f32 = {mb:.1} MB, {runs} runs, one thread");

    let mut rotated = w.clone();
    report(
        "FWHT-256 forward (copy + rotation::forward_rows)",
        time(runs, || {
            rotated.copy_from_slice(&w);
            rotation::forward_rows(&mut rotated, cols, opts.rotation_seed);
        }),
    );
    for f in [
        Format::Mq4G256,
        Format::Mq4G256V2,
        Format::Mq4cG256,
        Format::Mq4K,
    ] {
        let mut out = vec![0u8; f.spec().weight_bytes(rows, cols).unwrap() as usize];
        report(
            &format!("{f}: codec only (pre-rotated input)"),
            time(runs, || {
                codec_for(f)
                    .encode_rows(f, cols, &rotated, &mut out, &mut [])
                    .unwrap()
            }),
        );
        report(
            &format!("{f}: encode_rows, one call for all rows"),
            time(runs, || {
                encode_rows(f, rows, cols, 0, &w, &mut out, &mut [], &opts).unwrap()
            }),
        );
        report(
            &format!("{f}: encode (row blocks of api::task_rows)"),
            time(runs, || drop(encode(f, rows, cols, &w, &opts).unwrap())),
        );
    }
}
