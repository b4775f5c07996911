//! Kernel tests that run every fused kernel at every SIMD level this CPU has (AVX-512, AVX2,
//! portable), not only the level `detect` picks, so the fallbacks are tested on this machine
//! too; plus the exact E4M3 decode of every byte and NaN-row poisoning at every level.

use super::fp8::{e4m3_decode, ue8m0_decode};
use super::{SimdLevel, gemm_at};
use crate::oracle::{POISON, reference_gemm, worst_error};
use crate::testdata::{Rng, activations, fresh_seed, weights};
use crate::{EncodeOptions, EncodedTensor, Format, encode, tables};

/// The CPU kernels' declared bound, as in tests/cpu_kernels_vs_oracle.rs.
const TOLERANCE: f64 = 1e-5;
const BATCHES: [usize; 8] = [1, 2, 3, 4, 5, 8, 16, 19];

/// The formats with a fused kernel.
const FUSED: [Format; 28] = [
    Format::Int8Row,
    Format::Int4Row,
    Format::Int4G16,
    Format::Int4G32,
    Format::Int4G48,
    Format::Int4G64,
    Format::Int4G96,
    Format::Int4G128,
    Format::Int4G192,
    Format::Int4G256,
    Format::Fp8E4m3B128,
    Format::Fp8E4m3B128Ue8m0,
    Format::Hfq4G256,
    Format::Mq4G256V2,
    Format::Mq4cG256,
    Format::Q8_0,
    Format::Q4_0,
    Format::Q4_1,
    Format::Q5_0,
    Format::Q5_1,
    Format::Q2K,
    Format::Q3K,
    Format::Q4K,
    Format::Mq4K,
    Format::Q5K,
    Format::Q6K,
    Format::Iq4Nl,
    Format::Iq4Xs,
];

fn seed() -> u64 {
    std::env::var("TESSERA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(fresh_seed)
}

/// Edge shapes: odd I, partial chunks, groups and tiles, I below one chunk, a remainder of
/// rows after the four-row blocks, and shapes large enough to split into several tasks.
fn shapes(f: Format) -> Vec<(usize, usize)> {
    if f.spec().whole_blocks_only {
        return vec![(1, 256), (7, 512), (130, 256), (600, 1024), (3, 2048)];
    }
    let g = f.spec().group_size().unwrap_or(64) as usize;
    vec![
        (1, 1),
        (3, 7),
        (5, 33),
        (17, g - 1),
        (6, g + 1),
        (9, 2 * g + 17),
        (130, 129),
        (131, 200),
        (257, 201),
        (2, 1000),
        (600, 1000),
        (300, 2048),
    ]
}

#[test]
fn every_fused_kernel_matches_the_oracle_at_every_level() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    let levels = SimdLevel::available();
    eprintln!("levels tested: {levels:?} (seed {seed})");
    for f in FUSED {
        for (rows, cols) in shapes(f) {
            let w = weights(&mut rng, rows, cols);
            let opts = EncodeOptions {
                rotation_seed: rng.next_u64(),
                ..Default::default()
            };
            let t = encode(f, rows, cols, &w, &opts).expect("encode");
            for s in BATCHES {
                let x = activations(&mut rng, s, cols);
                let r = reference_gemm(&t.view(), &x, s);
                for &level in &levels {
                    let mut y = vec![POISON; s * rows];
                    gemm_at(level, &t.view(), &x, s, &mut y).expect("gemm");
                    let worst = worst_error(&y, &r);
                    if worst.error.is_nan() || worst.error > TOLERANCE {
                        failures.push(format!(
                            "{f} {level:?} O={rows} I={cols} S={s}: error {:.3e} at {}",
                            worst.error, worst.index
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// Every finite E4M3 byte through the fused kernel at every level, one product at a time
/// (one-hot activations, scale 1), exactly equal to the shared decode table.
#[test]
fn every_e4m3_byte_decodes_exactly_at_every_level() {
    let finite: Vec<u8> = (0..=255u8).filter(|b| b & 0x7F != 0x7F).collect();
    let cols = finite.len();
    for &b in &finite {
        let want = tables::E4M3_FN[b as usize];
        assert_eq!(
            e4m3_decode(b).to_bits(),
            want.to_bits(),
            "scalar twin, byte {b:#04x}"
        );
    }
    let t = EncodedTensor::from_parts(
        Format::Fp8E4m3B128,
        1,
        cols,
        finite.clone(),
        [1f32; 2].iter().flat_map(|v| v.to_le_bytes()).collect(),
        None,
    )
    .expect("tensor");
    let mut x = vec![0f32; cols * cols];
    for k in 0..cols {
        x[k * cols + k] = 1.0;
    }
    for level in SimdLevel::available() {
        let mut y = vec![POISON; cols];
        gemm_at(level, &t.view(), &x, cols, &mut y).expect("gemm");
        for (k, &b) in finite.iter().enumerate() {
            let want = tables::E4M3_FN[b as usize];
            // A sum starting from +0 turns -0 into +0; every other value must be identical.
            assert!(y[k] == want, "{level:?} byte {b:#04x}: {} vs {want}", y[k]);
        }
    }
    for e in 0..=255u8 {
        let (got, want) = (ue8m0_decode(e), tables::ue8m0(e));
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "ue8m0 {e}"
        );
    }
}

/// A NaN code poisons exactly its own row's outputs (every S), at every level, in either
/// scale encoding, whether it sits in a whole chunk or the partial last one.
#[test]
fn fp8_nan_codes_poison_exactly_their_rows() {
    let mut rng = Rng::new(seed());
    for f in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0] {
        let (rows, cols) = (261, 300);
        let w = weights(&mut rng, rows, cols);
        let mut t = encode(f, rows, cols, &w, &EncodeOptions::default()).expect("encode");
        let nan_rows = [(5usize, 0usize, 0x7Fu8), (130, 299, 0xFF), (260, 150, 0x7F)];
        for &(o, i, b) in &nan_rows {
            t.weights[o * cols + i] = b;
        }
        for s in [1, 3, 4, 8] {
            let x = activations(&mut rng, s, cols);
            let r = reference_gemm(&t.view(), &x, s);
            for level in SimdLevel::available() {
                let mut y = vec![POISON; s * rows];
                gemm_at(level, &t.view(), &x, s, &mut y).expect("gemm");
                for o in 0..rows {
                    let poisoned = nan_rows.iter().any(|n| n.0 == o);
                    for k in 0..s {
                        let v = y[k * rows + o];
                        assert_eq!(v.is_nan(), poisoned, "{f} {level:?} row {o} S={s}: {v}");
                    }
                }
                let worst = worst_error(&y, &r);
                assert!(worst.error <= TOLERANCE, "{f} {level:?} S={s}: {worst:?}");
            }
        }
    }
}

#[test]
fn forcing_a_level_never_exceeds_the_hardware() {
    assert_eq!(
        SimdLevel::Avx512Vnni.clamp_to_hardware(),
        SimdLevel::hardware()
    );
    assert_eq!(SimdLevel::Portable.clamp_to_hardware(), SimdLevel::Portable);
}
