//! fp8-e4m3-b128 (legacy fmt=7): OCP E4M3-FN weight bytes with one scale per 128x128 tile.
//!
//! Layout (seed 004): the weight buffer is O*I raw E4M3-FN bytes, row-major, one byte per
//! weight (no padding). The sidecar holds one scale per `tile_rows x tile_cols` tile of
//! [O, I] (128x128 in the registry), tiles row-major: scale index
//! `(o / 128) * ceil(I / 128) + i / 128`. Edge tiles are partial. Decode multiplies:
//! `w[o, i] = E4M3_FN[byte] * scale[tile]`.
//!
//! The scale encoding is the format's registry property, not a constant:
//! - `fp8-e4m3-b128`: f32 little-endian (GLM FP8 checkpoints); encoder scale `amax / 448`
//!   (0 for an all-zero tile).
//! - `fp8-e4m3-b128-ue8m0`: one UE8M0 byte, `2^(e-127)` (DeepSeek-V4); encoder scale the
//!   smallest power of two with `448 * scale >= amax`, so no weight saturates. An all-zero
//!   tile stores byte 0 (the smallest scale), as the OCP MX reference does for a zero block.
//!
//! Bytes are passed through untouched when a checkpoint is adopted with
//! `EncodedTensor::from_parts`; a NaN byte (0x7F/0xFF) decodes to NaN and poisons its row
//! in a GEMM, as IEEE arithmetic says it must.

use super::util::{read_f32, write_f32};
use crate::codec::FormatCodec;
use crate::error::QuantError;
use crate::real::Real;
use crate::registry::{Format, ScaleEncoding, ScaleLayout};
use crate::tables::{E4M3_FN, E4M3_MAX, UE8M0_BIAS, e4m3_encode, ue8m0};
use crate::tensor::QTensor;

/// The codec of both fp8-e4m3-b128 formats; the scale encoding comes from the registry row.
pub struct Fp8Codec;

/// The scale encodings this codec stores.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum TileScale {
    F32,
    Ue8m0,
}

/// Tile geometry and scale encoding of an fp8 format, read from its registry row.
#[derive(Copy, Clone, Debug)]
struct Tiles {
    rows: usize,
    cols: usize,
    scale: TileScale,
}

impl Tiles {
    /// `None` when `format` has no per-tile f32/UE8M0 scales, i.e. it was dispatched here by
    /// mistake; the registry rows of both fp8 formats always give `Some`.
    fn of(format: Format) -> Option<Tiles> {
        match format.spec().scales {
            ScaleLayout::PerTile {
                rows,
                cols,
                encoding,
            } => {
                let scale = match encoding {
                    ScaleEncoding::F32 => TileScale::F32,
                    ScaleEncoding::Ue8m0 => TileScale::Ue8m0,
                    ScaleEncoding::F16 => return None,
                };
                Some(Tiles {
                    rows: rows as usize,
                    cols: cols as usize,
                    scale,
                })
            }
            ScaleLayout::None
            | ScaleLayout::Inline
            | ScaleLayout::PerRow(_)
            | ScaleLayout::PerGroup { .. }
            | ScaleLayout::PerTensor(_) => None,
        }
    }

    /// The stored scale with index `k` (in units of scales, not bytes).
    #[inline(always)]
    fn read(self, scales: &[u8], k: usize) -> f32 {
        match self.scale {
            TileScale::F32 => read_f32(scales, 4 * k),
            TileScale::Ue8m0 => ue8m0(scales[k]),
        }
    }

    /// Chooses and stores the scale of a tile whose largest magnitude is `amax`; returns
    /// the scale's value.
    fn write(self, scales: &mut [u8], k: usize, amax: f32) -> f32 {
        match self.scale {
            TileScale::F32 => {
                let s = f32_scale(amax);
                write_f32(scales, 4 * k, s);
                s
            }
            TileScale::Ue8m0 => {
                let e = ue8m0_scale(amax);
                scales[k] = e;
                ue8m0(e)
            }
        }
    }
}

/// `amax / 448`, kept positive for a non-zero tile: a tile of f32 subnormals whose quotient
/// would round to 0 gets the smallest subnormal instead of a division by zero.
fn f32_scale(amax: f32) -> f32 {
    if amax == 0.0 {
        return 0.0;
    }
    (amax / E4M3_MAX).max(f32::from_bits(1))
}

/// The UE8M0 byte of the smallest power of two `p` with `448 * p >= amax`, clamped to the
/// byte range [0, 254] (2^-127 ..= 2^127); byte 0 for an all-zero tile. The comparison is
/// exact: `448 * 2^k` and every f32 are exact in f64.
pub fn ue8m0_scale(amax: f32) -> u8 {
    if amax == 0.0 {
        return 0;
    }
    let amax = amax as f64;
    let pow2 = |k: i32| f64::from_bits(((k + 1023) as u64) << 52);
    // amax / 448 only estimates the exponent (it rounds); start one below and step up
    // until 448 * 2^e covers amax. amax is in [2^-149, 2^128), so e stays in (-160, 121].
    let estimate = amax / E4M3_MAX as f64;
    let mut e = ((estimate.to_bits() >> 52) & 0x7FF) as i32 - 1023 - 1;
    while (E4M3_MAX as f64) * pow2(e) < amax {
        e += 1;
    }
    (e + UE8M0_BIAS).clamp(0, 254) as u8
}

/// The code of `v / scale`, stepped toward zero while its decoded value would overflow f32.
/// Only a tile whose amax is within a rounding of f32::MAX can reach that: the decoded
/// tensor must stay finite, and the f32 decode must agree with the f64 oracle.
#[inline(always)]
fn encode_one(v: f32, scale: f32, near_max: bool) -> u8 {
    if scale == 0.0 {
        // An all-zero tile: keep the sign of zero, as any non-zero scale would.
        return ((v.to_bits() >> 24) & 0x80) as u8;
    }
    let mut c = e4m3_encode(v / scale);
    if near_max {
        while c & 0x7F != 0 && !(E4M3_FN[c as usize] * scale).is_finite() {
            c -= 1;
        }
    }
    c
}

fn decode<T: Real>(t: &QTensor<'_>, row0: usize, out: &mut [T]) {
    let cols = t.cols();
    let Some(tiles) = Tiles::of(t.format()) else {
        // Unreachable through `codec_for`; a NaN output is loud where a guess would not be.
        out.fill(T::from_f32(f32::NAN));
        return;
    };
    let per_band = cols.div_ceil(tiles.cols);
    let scales = t.scales();
    let mut band_scales: Vec<T> = Vec::with_capacity(per_band);
    let mut band = usize::MAX;
    for (r, dst) in out.chunks_exact_mut(cols).enumerate() {
        let o = row0 + r;
        if o / tiles.rows != band {
            band = o / tiles.rows;
            band_scales.clear();
            band_scales.extend(
                (0..per_band).map(|j| T::from_f32(tiles.read(scales, band * per_band + j))),
            );
        }
        let row = t.row(o);
        for ((d, b), &s) in dst
            .chunks_mut(tiles.cols)
            .zip(row.chunks(tiles.cols))
            .zip(band_scales.iter())
        {
            for (v, &byte) in d.iter_mut().zip(b) {
                *v = T::from_f32(E4M3_FN[byte as usize]) * s;
            }
        }
    }
}

impl FormatCodec for Fp8Codec {
    fn encode_rows(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
    ) -> Result<(), QuantError> {
        let n = src.len() / cols.max(1);
        let size_err = |what, expected: usize, got: usize| QuantError::BufferSize {
            format,
            what,
            rows: n,
            cols,
            expected: expected as u64,
            got,
        };
        let tiles = Tiles::of(format).ok_or_else(|| QuantError::UnknownFormat {
            name: format!("{format} (no per-tile f32/ue8m0 scales: not an fp8 format)"),
        })?;
        if cols == 0 || n * cols != src.len() {
            return Err(QuantError::InputSize {
                format,
                rows: n,
                cols,
                expected: (n as u64).saturating_add(1).saturating_mul(cols as u64),
                got: src.len(),
            });
        }
        // The caller hands over whole tile bands (api::encode_rows checks the alignment);
        // the byte ranges are the registry's, checked again so a direct call cannot panic.
        let wr = format.spec().weight_range(0, n, cols)?;
        if weights.len() != wr.len() {
            return Err(size_err("weight", wr.len(), weights.len()));
        }
        let sr = format.spec().scale_range(0, n, n, cols)?;
        if scales.len() != sr.len() {
            return Err(size_err("scale", sr.len(), scales.len()));
        }
        let per_band = cols.div_ceil(tiles.cols);
        let mut amax = vec![0f32; per_band];
        let mut scale = vec![0f32; per_band];
        let mut near_max = vec![false; per_band];
        let band_len = tiles.rows * cols;
        for (b, (band, wband)) in src
            .chunks(band_len)
            .zip(weights.chunks_mut(band_len))
            .enumerate()
        {
            amax.fill(0.0);
            for row in band.chunks_exact(cols) {
                for (m, chunk) in amax.iter_mut().zip(row.chunks(tiles.cols)) {
                    *m = chunk.iter().fold(*m, |m, v| m.max(v.abs()));
                }
            }
            for j in 0..per_band {
                scale[j] = tiles.write(scales, b * per_band + j, amax[j]);
                // 448 * scale can exceed amax by a rounding (f32) or by up to 2x (UE8M0).
                near_max[j] = !(E4M3_MAX * scale[j]).is_finite();
            }
            for (row, wrow) in band.chunks_exact(cols).zip(wband.chunks_exact_mut(cols)) {
                for (j, (chunk, wchunk)) in row
                    .chunks(tiles.cols)
                    .zip(wrow.chunks_mut(tiles.cols))
                    .enumerate()
                {
                    let (s, nm) = (scale[j], near_max[j]);
                    for (q, &v) in wchunk.iter_mut().zip(chunk) {
                        *q = encode_one(v, s, nm);
                    }
                }
            }
        }
        Ok(())
    }

    fn decode_rows_f32(&self, t: &QTensor<'_>, row0: usize, out: &mut [f32]) {
        decode(t, row0, out)
    }

    fn decode_rows_f64(&self, t: &QTensor<'_>, row0: usize, out: &mut [f64]) {
        decode(t, row0, out)
    }
}
