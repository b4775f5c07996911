//! FWHT-256 with seeded signs: the orthonormal rotation under the mq4 formats.
//!
//! Forward: `r = (1/16) · H · D · v` over each 256-weight block along I, where H is the
//! 256x256 Sylvester Hadamard matrix and D = diag(signs). It is orthonormal, so rotating
//! both the weight row and the activation with the *same* forward transform preserves the
//! dot product: `(R w) · (R x) = w · x`. Inverse: `v = D · (1/16) · H · r`.
//!
//! Signs come from the tensor's rotation seed through SplitMix64: word k (k = 0..4) is
//! `splitmix64(seed + k)`, and weight j's sign is negative when bit `j % 64` of word `j / 64`
//! is set. This derivation is part of the format (docs/FORMATS.md) and is stamped as a seed.

use crate::real::Real;

/// Weights per rotation block.
pub const BLOCK: usize = 256;
const INV_SQRT_BLOCK: f64 = 1.0 / 16.0;

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 256 signs (+1 / -1) a seed selects.
pub fn signs(seed: u64) -> [i8; BLOCK] {
    let mut out = [1i8; BLOCK];
    for (k, chunk) in out.chunks_mut(64).enumerate() {
        let word = splitmix64(seed.wrapping_add(k as u64));
        for (j, s) in chunk.iter_mut().enumerate() {
            if (word >> j) & 1 == 1 {
                *s = -1;
            }
        }
    }
    out
}

/// Unnormalised in-place Walsh-Hadamard transform of one 256-block (`v.len() == BLOCK`).
///
/// The same butterflies in the same stage order as the textbook loop (so the same bits),
/// arranged to vectorize: the stages h = 1, 2, 4 as one 8-point transform of each run of 8,
/// then h = 8 .. 128 over contiguous runs of h. Activations are rotated on every
/// int8-activation call of an mq4 format, where the textbook loop's short inner runs and
/// bounds checks cost a fifth of an in-cache [256 x 4096] GEMV.
fn hadamard<T: Real>(v: &mut [T]) {
    debug_assert_eq!(v.len(), BLOCK);
    for c in v.chunks_exact_mut(8) {
        let a: [T; 8] = [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]];
        let b = [
            a[0] + a[1],
            a[0] - a[1],
            a[2] + a[3],
            a[2] - a[3],
            a[4] + a[5],
            a[4] - a[5],
            a[6] + a[7],
            a[6] - a[7],
        ];
        let d = [
            b[0] + b[2],
            b[1] + b[3],
            b[0] - b[2],
            b[1] - b[3],
            b[4] + b[6],
            b[5] + b[7],
            b[4] - b[6],
            b[5] - b[7],
        ];
        c.copy_from_slice(&[
            d[0] + d[4],
            d[1] + d[5],
            d[2] + d[6],
            d[3] + d[7],
            d[0] - d[4],
            d[1] - d[5],
            d[2] - d[6],
            d[3] - d[7],
        ]);
    }
    let mut h = 8;
    while h < v.len() {
        for pair in v.chunks_exact_mut(2 * h) {
            let (lo, hi) = pair.split_at_mut(h);
            for (a, b) in lo.iter_mut().zip(hi.iter_mut()) {
                let (x, y) = (*a, *b);
                *a = x + y;
                *b = x - y;
            }
        }
        h *= 2;
    }
}

fn apply_signs<T: Real>(v: &mut [T], signs: &[i8; BLOCK]) {
    for (x, &s) in v.iter_mut().zip(signs.iter()) {
        if s < 0 {
            *x = -*x;
        }
    }
}

fn scale<T: Real>(v: &mut [T]) {
    let k = T::from_f64(INV_SQRT_BLOCK);
    for x in v.iter_mut() {
        *x = *x * k;
    }
}

/// Forward rotation of one 256-block in place.
pub fn forward_block<T: Real>(v: &mut [T], signs: &[i8; BLOCK]) {
    debug_assert_eq!(v.len(), BLOCK);
    apply_signs(v, signs);
    hadamard(v);
    scale(v);
}

/// Inverse rotation of one 256-block in place.
pub fn inverse_block<T: Real>(v: &mut [T], signs: &[i8; BLOCK]) {
    debug_assert_eq!(v.len(), BLOCK);
    hadamard(v);
    scale(v);
    apply_signs(v, signs);
}

/// Forward-rotates every 256-block of every row of a row-major [n, cols] buffer
/// (`cols % 256 == 0`, which the rotated formats' registry rows require).
pub fn forward_rows<T: Real>(data: &mut [T], cols: usize, seed: u64) {
    let s = signs(seed);
    debug_assert_eq!(cols % BLOCK, 0);
    for block in data.chunks_exact_mut(BLOCK) {
        forward_block(block, &s);
    }
}

/// Inverse of [`forward_rows`].
pub fn inverse_rows<T: Real>(data: &mut [T], cols: usize, seed: u64) {
    let s = signs(seed);
    debug_assert_eq!(cols % BLOCK, 0);
    for block in data.chunks_exact_mut(BLOCK) {
        inverse_block(block, &s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(n: usize, mut st: u64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                st = st
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((st >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn forward_then_inverse_is_identity_and_norm_is_kept() {
        let x = lcg(512, 7);
        let mut y = x.clone();
        forward_rows(&mut y, 512, 42);
        let n0: f64 = x.iter().map(|v| v * v).sum();
        let n1: f64 = y.iter().map(|v| v * v).sum();
        assert!((n0 - n1).abs() < 1e-12 * n0);
        inverse_rows(&mut y, 512, 42);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 1e-14);
        }
    }

    #[test]
    fn rotating_both_sides_keeps_the_dot_product() {
        let w = lcg(256, 1);
        let x = lcg(256, 2);
        let dot: f64 = w.iter().zip(&x).map(|(a, b)| a * b).sum();
        let (mut rw, mut rx) = (w.clone(), x.clone());
        forward_rows(&mut rw, 256, 1042);
        forward_rows(&mut rx, 256, 1042);
        let rdot: f64 = rw.iter().zip(&rx).map(|(a, b)| a * b).sum();
        assert!((dot - rdot).abs() < 1e-12);
        assert_ne!(rw, w);
    }

    /// The sign words are part of the format (docs/FORMATS.md), so they are pinned to
    /// values computed outside this code: SplitMix64's published first output for state 0
    /// (0xE220A8397B1DCDAF), the rest from an independent Python transcription.
    #[test]
    fn sign_words_are_splitmix64_of_seed_plus_k() {
        let words: [(u64, [u64; 4]); 2] = [
            (
                0,
                [
                    0xe220_a839_7b1d_cdaf,
                    0x910a_2dec_8902_5cc1,
                    0x9758_35de_1c97_56ce,
                    0x1d0b_14e4_db01_8fed,
                ],
            ),
            (
                1000,
                [
                    0x3c1e_ba8b_4dcc_c148,
                    0x533e_00f7_f3c6_06d4,
                    0xeefa_317f_ac7a_b8fd,
                    0x9a98_9360_4466_79b8,
                ],
            ),
        ];
        for (seed, want) in words {
            let s = signs(seed);
            for (j, &sign) in s.iter().enumerate() {
                let negative = (want[j / 64] >> (j % 64)) & 1 == 1;
                assert_eq!(
                    sign,
                    if negative { -1 } else { 1 },
                    "seed {seed} weight {j}"
                );
            }
        }
    }

    #[test]
    fn seeds_select_different_signs_and_are_balanced() {
        let a = signs(42);
        let b = signs(1042);
        assert_ne!(a, b);
        let neg = a.iter().filter(|&&s| s < 0).count();
        assert!((80..176).contains(&neg), "{neg} negative signs");
    }

    /// The textbook loop `hadamard` rearranges: the same butterflies in the same stage
    /// order, so the two must agree to the bit.
    fn textbook(v: &mut [f32]) {
        let mut h = 1;
        while h < BLOCK {
            for i in (0..BLOCK).step_by(h * 2) {
                for j in i..i + h {
                    let (a, b) = (v[j], v[j + h]);
                    v[j] = a + b;
                    v[j + h] = a - b;
                }
            }
            h *= 2;
        }
    }

    #[test]
    fn hadamard_matches_the_textbook_loop_bit_for_bit_and_the_matrix() {
        for seed in 0..8 {
            let x: Vec<f32> = lcg(BLOCK, seed).iter().map(|&v| (v * 1e3) as f32).collect();
            let (mut fast, mut slow) = (x.clone(), x.clone());
            hadamard(&mut fast);
            textbook(&mut slow);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast), bits(&slow), "seed {seed}");
            // Sylvester's matrix: H[i][j] = (-1)^popcount(i & j), in f64 (exact enough).
            for i in [0, 1, 7, 8, 100, 255] {
                let want: f64 = (0..BLOCK)
                    .map(|j| {
                        let sign = if (i & j).count_ones() % 2 == 0 {
                            1.0
                        } else {
                            -1.0
                        };
                        sign * f64::from(x[j])
                    })
                    .sum();
                let mag: f64 = x.iter().map(|&v| f64::from(v).abs()).sum();
                let err = (f64::from(fast[i]) - want).abs();
                assert!(err < 1e-6 * mag, "seed {seed} row {i}: {err:e} of {mag:e}");
            }
        }
    }

    #[test]
    fn single_impulse_spreads_to_plus_minus_one_sixteenth() {
        let mut v = vec![0.0f64; 256];
        v[3] = 1.0;
        forward_rows(&mut v, 256, 0);
        assert!(v.iter().all(|x| (x.abs() - 1.0 / 16.0).abs() < 1e-15));
    }
}
