//! Codec quality metrics: what `tessera quality` and `cargo xtask quality` report (issue 9,
//! seed 001 § 5), and the error histogram's data and SVG chart.
//!
//! Every metric compares a reference `w` with its reconstruction `ŵ` in one *measurement
//! domain*, the same for every format of a comparison: either the logical domain, or the
//! FWHT-256 domain (seed 001's "post-FWHT 256-blocks"), see [`round_trip`]. Definitions:
//!
//! - **MSE**: `sum (ŵ - w)² / n` over all n weights, accumulated in f64.
//! - **tail-1% MSE**: the same mean over the weights with `|w| > t` only, where `t` is the
//!   nearest-rank 99th percentile of `|w|` over every weight measured (all tensors pooled,
//!   as seed 001 pooled its blocks): sort the n values `|w|` ascending and take the
//!   `ceil(0.99 n)`-th (1-based). Strictly greater, so with distinct values the tail holds
//!   `n - ceil(0.99 n)` weights (1% of them, rounded down); see [`abs_quantile_of`].
//! - **max rel**: seed 001's max-coefficient error. Each row is cut into 256-weight chunks
//!   along I (the last one may be shorter); a chunk's coefficient of largest magnitude `w*`
//!   (the first, on ties) and its reconstruction `ŵ*` give `|ŵ* - w*| / |w*|` (chunks that are
//!   all zero are left out); max rel is the largest over all chunks. A min/max affine encoder
//!   represents each block's extremes, so with f32 headers this is 0 up to f32 rounding (the
//!   seed's "0.000% for every affine row"); fp16 headers leave their own rounding (about
//!   2^-11 relative); an encoder that clips reports how much it clipped.
//! - **bits per weight**: stored bytes (weights and scales, from the registry) times 8 over
//!   the weights measured.
//! - **histogram**: of `log10(|ŵ - w| / |w*|)` per weight (`w*` of its chunk), on fixed bins
//!   [`HIST_LO`, `HIST_HI`), with exact zeros and the two overflows counted apart.

use crate::api::{EncodeOptions, decode, encode, task_rows};
use crate::codec::codec_for;
use crate::error::QuantError;
use crate::registry::{Format, Rotation};
use crate::rotation;
use crate::tensor::EncodedTensor;
use rayon::prelude::*;
use std::fmt::Write as _;

/// The tail's quantile of |w|.
pub const TAIL_QUANTILE: f64 = 0.99;
/// Weights a max-rel chunk spans along I (seed 001's block).
pub const CHUNK: usize = 256;
/// Lower edge of the histogram, log10 of the chunk-relative error.
pub const HIST_LO: f64 = -7.0;
/// Upper edge of the histogram (an error as large as the chunk's largest weight).
pub const HIST_HI: f64 = 0.0;
/// Bins per decade.
pub const HIST_PER_DECADE: usize = 20;

/// Rank (1-based) of the nearest-rank q-quantile of n values: `ceil(q n)`, at least 1.
pub fn nearest_rank(q: f64, n: u64) -> u64 {
    let r = (q * n as f64).ceil() as u64;
    r.clamp(1, n.max(1))
}

/// The exact nearest-rank q-quantile of `|v|` over a data set that `visit` feeds in slices.
/// `visit` is called twice and must feed the same values both times (a two-pass radix
/// select on the f32 bit patterns: exact, and memory independent of the data's size).
/// `None` for no data. Values must be finite.
pub fn abs_quantile<F>(q: f64, mut visit: F) -> Option<f32>
where
    F: FnMut(&mut dyn FnMut(&[f32])),
{
    // |x| of a finite f32 orders like its bit pattern read as an integer.
    let mut hi = vec![0u64; 1 << 16];
    let mut n = 0u64;
    visit(&mut |v: &[f32]| {
        n += v.len() as u64;
        for x in v {
            hi[(x.abs().to_bits() >> 16) as usize] += 1;
        }
    });
    if n == 0 {
        return None;
    }
    let mut rank = nearest_rank(q, n);
    let mut bucket = 0usize;
    for (b, &c) in hi.iter().enumerate() {
        if rank <= c {
            bucket = b;
            break;
        }
        rank -= c;
    }
    let mut lo = vec![0u64; 1 << 16];
    visit(&mut |v: &[f32]| {
        for x in v {
            let bits = x.abs().to_bits();
            if (bits >> 16) as usize == bucket {
                lo[(bits & 0xFFFF) as usize] += 1;
            }
        }
    });
    for (b, &c) in lo.iter().enumerate() {
        if rank <= c {
            return Some(f32::from_bits(((bucket as u32) << 16) | b as u32));
        }
        rank -= c;
    }
    // Only reachable when the second pass was fed different values than the first.
    None
}

/// [`abs_quantile`] of one slice.
pub fn abs_quantile_of(q: f64, v: &[f32]) -> Option<f32> {
    abs_quantile(q, |f| f(v))
}

/// Counts of `log10(|ŵ - w| / |w*|)` on fixed bins.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// Bin k covers `[HIST_LO + k / HIST_PER_DECADE, HIST_LO + (k + 1) / HIST_PER_DECADE)`.
    pub counts: Vec<u64>,
    /// Errors that are exactly zero.
    pub zero: u64,
    /// Non-zero errors below `10^HIST_LO`.
    pub below: u64,
    /// Errors at or above `10^HIST_HI` (as large as the chunk's largest weight).
    pub above: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; Self::bins()],
            zero: 0,
            below: 0,
            above: 0,
        }
    }
}

impl Histogram {
    pub fn bins() -> usize {
        ((HIST_HI - HIST_LO) as usize) * HIST_PER_DECADE
    }
    /// Left edge (log10) of bin k.
    pub fn edge(k: usize) -> f64 {
        HIST_LO + k as f64 / HIST_PER_DECADE as f64
    }
    #[inline]
    fn add(&mut self, rel: f64) {
        if rel == 0.0 {
            self.zero += 1;
            return;
        }
        let x = (rel.log10() - HIST_LO) * HIST_PER_DECADE as f64;
        if x < 0.0 {
            self.below += 1;
        } else if x >= self.counts.len() as f64 {
            self.above += 1;
        } else {
            self.counts[x as usize] += 1;
        }
    }
    fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.zero += o.zero;
        self.below += o.below;
        self.above += o.above;
    }
    /// Every weight counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum::<u64>() + self.zero + self.below + self.above
    }
}

/// Error statistics of one format over everything it was measured on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorStats {
    /// Weights measured.
    pub weights: u64,
    /// Sum of squared errors.
    pub sse: f64,
    /// Weights with `|w|` above the tail threshold.
    pub tail_weights: u64,
    /// Sum of their squared errors.
    pub tail_sse: f64,
    /// Chunks with a non-zero largest weight.
    pub chunks: u64,
    /// The largest `|ŵ* - w*| / |w*|` over those chunks.
    pub max_rel: f64,
    /// Stored bytes (weights and scales) of the tensors measured.
    pub stored_bytes: u64,
    pub hist: Histogram,
}

impl ErrorStats {
    /// Statistics of one [rows, cols] tensor (`w`, `w_hat` row-major, same domain) against
    /// the tail threshold `tail`. Stored bytes are left at 0 (see [`Self::add_stored`]).
    pub fn measure(cols: usize, w: &[f32], w_hat: &[f32], tail: f32) -> ErrorStats {
        if cols == 0 || w.len() != w_hat.len() {
            return ErrorStats::default();
        }
        let rows_per_task = (65_536 / cols).max(1);
        w.par_chunks(rows_per_task * cols)
            .zip(w_hat.par_chunks(rows_per_task * cols))
            .map(|(a, b)| {
                let mut s = ErrorStats::default();
                for (ra, rb) in a.chunks(cols).zip(b.chunks(cols)) {
                    for (ca, cb) in ra.chunks(CHUNK).zip(rb.chunks(CHUNK)) {
                        s.add_chunk(ca, cb, tail);
                    }
                }
                s
            })
            .reduce(ErrorStats::default, |mut x, y| {
                x.merge(&y);
                x
            })
    }

    fn add_chunk(&mut self, w: &[f32], w_hat: &[f32], tail: f32) {
        let mut k = 0;
        for (i, x) in w.iter().enumerate() {
            if x.abs() > w[k].abs() {
                k = i;
            }
        }
        let big = (w[k] as f64).abs();
        if big > 0.0 {
            self.chunks += 1;
            let rel = (w_hat[k] as f64 - w[k] as f64).abs() / big;
            if rel > self.max_rel {
                self.max_rel = rel;
            }
        }
        for (&a, &b) in w.iter().zip(w_hat) {
            let e = b as f64 - a as f64;
            let e2 = e * e;
            self.sse += e2;
            if a.abs() > tail {
                self.tail_weights += 1;
                self.tail_sse += e2;
            }
            // An all-zero chunk reconstructed exactly is all zero errors; anything else in
            // it is at least as large as the chunk's largest weight.
            self.hist.add(if big > 0.0 {
                e.abs() / big
            } else if e == 0.0 {
                0.0
            } else {
                f64::INFINITY
            });
        }
        self.weights += w.len() as u64;
    }

    /// Adds another tensor's statistics.
    pub fn merge(&mut self, o: &ErrorStats) {
        self.weights += o.weights;
        self.sse += o.sse;
        self.tail_weights += o.tail_weights;
        self.tail_sse += o.tail_sse;
        self.chunks += o.chunks;
        if o.max_rel > self.max_rel {
            self.max_rel = o.max_rel;
        }
        self.stored_bytes += o.stored_bytes;
        self.hist.merge(&o.hist);
    }

    /// Counts the registry's stored bytes of a [rows, cols] tensor of `format`.
    pub fn add_stored(
        &mut self,
        format: Format,
        rows: usize,
        cols: usize,
    ) -> Result<(), QuantError> {
        let spec = format.spec();
        let b = spec
            .weight_bytes(rows, cols)?
            .checked_add(spec.scale_bytes(rows, cols)?)
            .ok_or(QuantError::SizeOverflow { format, rows, cols })?;
        self.stored_bytes = self
            .stored_bytes
            .checked_add(b)
            .ok_or(QuantError::SizeOverflow { format, rows, cols })?;
        Ok(())
    }

    pub fn mse(&self) -> Option<f64> {
        (self.weights > 0).then(|| self.sse / self.weights as f64)
    }
    pub fn tail_mse(&self) -> Option<f64> {
        (self.tail_weights > 0).then(|| self.tail_sse / self.tail_weights as f64)
    }
    pub fn bits_per_weight(&self) -> Option<f64> {
        (self.weights > 0).then(|| self.stored_bytes as f64 * 8.0 / self.weights as f64)
    }
}

/// Encodes a [rows, cols] tensor and returns it with its reconstruction in the measurement
/// domain. `logical` is the tensor as given; `rotated` is `None` to measure in the logical
/// domain, or the tensor forward-rotated by [`rotation::forward_rows`] with
/// `opts.rotation_seed` to measure in that FWHT-256 domain. There, an un-rotated format
/// encodes `rotated` itself (so it quantizes the same post-FWHT blocks as the rotated
/// formats), and a rotated format encodes `logical` as usual — its own rotation, with the
/// same seed, produces exactly `rotated` — and is decoded in its stored domain, without the
/// inverse rotation.
pub fn round_trip(
    format: Format,
    rows: usize,
    cols: usize,
    logical: &[f32],
    rotated: Option<&[f32]>,
    opts: &EncodeOptions,
) -> Result<(EncodedTensor, Vec<f32>), QuantError> {
    let Some(rotated) = rotated else {
        let t = encode(format, rows, cols, logical, opts)?;
        let rec = decode(&t.view())?;
        return Ok((t, rec));
    };
    match format.spec().rotation {
        Rotation::None => {
            let t = encode(format, rows, cols, rotated, opts)?;
            let rec = decode(&t.view())?;
            Ok((t, rec))
        }
        Rotation::Fwht256 => {
            let t = encode(format, rows, cols, logical, opts)?;
            let v = t.view();
            let mut rec = vec![0f32; rows * cols];
            let step = task_rows(format, cols);
            rec.par_chunks_mut(step * cols)
                .enumerate()
                .for_each(|(k, out)| codec_for(format).decode_rows_f32(&v, k * step, out));
            Ok((t, rec))
        }
    }
}

/// `logical` forward-rotated for the FWHT-256 measurement domain (`cols % 256 == 0`).
pub fn rotate_for_measurement(logical: &[f32], cols: usize, seed: u64) -> Option<Vec<f32>> {
    if cols == 0 || !cols.is_multiple_of(rotation::BLOCK) {
        return None;
    }
    let mut r = logical.to_vec();
    r.par_chunks_mut(cols * (65_536 / cols).max(1))
        .for_each(|c| rotation::forward_rows(c, cols, seed));
    Some(r)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A line chart of the histograms (fraction of weights per bin against the log10 of the
/// chunk-relative error), one polyline per named series, as a standalone SVG document.
pub fn histogram_svg(title: &str, series: &[(String, &Histogram)]) -> String {
    const W: f64 = 900.0;
    const H: f64 = 520.0;
    const L: f64 = 70.0;
    const R: f64 = 230.0;
    const T: f64 = 40.0;
    const B: f64 = 60.0;
    const COLORS: [&str; 10] = [
        "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf",
    ];
    let bins = Histogram::bins();
    let frac = |h: &Histogram, k: usize| {
        let t = h.total();
        if t == 0 {
            0.0
        } else {
            h.counts[k] as f64 / t as f64
        }
    };
    let ymax = series
        .iter()
        .flat_map(|(_, h)| (0..bins).map(move |k| frac(h, k)))
        .fold(0f64, f64::max)
        .max(1e-9)
        * 1.05;
    let (pw, ph) = (W - L - R, H - T - B);
    let x_of = |lg: f64| L + (lg - HIST_LO) / (HIST_HI - HIST_LO) * pw;
    let y_of = |f: f64| T + ph - f / ymax * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        L + pw / 2.0,
        esc(title)
    );
    let _ = writeln!(
        s,
        r#"<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    for d in (HIST_LO as i32)..=(HIST_HI as i32) {
        let x = x_of(d as f64);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{T}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">1e{d}</text>"##,
            T + ph,
            T + ph + 16.0
        );
    }
    for k in 0..=4 {
        let f = ymax * k as f64 / 4.0;
        let y = y_of(f);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{:.1}%</text>"#,
            L - 6.0,
            y + 4.0,
            f * 100.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">|ŵ − w| / max |w| of its 256-chunk (log scale; {} bins a decade)</text>"#,
        L + pw / 2.0,
        H - 18.0,
        HIST_PER_DECADE
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">fraction of weights per bin</text>"#,
        T + ph / 2.0
    );
    for (i, (name, h)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = (0..bins)
            .map(|k| {
                let mid = Histogram::edge(k) + 0.5 / HIST_PER_DECADE as f64;
                format!("{:.1},{:.1}", x_of(mid), y_of(frac(h, k)))
            })
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.6" points="{}"/>"#,
            pts.join(" ")
        );
        let y = T + 14.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{c}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            W - R + 12.0,
            W - R + 36.0,
            W - R + 42.0,
            y + 4.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}
