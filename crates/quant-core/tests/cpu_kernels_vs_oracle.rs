//! Every format's CPU kernel against the f64 oracle of its own bytes, over the edge shapes
//! (odd I, partial groups/blocks/tiles, I below one group, O = 1) and S in 1..=64, with
//! fresh random data each run and outputs poisoned before each call.
//!
//! `TESSERA_FORMATS=int4-g64,fp8-e4m3-b128` narrows the run; `TESSERA_SEED` replays one.

use quant_core::oracle::{POISON, reference_gemm, worst_error};
use quant_core::testdata::{Rng, activations, fresh_seed, weights};
use quant_core::{EncodeOptions, Format, encode, gemm};

/// CPU kernels accumulate in f32; 1e-5 of the summed term magnitudes is the declared bound.
const TOLERANCE: f64 = 1e-5;
const BATCHES: [usize; 7] = [1, 2, 3, 4, 8, 16, 64];

fn selected() -> Vec<Format> {
    match std::env::var("TESSERA_FORMATS") {
        Ok(list) => list
            .split(',')
            .map(|n| n.trim().parse().expect("format name"))
            .collect(),
        Err(_) => Format::all().collect(),
    }
}

fn seed() -> u64 {
    std::env::var("TESSERA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(fresh_seed)
}

/// Shapes that exercise each format's edges.
pub fn edge_shapes(f: Format) -> Vec<(usize, usize)> {
    let spec = f.spec();
    let mut cols: Vec<usize> = if spec.whole_blocks_only {
        vec![256, 512, 1024]
    } else {
        let g = spec.group_size().unwrap_or(64) as usize;
        vec![1, 7, 33, g - 1, g + 1, 2 * g + 17, 129, 200, 201, 300, 1000]
    };
    cols.sort();
    cols.dedup();
    let rows = [1usize, 3, 17, 130];
    let mut out = Vec::new();
    for (k, &c) in cols.iter().enumerate() {
        out.push((rows[k % rows.len()], c));
    }
    out.push((1, cols[cols.len() - 1]));
    out.push((257, cols[0]));
    out
}

#[test]
fn every_format_matches_the_oracle() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    for f in selected() {
        for (rows, cols) in edge_shapes(f) {
            let w = weights(&mut rng, rows, cols);
            let t = encode(
                f,
                rows,
                cols,
                &w,
                &EncodeOptions {
                    rotation_seed: rng.next_u64(),
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("{f} [{rows}, {cols}] encode: {e}"));
            for s in BATCHES {
                let x = activations(&mut rng, s, cols);
                let mut y = vec![POISON; s * rows];
                gemm(&t.view(), &x, s, &mut y).unwrap();
                let r = reference_gemm(&t.view(), &x, s);
                let worst = worst_error(&y, &r);
                if worst.error.is_nan() || worst.error > TOLERANCE {
                    failures.push(format!(
                        "{f} O={rows} I={cols} S={s}: error {:.3e} at {} (got {}, want {})",
                        worst.error, worst.index, y[worst.index], r.y[worst.index]
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}
