//! A 512-bit single-activation-row (S = 1) int8-activation kernel of int8-row, run at
//! [`SimdLevel::Avx512Vnni`] in place of the generic [`super::tessera`] body; every other
//! level and S > 1 go to that body. Rows longer than [`ONE_ROW_MAX_COLS`] go in column
//! panels ([`super::panels`]) or, where those are off, to the generic body's four-row tiles:
//! a 16384-column row's activation-side numbers, 34 KB, no longer fit L1 next to the stream
//! (on [6144 x 16384] one whole row at a time ran at 42% of a same-seconds read of its
//! bytes, `xtask/candle-pair` read-pair, 2026-11-30 06:32 UTC).
//!
//! The generic body spends, per 32 weights, a 256-bit load, the `|q|` / `x·sign(q)` pair,
//! one `vpdpbusd`, a broadcast of the block's step, a conversion and an FMA. Here one
//! 64-byte load covers two 32-blocks: the signed codes become unsigned with one XOR
//! (`q + 128`), a single `vpdpbusd` starts from `-128 · Σ x̂` of each of its 16 lanes (the
//! activations' `off8n` numbers times 16, so the offset is taken in the integer sum,
//! exactly), and each lane is converted and multiplied by its own block's step (lanes 0..8
//! the first block, 8..16 the second), accumulated in four independent f32 vectors and
//! reduced once per row. The integer block sums are the generic body's, so the declared
//! bound of [`super`] holds unchanged.

use super::super::SimdLevel;
use super::panels::{self, UNIT, in_panels};
use super::{Int8Kernel, ONE_ROW_MAX_COLS, QActs, QLayout};
use crate::codecs::util::read_f32;
use crate::tensor::QTensor;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// The int8-row int8-activation kernel: the 512-bit one-row body at S = 1 on AVX-512 VNNI,
/// `fallback` otherwise.
pub(crate) struct ZmmInt8Row {
    fallback: &'static dyn Int8Kernel,
}

pub(crate) static INT8_ROW: ZmmInt8Row = ZmmInt8Row {
    fallback: &super::tessera::INT8_ROW,
};

/// Weights one 512-bit step covers: two activation 32-blocks.
const CHUNK: usize = 64;

impl Int8Kernel for ZmmInt8Row {
    fn layout(&self) -> QLayout {
        QLayout::Natural
    }
    fn dot_rows_panels(
        &self,
        panels: bool,
        level: SimdLevel,
        t: &QTensor<'_>,
        a: &QActs,
        row0: usize,
        n: usize,
        out: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if a.s == 1
            && level == SimdLevel::Avx512Vnni
            && n <= out.len()
            && (panels || t.cols() <= ONE_ROW_MAX_COLS)
        {
            let cols = t.cols();
            let nch = cols.div_ceil(CHUNK);
            let units = cols.div_ceil(UNIT);
            in_panels(panels, units, 1, &mut out[..n], |u0, u1, out| {
                let per = UNIT / CHUNK;
                let walk = per * u0..(per * u1).min(nch);
                let ahead = panels::ahead(
                    u1 - u0,
                    units,
                    t.row_bytes(),
                    super::super::prefetch::per_stream(1),
                );
                for (r, y) in out.iter_mut().enumerate() {
                    let row = t.row(row0 + r);
                    let scale = read_f32(t.scales(), 4 * (row0 + r));
                    // SAFETY: the level was clamped to the hardware by `gemm_with_at`, so
                    // AVX-512 F/BW/VL/VNNI are present; `row` holds `cols` bytes (int8-row's
                    // row length); the activation row is padded to a multiple of 256 values,
                    // with one step and 8 offsets per 32 of them (`QActs::new`), which
                    // covers `cols.div_ceil(64)` chunks, and `walk` ends there.
                    *y = unsafe { int8_row(row, cols, a, walk.clone(), ahead) } * scale;
                }
            });
            return;
        }
        self.fallback
            .dot_rows_panels(panels, level, t, a, row0, n, out)
    }
}

/// `Σ_b Δ_b Σ_{i∈b} q_i x̂_i` over the 64-weight chunks `walk` of one row of `cols` int8
/// codes, against activation row 0, each line asked for `ahead`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI present; `row.len() >= cols`; `walk.end <= cols.div_ceil(64)`; `a`
/// is padded past `64 · cols.div_ceil(64)` values (row 0).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn int8_row(
    row: &[u8],
    cols: usize,
    a: &QActs,
    walk: std::ops::Range<usize>,
    ahead: super::super::prefetch::Ahead,
) -> f32 {
    let (q, d, off) = (a.q(0), a.d(0), a.off8n(0));
    let flip = _mm512_set1_epi8(0x80u8 as i8);
    // Lanes 0..8 take the step in position 0 of a loaded pair, lanes 8..16 position 1.
    let halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let mut acc = [_mm512_setzero_ps(); 4];
    let full = cols / CHUNK;
    let chunk = |c: usize, v: __m512i, acc: &mut __m512| {
        // SAFETY: chunk c < cols.div_ceil(64) lies in the padded activations: 64 int8
        // values, 16 offsets (8 per 32-block) and 2 steps.
        unsafe {
            let x = _mm512_loadu_si512(q.add(CHUNK * c).cast());
            let start = _mm512_slli_epi32::<4>(_mm512_loadu_si512(off.add(16 * c).cast()));
            let i = _mm512_dpbusd_epi32(start, _mm512_xor_si512(v, flip), x);
            let pair = _mm_castsi128_ps(_mm_loadl_epi64(d.add(2 * c).cast()));
            let step = _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(pair));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), step, *acc);
        }
    };
    for c in walk.start..walk.end.min(full) {
        super::super::prefetch::lines(row.as_ptr(), CHUNK * c, CHUNK, ahead);
        // SAFETY: c < full: 64 bytes from 64c lie inside the row.
        let v = unsafe { _mm512_loadu_si512(row.as_ptr().add(CHUNK * c).cast()) };
        chunk(c, v, &mut acc[c % 4]);
    }
    if full * CHUNK < cols && walk.end > full {
        // Past `cols` the buffer holds zero codes, which `q + 128` turns into 128 against
        // zero activations, and the offsets there are zero.
        let buf = super::super::tail_chunk::<CHUNK>(&row[full * CHUNK..cols]);
        // SAFETY: a local 64-byte buffer.
        let v = unsafe { _mm512_loadu_si512(buf.as_ptr().cast()) };
        chunk(full, v, &mut acc[full % 4]);
    }
    _mm512_reduce_add_ps(_mm512_add_ps(
        _mm512_add_ps(acc[0], acc[1]),
        _mm512_add_ps(acc[2], acc[3]),
    ))
}
