//! SIMD levels, their run-time detection, and the f32 dot product every level shares.
//!
//! A [`SimdLevel`] is chosen once per process ([`SimdLevel::detect`], cached): AVX-512 with
//! VNNI where the CPU has it, AVX-512 where it has AVX-512 F/BW/VL plus AVX2/FMA/F16C, else
//! AVX2 with FMA and F16C, else the portable code (the only level on other architectures).
//! Levels nest: a CPU that runs one runs every lower one, which is what lets the kernel
//! tests run every level on one machine. Only the int8-activation kernels
//! ([`super::int8act`]) use VNNI; the exact kernels run their AVX-512 code at that level.
//! `TESSERA_SIMD=portable|avx2|avx512|avx512vnni` lowers the choice (never raises it past
//! the hardware).

use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// An instruction-set level the CPU kernels are written for, lowest first.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    /// Plain Rust, written so the compiler can vectorise it for the baseline target.
    Portable,
    /// 256-bit AVX2 with FMA and F16C.
    Avx2,
    /// 512-bit AVX-512 F/BW/VL (with AVX2, FMA and F16C).
    Avx512,
    /// [`SimdLevel::Avx512`] plus AVX-512 VNNI (`vpdpbusd`), which the int8-activation
    /// kernels use; the exact kernels run their AVX-512 code.
    Avx512Vnni,
}

impl SimdLevel {
    /// Every level, lowest first.
    pub const ALL: [SimdLevel; 4] = [
        SimdLevel::Portable,
        SimdLevel::Avx2,
        SimdLevel::Avx512,
        SimdLevel::Avx512Vnni,
    ];

    /// Stable lower-case name (used by `TESSERA_SIMD` and in bench ids).
    pub const fn name(self) -> &'static str {
        match self {
            SimdLevel::Portable => "portable",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
            SimdLevel::Avx512Vnni => "avx512vnni",
        }
    }

    /// The highest level this CPU supports (asks the CPU every call; see [`Self::detect`]).
    pub fn hardware() -> SimdLevel {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            let avx512 = avx2
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl");
            if avx512 && is_x86_feature_detected!("avx512vnni") {
                SimdLevel::Avx512Vnni
            } else if avx512 {
                SimdLevel::Avx512
            } else if avx2 {
                SimdLevel::Avx2
            } else {
                SimdLevel::Portable
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            SimdLevel::Portable
        }
    }

    /// The level the kernels use: the hardware's, lowered by `TESSERA_SIMD` if set. Computed
    /// once and cached for the life of the process.
    pub fn detect() -> SimdLevel {
        static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            let hw = SimdLevel::hardware();
            let wanted = std::env::var("TESSERA_SIMD")
                .ok()
                .and_then(|v| SimdLevel::ALL.into_iter().find(|l| l.name() == v.trim()));
            wanted.map_or(hw, |w| w.min(hw))
        })
    }

    /// Every level this CPU can run, lowest first.
    pub fn available() -> Vec<SimdLevel> {
        let hw = SimdLevel::hardware();
        SimdLevel::ALL.into_iter().filter(|l| *l <= hw).collect()
    }

    /// `self`, lowered to what the CPU supports: the guard that makes it sound for safe code
    /// to ask for any level by name.
    pub fn clamp_to_hardware(self) -> SimdLevel {
        static HW: OnceLock<SimdLevel> = OnceLock::new();
        self.min(*HW.get_or_init(SimdLevel::hardware))
    }
}

/// Σ `a[i]·b[i]` in f32 at `level` (which must be supported: callers pass a clamped level).
pub fn dot_f32_at(level: SimdLevel, a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    #[cfg(target_arch = "x86_64")]
    match level.clamp_to_hardware() {
        // SAFETY: the level was clamped to what the CPU supports, so AVX-512 F is present.
        SimdLevel::Avx512 | SimdLevel::Avx512Vnni => unsafe { dot_avx512(a, b) },
        // SAFETY: clamped level: AVX2 and FMA are present.
        SimdLevel::Avx2 => unsafe { dot_avx2(a, b) },
        SimdLevel::Portable => dot_portable(a, b),
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = level;
        dot_portable(a, b)
    }
}

/// Σ `a[i]·b[i]` at the detected level.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    dot_f32_at(SimdLevel::detect(), a, b)
}

/// Eight independent accumulators, so the loop vectorises on every target.
pub fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, ar) = a.split_at(a.len() / 8 * 8);
    let (bc, br) = b.split_at(ac.len());
    for (x, y) in ac.chunks_exact(8).zip(bc.chunks_exact(8)) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ar.iter().zip(br) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

/// # Safety
/// The CPU must support AVX-512 F; `a` and `b` have equal lengths.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY (whole loop): every load reads [i, i+64) or [i, i+16) with that end <= n.
    while i + 64 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: i + 16k + 16 <= n.
            let (x, y) = unsafe {
                (
                    _mm512_loadu_ps(pa.add(i + 16 * k)),
                    _mm512_loadu_ps(pb.add(i + 16 * k)),
                )
            };
            *acc = _mm512_fmadd_ps(x, y, *acc);
        }
        i += 64;
    }
    while i + 16 <= n {
        // SAFETY: i + 16 <= n.
        let (x, y) = unsafe { (_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i))) };
        acc[0] = _mm512_fmadd_ps(x, y, acc[0]);
        i += 16;
    }
    if i < n {
        let m: __mmask16 = (1u32 << (n - i)).wrapping_sub(1) as __mmask16;
        // SAFETY: masked loads touch only the n - i lanes still inside both slices.
        let (x, y) = unsafe {
            (
                _mm512_maskz_loadu_ps(m, pa.add(i)),
                _mm512_maskz_loadu_ps(m, pb.add(i)),
            )
        };
        acc[1] = _mm512_fmadd_ps(x, y, acc[1]);
    }
    let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    _mm512_reduce_add_ps(s)
}

/// # Safety
/// The CPU must support AVX2 and FMA; `a` and `b` have equal lengths.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8k + 8 <= n.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(pa.add(i + 8 * k)),
                    _mm256_loadu_ps(pb.add(i + 8 * k)),
                )
            };
            *acc = _mm256_fmadd_ps(x, y, *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i))) };
        acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
        i += 8;
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut tail = hsum256(s);
    while i < n {
        tail = a[i].mul_add(b[i], tail);
        i += 1;
    }
    tail
}

/// Horizontal sum of eight f32 lanes.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum256(v: __m256) -> f32 {
    let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    let s = _mm_add_ss(d, _mm_movehdup_ps(d));
    _mm_cvtss_f32(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_agrees_on_every_level_and_length() {
        for n in [0usize, 1, 7, 8, 15, 16, 17, 63, 64, 65, 200, 1000] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            let mag: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (*x as f64 * *y as f64).abs())
                .sum();
            for level in SimdLevel::available() {
                let got = dot_f32_at(level, &a, &b) as f64;
                assert!(
                    (got - want).abs() <= 1e-6 * mag.max(1.0),
                    "{level:?} n={n}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn levels_nest_and_detection_is_available() {
        let avail = SimdLevel::available();
        assert_eq!(avail[0], SimdLevel::Portable);
        assert!(avail.contains(&SimdLevel::detect()));
        assert_eq!(
            SimdLevel::Avx512Vnni.clamp_to_hardware(),
            SimdLevel::hardware()
        );
    }
}
