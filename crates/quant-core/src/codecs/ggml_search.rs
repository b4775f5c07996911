//! Lane-parallel ports of GGML's per-sub-block scale searches (`make_qkx2_quants`,
//! `make_qx_quants` with `rmse_type = 1`, and the search of `quantize_row_iq4_nl_impl`),
//! for the k-quant and iq4 encoders.
//!
//! The scalar ports spend their time in sequential f32 sums (each candidate scale's
//! least-squares sums over a sub-block), which are latency-bound and must keep their order
//! to choose what GGML chooses. The sub-blocks of a super-block are independent problems,
//! though, so here [`LANES`] of them run side by side: lane `c` is sub-block `c`, `x[i][c]`
//! its `i`-th value, and every lane performs exactly the scalar port's operations in the
//! scalar port's order (branches become per-lane selects). Each lane's result is therefore
//! bit-identical to the scalar port on that sub-block, while the loops over lanes compile to
//! SIMD. The candidates of one sub-block cannot be spread over lanes instead: GGML's
//! `make_qkx2_quants` moves its `min` when a candidate wins, which changes the candidates
//! after it.
//!
//! `tests` below keeps the scalar ports and compares them lane by lane on random and
//! awkward sub-blocks; `tests/ggml_encode_golden.rs` pins the encoders' bytes.

// Per-lane loops index several arrays with the lane number.
#![allow(clippy::needless_range_loop)]
use super::ggml_common::{GROUP_MAX_EPS, nearest_int};
use super::ggml_iq4::KVALUES_IQ4NL;

/// The body of a GGML block encoder, `$body(x, out)` (an `#[inline(always)]` function),
/// compiled a second time for AVX2 and run that way where the CPU has it. The lane loops
/// vectorize far better with AVX2's 8-wide f32 and its i32 min/max than with baseline
/// x86-64's SSE2; the arithmetic is the same IEEE f32 either way (Rust never fuses a
/// multiply and an add), so the bytes do not depend on the path.
macro_rules! avx2_dispatch {
    ($body:path, $x:expr, $out:expr) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2")]
            fn avx2(x: &[f32], out: &mut [u8]) -> Result<(), ()> {
                $body(x, out)
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: `avx2` only needs the AVX2 instructions, which the CPU was just
                // found to support.
                return unsafe { avx2($x, $out) };
            }
        }
        $body($x, $out)
    }};
}
pub(crate) use avx2_dispatch;

/// Sub-blocks searched at once: one AVX2 register of f32, two SSE2 ones.
pub(crate) const LANES: usize = 8;

/// One f32 per lane.
pub(crate) type Lane = [f32; LANES];

/// Zero in every lane.
const ZERO: Lane = [0.0; LANES];

/// The error GGML's `make_qkx2_quants` sums: |d| with `use_mad`, else d².
#[inline(always)]
fn err<const MAD: bool>(d: f32) -> f32 {
    if MAD { d.abs() } else { d * d }
}

/// GGML's `make_qkx2_quants` on [`LANES`] sub-blocks of `N` values: `x[i][c]` is value `i`
/// of sub-block `c`, `w[i][c]` its weight. Writes codes `0..=nmax` to `l_out[i][c]` and
/// returns per lane (scale, -min), as the scalar port does for each sub-block.
// One argument per GGML parameter keeps the port comparable with ggml-quants.c.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn qkx2_lanes<const N: usize, const MAD: bool>(
    nmax: i32,
    x: &[Lane; N],
    w: &[Lane; N],
    l_out: &mut [[u8; LANES]; N],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (Lane, Lane) {
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w[0];
    let mut sum_x = ZERO;
    for c in 0..LANES {
        sum_x[c] = sum_w[c] * x[0][c];
    }
    for i in 1..N {
        for c in 0..LANES {
            let v = x[i][c];
            if v < min[c] {
                min[c] = v;
            }
            if v > max[c] {
                max[c] = v;
            }
            sum_w[c] += w[i][c];
            sum_x[c] += w[i][c] * v;
        }
    }
    let mut flat = [false; LANES];
    for c in 0..LANES {
        if min[c] > 0.0 {
            min[c] = 0.0;
        }
        flat[c] = max[c] == min[c];
    }
    // A flat lane returns (0, -min) with all-zero codes before any search.
    let flat_min = min;
    let nmaxf = nmax as f32;
    let mut scale = ZERO;
    let mut iscale = ZERO;
    for c in 0..LANES {
        iscale[c] = nmaxf / (max[c] - min[c]);
        scale[c] = 1.0 / iscale[c];
    }
    let mut best_error = ZERO;
    for i in 0..N {
        for c in 0..LANES {
            let l = nearest_int(iscale[c] * (x[i][c] - min[c])).clamp(0, nmax);
            l_out[i][c] = l as u8;
            let diff = scale[c] * l as f32 + min[c] - x[i][c];
            best_error[c] += w[i][c] * err::<MAD>(diff);
        }
    }
    if nstep >= 1 {
        let mut laux = [[0u8; LANES]; N];
        for is in 0..=nstep {
            for c in 0..LANES {
                iscale[c] = (rmin + rdelta * is as f32 + nmaxf) / (max[c] - min[c]);
            }
            let (mut sum_l, mut sum_l2, mut sum_xl) = (ZERO, ZERO, ZERO);
            for i in 0..N {
                for c in 0..LANES {
                    let l = nearest_int(iscale[c] * (x[i][c] - min[c])).clamp(0, nmax);
                    laux[i][c] = l as u8;
                    let wi = w[i][c];
                    let lf = l as f32;
                    sum_l[c] += wi * lf;
                    sum_l2[c] += wi * lf * lf;
                    sum_xl[c] += wi * lf * x[i][c];
                }
            }
            let mut this_scale = ZERO;
            let mut this_min = ZERO;
            let mut live = [false; LANES];
            for c in 0..LANES {
                let d = sum_w[c] * sum_l2[c] - sum_l[c] * sum_l[c];
                live[c] = d > 0.0;
                this_scale[c] = (sum_w[c] * sum_xl[c] - sum_x[c] * sum_l[c]) / d;
                this_min[c] = (sum_l2[c] * sum_x[c] - sum_l[c] * sum_xl[c]) / d;
                if this_min[c] > 0.0 {
                    this_min[c] = 0.0;
                    this_scale[c] = sum_xl[c] / sum_l2[c];
                }
            }
            let mut cur_error = ZERO;
            for i in 0..N {
                for c in 0..LANES {
                    let diff = this_scale[c] * laux[i][c] as f32 + this_min[c] - x[i][c];
                    cur_error[c] += w[i][c] * err::<MAD>(diff);
                }
            }
            let mut take = [false; LANES];
            for c in 0..LANES {
                take[c] = live[c] && cur_error[c] < best_error[c];
                if take[c] {
                    best_error[c] = cur_error[c];
                    scale[c] = this_scale[c];
                    min[c] = this_min[c];
                }
            }
            for i in 0..N {
                for c in 0..LANES {
                    if take[c] {
                        l_out[i][c] = laux[i][c];
                    }
                }
            }
        }
    }
    for c in 0..LANES {
        if flat[c] {
            scale[c] = 0.0;
            min[c] = flat_min[c];
            for row in l_out.iter_mut() {
                row[c] = 0;
            }
        }
    }
    let mut neg_min = ZERO;
    for c in 0..LANES {
        neg_min[c] = -min[c];
    }
    (scale, neg_min)
}

/// GGML's `make_qx_quants(n, nmax, x, L, 1, NULL)` (the x²-weighted search q6_k uses) on
/// [`LANES`] sub-blocks of `N` values: codes `L + nmax` to `l_out[i][c]`, scales returned.
#[inline(always)]
pub(crate) fn qx_rmse1_lanes<const N: usize>(
    nmax: i32,
    x: &[Lane; N],
    l_out: &mut [[i8; LANES]; N],
) -> Lane {
    let (mut max, mut amax) = (ZERO, ZERO);
    for i in 0..N {
        for c in 0..LANES {
            let a = x[i][c].abs();
            if a > amax[c] {
                amax[c] = a;
                max[c] = x[i][c];
            }
        }
    }
    let nmaxf = nmax as f32;
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let mut iscale = ZERO;
    for c in 0..LANES {
        iscale[c] = -nmaxf / max[c];
    }
    let (mut sumlx, mut suml2) = (ZERO, ZERO);
    for i in 0..N {
        for c in 0..LANES {
            let xi = x[i][c];
            let l = clamp(nearest_int(iscale[c] * xi));
            l_out[i][c] = (l + nmax) as i8;
            let wi = xi * xi;
            let lf = l as f32;
            sumlx[c] += wi * xi * lf;
            suml2[c] += wi * lf * lf;
        }
    }
    let mut scale = ZERO;
    let mut best = ZERO;
    for c in 0..LANES {
        scale[c] = if suml2[c] != 0.0 {
            sumlx[c] / suml2[c]
        } else {
            0.0
        };
        best[c] = scale[c] * sumlx[c];
    }
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        for c in 0..LANES {
            iscale[c] = -(nmaxf + 0.1 * is as f32) / max[c];
        }
        let (mut sumlx, mut suml2) = (ZERO, ZERO);
        for i in 0..N {
            for c in 0..LANES {
                let xi = x[i][c];
                let lf = clamp(nearest_int(iscale[c] * xi)) as f32;
                let wi = xi * xi;
                sumlx[c] += wi * xi * lf;
                suml2[c] += wi * lf * lf;
            }
        }
        let mut take = [false; LANES];
        for c in 0..LANES {
            take[c] = suml2[c] > 0.0 && sumlx[c] * sumlx[c] > best[c] * suml2[c];
            if take[c] {
                scale[c] = sumlx[c] / suml2[c];
                best[c] = scale[c] * sumlx[c];
            }
        }
        for i in 0..N {
            for c in 0..LANES {
                if take[c] {
                    l_out[i][c] = (nmax + clamp(nearest_int(iscale[c] * x[i][c]))) as i8;
                }
            }
        }
    }
    for c in 0..LANES {
        if amax[c] < GROUP_MAX_EPS {
            scale[c] = 0.0;
            for row in l_out.iter_mut() {
                row[c] = 0;
            }
        }
    }
    scale
}

/// [`KVALUES_IQ4NL`] as f32 (exact).
const IQ4_F32: [f32; 16] = {
    let mut t = [0f32; 16];
    let mut k = 0;
    while k < 16 {
        t[k] = KVALUES_IQ4NL[k] as f32;
        k += 1;
    }
    t
};

/// GGML's `best_index_int8(16, kvalues_iq4nl, y)` without branches: (index, table value).
/// The binary search finds `mu` with `t[mu-1] <= y < t[mu]` (clamped to 1..=15) and picks
/// `mu - 1` when `y - t[mu-1] < t[mu] - y`; a running select over the sorted table finds
/// the same pair, and the same comparison covers GGML's two end cases (y <= t[0] gives 0,
/// y >= t[15] gives 15, NaN gives 15 as the search does).
// `!(y < t)` rather than `y >= t`: a NaN must move up the table, as GGML's search does.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
#[inline(always)]
pub(crate) fn iq4_nearest(y: f32) -> (u8, f32) {
    let t = &IQ4_F32;
    let (mut idx, mut lo, mut hi) = (1u8, t[0], t[1]);
    for j in 1..15 {
        if !(y < t[j]) {
            idx = j as u8 + 1;
            lo = t[j];
            hi = t[j + 1];
        }
    }
    if y - lo < hi - y {
        (idx - 1, lo)
    } else {
        (idx, hi)
    }
}

/// `q[i][c]`: the table value nearest `id[c] * x[i][c]`. A loop of its own, free of the
/// sums' order, so it vectorizes.
#[inline(always)]
fn nearest_values(x: &[Lane; 32], id: &Lane, q: &mut [Lane; 32]) {
    for (qr, xr) in q.iter_mut().zip(x) {
        for c in 0..LANES {
            qr[c] = iq4_nearest(id[c] * xr[c]).1;
        }
    }
}

/// The scale search of `quantize_row_iq4_nl_impl` (no importance matrix: weight x²) on
/// [`LANES`] 32-weight sub-blocks, `ntry` as GGML's; returns each lane's scale (0 for an
/// all-zero sub-block). The codes it tries are not returned: iq4_xs re-quantizes against
/// its stored 6-bit scales.
#[inline(always)]
pub(crate) fn iq4_fit_lanes(x: &[Lane; 32], ntry: i32) -> Lane {
    let v0 = IQ4_F32[0];
    let (mut max, mut amax) = (ZERO, ZERO);
    for i in 0..32 {
        for c in 0..LANES {
            let a = x[i][c].abs();
            if a > amax[c] {
                amax[c] = a;
                max[c] = x[i][c];
            }
        }
    }
    let mut d = ZERO;
    let mut id = ZERO;
    for c in 0..LANES {
        d[c] = if ntry > 0 { -max[c] / v0 } else { max[c] / v0 };
        id[c] = 1.0 / d[c];
    }
    let mut q = [ZERO; 32];
    nearest_values(x, &id, &mut q);
    let (mut sumqx, mut sumq2) = (ZERO, ZERO);
    for i in 0..32 {
        for c in 0..LANES {
            let xi = x[i][c];
            let wi = xi * xi;
            sumqx[c] += wi * q[i][c] * xi;
            sumq2[c] += wi * q[i][c] * q[i][c];
        }
    }
    let mut best = ZERO;
    for c in 0..LANES {
        d[c] = if sumq2[c] > 0.0 {
            sumqx[c] / sumq2[c]
        } else {
            0.0
        };
        best[c] = d[c] * sumqx[c];
    }
    for itry in -ntry..=ntry {
        for c in 0..LANES {
            id[c] = (itry as f32 + v0) / max[c];
        }
        nearest_values(x, &id, &mut q);
        let (mut sumqx, mut sumq2) = (ZERO, ZERO);
        for i in 0..32 {
            for c in 0..LANES {
                let xi = x[i][c];
                let wi = xi * xi;
                sumqx[c] += wi * q[i][c] * xi;
                sumq2[c] += wi * q[i][c] * q[i][c];
            }
        }
        for c in 0..LANES {
            if sumq2[c] > 0.0 && sumqx[c] * sumqx[c] > best[c] * sumq2[c] {
                d[c] = sumqx[c] / sumq2[c];
                best[c] = d[c] * sumqx[c];
            }
        }
    }
    for c in 0..LANES {
        if amax[c] < GROUP_MAX_EPS {
            d[c] = 0.0;
        }
    }
    d
}

/// `LANES` consecutive `N`-value sub-blocks of `x` (from `x[0]`), transposed to lanes.
#[inline(always)]
pub(crate) fn to_lanes<const N: usize>(x: &[f32]) -> [Lane; N] {
    let mut t = [ZERO; N];
    for (c, sub) in x.chunks_exact(N).take(LANES).enumerate() {
        for (i, &v) in sub.iter().enumerate() {
            t[i][c] = v;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    //! The scalar ports these lanes replace, kept verbatim, and lane-by-lane comparisons.
    use super::*;
    use crate::testdata::Rng;

    /// The scalar port of GGML's `make_qkx2_quants` (what the encoders ran before).
    #[allow(clippy::too_many_arguments)]
    fn make_qkx2_quants(
        nmax: i32,
        x: &[f32],
        weights: &[f32],
        l_out: &mut [u8],
        rmin: f32,
        rdelta: f32,
        nstep: i32,
        use_mad: bool,
    ) -> (f32, f32) {
        let n = x.len();
        let mut min = x[0];
        let mut max = x[0];
        let mut sum_w = weights[0];
        let mut sum_x = sum_w * x[0];
        for i in 1..n {
            if x[i] < min {
                min = x[i];
            }
            if x[i] > max {
                max = x[i];
            }
            let w = weights[i];
            sum_w += w;
            sum_x += w * x[i];
        }
        if min > 0.0 {
            min = 0.0;
        }
        if max == min {
            l_out[..n].fill(0);
            return (0.0, -min);
        }
        let err = |d: f32| if use_mad { d.abs() } else { d * d };
        let nmaxf = nmax as f32;
        let mut iscale = nmaxf / (max - min);
        let mut scale = 1.0 / iscale;
        let mut best_error = 0f32;
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            l_out[i] = l as u8;
            let diff = scale * l as f32 + min - x[i];
            best_error += weights[i] * err(diff);
        }
        if nstep < 1 {
            return (scale, -min);
        }
        let mut laux = [0u8; 256];
        for is in 0..=nstep {
            iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
            let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
            for i in 0..n {
                let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
                laux[i] = l as u8;
                let w = weights[i];
                let lf = l as f32;
                sum_l += w * lf;
                sum_l2 += w * lf * lf;
                sum_xl += w * lf * x[i];
            }
            let d = sum_w * sum_l2 - sum_l * sum_l;
            if d > 0.0 {
                let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
                let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
                if this_min > 0.0 {
                    this_min = 0.0;
                    this_scale = sum_xl / sum_l2;
                }
                let mut cur_error = 0f32;
                for i in 0..n {
                    let diff = this_scale * laux[i] as f32 + this_min - x[i];
                    cur_error += weights[i] * err(diff);
                }
                if cur_error < best_error {
                    l_out[..n].copy_from_slice(&laux[..n]);
                    best_error = cur_error;
                    scale = this_scale;
                    min = this_min;
                }
            }
        }
        (scale, -min)
    }

    /// The scalar port of GGML's `make_qx_quants` with `rmse_type = 1` and no weights.
    fn make_qx_quants_rmse1(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
        let n = x.len();
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            l_out[..n].fill(0);
            return 0.0;
        }
        let nmaxf = nmax as f32;
        let mut iscale = -nmaxf / max;
        let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for i in 0..n {
            let l = clamp(nearest_int(iscale * x[i]));
            l_out[i] = (l + nmax) as i8;
            let w = x[i] * x[i];
            sumlx += w * x[i] * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
        let mut best = scale * sumlx;
        for is in -9..=9 {
            if is == 0 {
                continue;
            }
            iscale = -(nmaxf + 0.1 * is as f32) / max;
            sumlx = 0.0;
            suml2 = 0.0;
            for i in 0..n {
                let l = clamp(nearest_int(iscale * x[i]));
                let w = x[i] * x[i];
                sumlx += w * x[i] * l as f32;
                suml2 += w * l as f32 * l as f32;
            }
            if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
                for i in 0..n {
                    l_out[i] = (nmax + clamp(nearest_int(iscale * x[i]))) as i8;
                }
                scale = sumlx / suml2;
                best = scale * sumlx;
            }
        }
        scale
    }

    /// The scalar port of GGML's `best_index_int8` (binary search).
    fn best_index_int8(val: &[i8], x: f32) -> usize {
        let n = val.len();
        if x <= val[0] as f32 {
            return 0;
        }
        if x >= val[n - 1] as f32 {
            return n - 1;
        }
        let (mut ml, mut mu) = (0usize, n - 1);
        while mu - ml > 1 {
            let mav = (ml + mu) / 2;
            if x < val[mav] as f32 {
                mu = mav;
            } else {
                ml = mav;
            }
        }
        if x - (val[mu - 1] as f32) < (val[mu] as f32) - x {
            mu - 1
        } else {
            mu
        }
    }

    /// The scalar port of the `quantize_row_iq4_nl_impl` search (scale only).
    fn iq4_fit_scalar(xb: &[f32], ntry: i32) -> f32 {
        let values = &KVALUES_IQ4NL;
        let v0 = values[0] as f32;
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            return 0.0;
        }
        let mut d = if ntry > 0 { -max / v0 } else { max / v0 };
        let mut id = 1.0 / d;
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for &x in xb {
            let q = values[best_index_int8(values, id * x)] as f32;
            let w = x * x;
            sumqx += w * q * x;
            sumq2 += w * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -ntry..=ntry {
            id = (itry as f32 + v0) / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for &x in xb {
                let q = values[best_index_int8(values, id * x)] as f32;
                let w = x * x;
                sumqx += w * q * x;
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        d
    }

    /// A sub-block of `n` values of one of several kinds (Gaussian, one-signed, integer,
    /// tiny, constant, spiky, table points, zero), so every branch of the searches runs.
    fn sub_block(rng: &mut Rng, n: usize) -> Vec<f32> {
        let kind = rng.below(9);
        let s = (rng.uniform() * 8.0 - 4.0).exp2() as f32;
        (0..n)
            .map(|i| match kind {
                0 | 1 => rng.normal() * s,
                2 => rng.normal().abs() * s + 0.01,
                3 => -rng.normal().abs() * s,
                4 => (rng.below(9) as f32 - 4.0) * s,
                5 => rng.normal() * 1e-16,
                6 => -0.5 * s,
                7 => {
                    if i == 3 {
                        s
                    } else {
                        rng.normal() * 1e-4 * s
                    }
                }
                _ => {
                    if rng.below(4) == 0 {
                        0.0
                    } else {
                        IQ4_F32[rng.below(16)] * s
                    }
                }
            })
            .collect()
    }

    fn lanes_of<const N: usize>(rng: &mut Rng) -> (Vec<f32>, [Lane; N]) {
        let flat: Vec<f32> = (0..LANES).flat_map(|_| sub_block(rng, N)).collect();
        let t = to_lanes::<N>(&flat);
        (flat, t)
    }

    fn check_qkx2<const N: usize, const MAD: bool>(nmax: i32, rmin: f32, nstep: i32) {
        let mut rng = Rng::new(0x000C_0DEC + N as u64 + nmax as u64);
        for _ in 0..400 {
            let (flat, x) = lanes_of::<N>(&mut rng);
            // q2_k weighs by |x|; q4_k/q5_k by sqrt(mean x²) + |x|.
            let mut w = [ZERO; N];
            for c in 0..LANES {
                let sub = &flat[N * c..N * c + N];
                let av = (sub.iter().fold(0f32, |a, v| a + v * v) / N as f32).sqrt();
                for i in 0..N {
                    w[i][c] = if MAD { sub[i].abs() } else { av + sub[i].abs() };
                }
            }
            let mut l = [[0u8; LANES]; N];
            let (s, m) = qkx2_lanes::<N, MAD>(nmax, &x, &w, &mut l, rmin, 0.1, nstep);
            for c in 0..LANES {
                let sub = &flat[N * c..N * c + N];
                let wc: Vec<f32> = (0..N).map(|i| w[i][c]).collect();
                let mut lr = vec![0u8; N];
                let (sr, mr) = make_qkx2_quants(nmax, sub, &wc, &mut lr, rmin, 0.1, nstep, MAD);
                assert_eq!(s[c].to_bits(), sr.to_bits(), "scale, lane {c}: {sub:?}");
                assert_eq!(m[c].to_bits(), mr.to_bits(), "min, lane {c}: {sub:?}");
                let lc: Vec<u8> = (0..N).map(|i| l[i][c]).collect();
                assert_eq!(lc, lr, "codes, lane {c}: {sub:?}");
            }
        }
    }

    #[test]
    fn qkx2_lanes_equal_the_scalar_port() {
        check_qkx2::<16, true>(3, -0.5, 15);
        check_qkx2::<32, false>(15, -1.0, 20);
        check_qkx2::<32, false>(31, -0.5, 15);
        check_qkx2::<32, false>(15, -1.0, 0);
    }

    #[test]
    fn qx_lanes_equal_the_scalar_port() {
        let mut rng = Rng::new(0x0006_6666);
        for _ in 0..400 {
            let (flat, x) = lanes_of::<16>(&mut rng);
            let mut l = [[0i8; LANES]; 16];
            let s = qx_rmse1_lanes::<16>(32, &x, &mut l);
            for c in 0..LANES {
                let sub = &flat[16 * c..16 * c + 16];
                let mut lr = vec![0i8; 16];
                let sr = make_qx_quants_rmse1(32, sub, &mut lr);
                assert_eq!(s[c].to_bits(), sr.to_bits(), "scale, lane {c}: {sub:?}");
                let lc: Vec<i8> = (0..16).map(|i| l[i][c]).collect();
                assert_eq!(lc, lr, "codes, lane {c}: {sub:?}");
            }
        }
    }

    #[test]
    fn iq4_lanes_equal_the_scalar_port() {
        let mut rng = Rng::new(0x0001_0004);
        for ntry in [7, -1] {
            for _ in 0..300 {
                let (flat, x) = lanes_of::<32>(&mut rng);
                let d = iq4_fit_lanes(&x, ntry);
                for c in 0..LANES {
                    let sub = &flat[32 * c..32 * c + 32];
                    let dr = iq4_fit_scalar(sub, ntry);
                    assert_eq!(
                        d[c].to_bits(),
                        dr.to_bits(),
                        "lane {c}, ntry {ntry}: {sub:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn iq4_nearest_equals_the_binary_search() {
        let mut ys: Vec<f32> = vec![f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.0, -0.0];
        for k in 0..16 {
            let t = IQ4_F32[k];
            ys.extend([t, t.next_up(), t.next_down()]);
            if k < 15 {
                let m = 0.5 * (t + IQ4_F32[k + 1]);
                ys.extend([m, m.next_up(), m.next_down()]);
            }
        }
        let mut rng = Rng::new(7);
        ys.extend((0..20_000).map(|_| (rng.uniform() as f32 - 0.5) * 300.0));
        for y in ys {
            let (k, v) = iq4_nearest(y);
            let r = best_index_int8(&KVALUES_IQ4NL, y);
            assert_eq!(usize::from(k), r, "index of {y}");
            assert_eq!(v, IQ4_F32[r], "value of {y}");
        }
    }
}
