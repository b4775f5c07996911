//! int8-activation kernels of the GGML block formats q8_0, q4_0, q4_k (and mq4-k), q5_k
//! and q6_k (bit layouts: codecs/ggml_legacy.rs, ggml_kquants.rs).
//!
//! Every 32 weights of a GGML block line up with one 32-block of the activations
//! ([`QLayout::Natural`]), so each dot of 32 codes with 32 int8 activations gives one
//! 32-block's sum spread over 8 i32 lanes. Converting and scaling each of those sums
//! separately would cost a convert, a lane broadcast and an FMA per 32 weights; instead
//! the eight dots of 256 weights are folded by two levels of `vphaddd` into two vectors —
//! lanes `[s0, s1, s2, s3, s0, s1, s2, s3]` each holding half of a dot's lanes (q4_k, q8_0)
//! or one 16-run each (q6_k) — which are converted once and multiplied by the matching
//! weight-scale × activation-step vectors (the activations store their steps in that lane
//! order, `QActs::d2`). Per format, with `Δ` the activation step and `x̂` the rounded
//! activations:
//!
//! - q8_0: `Σ w·x̂ = d · Δ · Σ q·q8` per block (signed codes: `|q|` against `x·sign(q)`);
//!   eight blocks at a time, a row's last `I/32 mod 8` blocks one at a time.
//! - q4_0: codes u = q + 8 in 0..15: `d·Δ·Σ (u - 8)·q8`, the integer sum started at
//!   `-8·Σ q8` (one block at a time).
//! - q4_k / q5_k: per 32-sub-block `S = d·sc`, `M = dmin·m`: `S·Δ·Σ u·q8 - M·Σ x̂`, the
//!   eight `M·Σ x̂` of a block in one 8-lane FMA.
//! - q6_k: per 16 weights `S = d·sc`, codes u = q + 32 in 0..63: `S·Δ·Σ (u - 32)·q8`,
//!   each dot started at `-32·Σ q8` of its lanes.
//!
//! The codes' offsets (8, 32) are folded into the integer sums, exactly; splitting them off
//! in f32 (`- 32·S·Σ x̂`) cancels two large terms and measured up to 2.5e-5 of
//! `Σ|w x̂|` off the product with the rounded activations. Formats whose weights are
//! genuinely affine (`d·sc·q - dmin·m`) keep their min term in f32, as ggml does; the
//! tests allow for that cancellation (see the tests' `arithmetic_magnitude`).
//!
//! Codes are at most 63 against activations in [-127, 127], so the AVX2 maddubs form
//! never saturates.

// Register-blocked micro-kernels index several parallel [R][T] arrays with the same row and
// activation indices; iterator chains would hide that shape.
#![allow(clippy::needless_range_loop)]

use super::super::SimdLevel;
use super::super::prefetch;
use super::super::vector::QVec;
use super::panels::{self, UNIT, in_panels};
use super::{Int8Kernel, QActs, QBody, QDriver, QLayout};
use crate::tensor::QTensor;
use std::marker::PhantomData;

/// One activation row's pointers.
#[derive(Copy, Clone)]
struct XRow {
    q: *const u8,
    d: *const f32,
    xs: *const f32,
    d2: *const f32,
    off8: *const i32,
    off32: *const i32,
}

/// The running sums of one (row, activation row): two sets of scaled dot lanes and the
/// min lanes to subtract.
#[derive(Copy, Clone)]
struct Acc<F> {
    dot: F,
    dot2: F,
    neg: F,
}

/// One GGML block type on the int8-activation path.
///
/// `unit` handles `BW` weights (`BB` bytes) of all R rows at once, with the row loops
/// innermost and every array of vectors indexed only by constant-trip-count loop counters,
/// so the compiler keeps them in registers.
trait QBlock: Sync + 'static {
    /// Weights one `unit` call covers.
    const BW: usize;
    /// Bytes one `unit` call covers.
    const BB: usize;
    /// Weights of one storage block (`tail` covers a row's last `I mod BW` weights one
    /// storage block at a time; `BW` is a multiple of it).
    const STORE_BW: usize;
    /// Bytes of one storage block.
    const STORE_BB: usize;
    /// Adds unit `j` of rows `b[0..R]` (pointers at the unit) against T activation rows.
    ///
    /// # Safety
    /// `Q`'s level is present and this is inlined into a function compiled for it; each
    /// `b[r]` points at a whole unit; the activation rows hold unit `j`.
    unsafe fn unit<Q: QVec, const R: usize, const T: usize>(
        b: &[*const u8; R],
        j: usize,
        xr: &[XRow; T],
        acc: &mut [[Acc<Q::F>; T]; R],
    );
    /// Adds storage block `g` (counted in storage blocks from the row start) of rows
    /// `b[0..R]` (pointers at that block).
    ///
    /// # Safety
    /// As [`Self::unit`], for one storage block.
    unsafe fn tail<Q: QVec, const R: usize, const T: usize>(
        b: &[*const u8; R],
        g: usize,
        xr: &[XRow; T],
        acc: &mut [[Acc<Q::F>; T]; R],
    );
}

pub(crate) struct GgmlQ<B>(PhantomData<fn() -> B>);

pub(crate) static Q8_0: GgmlQ<Q80> = GgmlQ(PhantomData);
pub(crate) static Q4_0: GgmlQ<Q40> = GgmlQ(PhantomData);
pub(crate) static Q4_K: GgmlQ<Q4k> = GgmlQ(PhantomData);
pub(crate) static Q5_K: GgmlQ<Q5k> = GgmlQ(PhantomData);
pub(crate) static Q6_K: GgmlQ<Q6k> = GgmlQ(PhantomData);

impl<B: QBlock> Int8Kernel for GgmlQ<B> {
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
        let units = t.cols() / B::BW;
        let body = |walk: std::ops::Range<usize>| GgmlBody::<B> {
            t,
            a,
            units,
            walk,
            tail: (t.cols() % B::BW) / B::STORE_BW,
            _b: PhantomData,
        };
        // Panels are whole 256-weight units (q4_0's 32-weight units keep whole rows).
        if B::BW == UNIT {
            in_panels(panels, units, a.s, out, |u0, u1, out| {
                QDriver(body(u0..u1)).run(level, row0, n, out)
            });
        } else {
            QDriver(body(0..units)).run(level, row0, n, out);
        }
    }
}

struct GgmlBody<'a, 'b, B> {
    t: &'a QTensor<'b>,
    a: &'a QActs,
    /// Whole units a row.
    units: usize,
    /// The units walked: all of them, or one column panel's (the storage blocks after the
    /// units go with the last panel).
    walk: std::ops::Range<usize>,
    /// Storage blocks after the units (I % STORE_BW == 0 is checked by `QTensor::new`).
    tail: usize,
    _b: PhantomData<fn() -> B>,
}

impl<B: QBlock> QBody for GgmlBody<'_, '_, B> {
    #[inline(always)]
    unsafe fn run<Q: QVec, const R: usize, const T: usize>(
        &self,
        o: usize,
        t0: usize,
        out: &mut [f32],
    ) {
        let a = self.a;
        let none = XRow {
            q: std::ptr::null(),
            d: std::ptr::null(),
            xs: std::ptr::null(),
            d2: std::ptr::null(),
            off8: std::ptr::null(),
            off32: std::ptr::null(),
        };
        let mut xr = [none; T];
        for k in 0..T {
            xr[k] = XRow {
                q: a.q(t0 + k),
                d: a.d(t0 + k),
                xs: a.xs(t0 + k),
                d2: a.d2(t0 + k),
                off8: a.off8n(t0 + k),
                off32: a.off32(t0 + k),
            };
        }
        let mut rows = [std::ptr::null::<u8>(); R];
        for r in 0..R {
            rows[r] = self.t.row(o + r).as_ptr();
        }
        // SAFETY: the caller's level contract; unit j < units and the
        // storage blocks after them lie in each row, and the activation rows are padded
        // past I.
        let zero = unsafe { Q::fzero() };
        let mut acc = [[Acc {
            dot: zero,
            dot2: zero,
            neg: zero,
        }; T]; R];
        let mut blk = [std::ptr::null::<u8>(); R];
        let ahead = panels::ahead(
            self.walk.len(),
            self.units,
            self.t.row_bytes(),
            prefetch::per_stream(R),
        );
        for j in self.walk.clone() {
            for r in 0..R {
                prefetch::lines(rows[r], j * B::BB, B::BB, ahead);
                // SAFETY: see above.
                blk[r] = unsafe { rows[r].add(j * B::BB) };
            }
            // SAFETY: see above.
            unsafe { B::unit::<Q, R, T>(&blk, j, &xr, &mut acc) };
        }
        let first = self.units * (B::BW / B::STORE_BW);
        let tail = if self.walk.end == self.units {
            self.tail
        } else {
            0
        };
        for g in first..first + tail {
            for r in 0..R {
                // SAFETY: see above.
                blk[r] = unsafe { rows[r].add(g * B::STORE_BB) };
            }
            // SAFETY: see above.
            unsafe { B::tail::<Q, R, T>(&blk, g, &xr, &mut acc) };
        }
        for r in 0..R {
            for k in 0..T {
                let c = acc[r][k];
                // SAFETY: see above.
                let (d, n) = unsafe { (Q::fsum(Q::fadd(c.dot, c.dot2)), Q::fsum(c.neg)) };
                out[r * a.s + t0 + k] = d - n;
            }
        }
    }
    fn rows(&self) -> usize {
        self.t.rows()
    }
    fn cols(&self) -> usize {
        // A panel's width decides whether rows go one at a time.
        if self.walk.len() == self.units {
            self.t.cols()
        } else {
            B::BW * self.walk.len()
        }
    }
    fn batch(&self) -> usize {
        self.a.s
    }
}

/// Folds eight 32-block dots into the two `vphaddd` vectors: `[a0, a1, a2, a3, a0, a1, a2,
/// a3]` (a_s: lanes 0..4 of dot s in the first four, lanes 4..8 in the last four) and the
/// same for dots 4..8.
///
/// # Safety
/// As [`QBlock::unit`].
#[inline(always)]
unsafe fn fold8<Q: QVec>(a: &[Q::I; 8]) -> (Q::I, Q::I) {
    // SAFETY: the caller's contract.
    unsafe {
        let (h01, h23) = (Q::hadd(a[0], a[1]), Q::hadd(a[2], a[3]));
        let (h45, h67) = (Q::hadd(a[4], a[5]), Q::hadd(a[6], a[7]));
        (Q::hadd(h01, h23), Q::hadd(h45, h67))
    }
}

/// A unit's activations: for each activation row, its eight 32-block vectors and the two
/// step vectors in `vphaddd` lane order.
type UnitActs<Q, const T: usize> = (
    [[<Q as QVec>::B; 8]; T],
    [<Q as QVec>::F; T],
    [<Q as QVec>::F; T],
);

/// The eight 32-block activation vectors of unit j and its two step vectors.
///
/// # Safety
/// As [`QBlock::unit`].
#[inline(always)]
unsafe fn unit_acts<Q: QVec, const T: usize>(j: usize, xr: &[XRow; T]) -> UnitActs<Q, T> {
    // SAFETY: the caller's contract.
    unsafe {
        let mut x = [[Q::bzero(); 8]; T];
        let (mut da, mut db) = ([Q::fzero(); T], [Q::fzero(); T]);
        for k in 0..T {
            for s in 0..8 {
                x[k][s] = Q::load(xr[k].q.add(256 * j + 32 * s));
            }
            da[k] = Q::fload(xr[k].d2.add(16 * j));
            db[k] = Q::fload(xr[k].d2.add(16 * j + 8));
        }
        (x, da, db)
    }
}

/// q8_0: fp16 d, 32 int8; a unit is 8 blocks.
pub(crate) struct Q80;
impl QBlock for Q80 {
    const BW: usize = 256;
    const BB: usize = 8 * 34;
    const STORE_BW: usize = 32;
    const STORE_BB: usize = 34;
    #[inline(always)]
    unsafe fn unit<Q: QVec, const R: usize, const T: usize>(
        b: &[*const u8; R],
        j: usize,
        xr: &[XRow; T],
        acc: &mut [[Acc<Q::F>; T]; R],
    ) {
        // SAFETY: the trait's contract; the unit's 8 × 34 bytes of each row and
        // the 256 activations of unit j are readable.
        unsafe {
            let (x, da, db) = unit_acts::<Q, T>(j, xr);
            for r in 0..R {
                let mut h = [0u16; 8];
                let mut w = [Q::bzero(); 8];
                for s in 0..8 {
                    h[s] = u16::from_le(b[r].add(34 * s).cast::<u16>().read_unaligned());
                    w[s] = Q::load(b[r].add(34 * s + 2));
                }
                let dw = Q::f16x8(&h);
                let (wa, wb) = (Q::fdup_half(dw, false), Q::fdup_half(dw, true));
                for k in 0..T {
                    let mut a = [Q::izero(); 8];
                    for s in 0..8 {
                        a[s] = Q::dot_signed(Q::izero(), w[s], x[k][s]);
                    }
                    let (qa, qb) = fold8::<Q>(&a);
                    let c = &mut acc[r][k];
                    c.dot = Q::fma(Q::cvt(qa), Q::fmul(wa, da[k]), c.dot);
                    c.dot2 = Q::fma(Q::cvt(qb), Q::fmul(wb, db[k]), c.dot2);
                }
            }
        }
    }
    #[inline(always)]
    unsafe fn tail<Q: QVec, const R: usize, const T: usize>(
        b: &[*const u8; R],
        g: usize,
        xr: &[XRow; T],
        acc: &mut [[Acc<Q::F>; T]; R],
    ) {
        // SAFETY: the trait's contract; each block's 34 bytes and the 32
        // activations of block g are readable.
        unsafe {
            let mut x = [Q::bzero(); T];
            let mut dx = [0f32; T];
            for k in 0..T {
                x[k] = Q::load(xr[k].q.add(32 * g));
                dx[k] = *xr[k].d.add(g);
            }
            for r in 0..R {
                let dw = Q::f16(b[r]);
                let w = Q::load(b[r].add(2));
                for k in 0..T {
                    let i = Q::dot_signed(Q::izero(), w, x[k]);
                    acc[r][k].dot = Q::fma(Q::cvt(i), Q::fsplat(dw * dx[k]), acc[r][k].dot);
                }
            }
        }
    }
}

/// q4_0: fp16 d, 16 nibble bytes (weights j, j + 16), `w = (u - 8) * d`; a unit is one
/// block.
pub(crate) struct Q40;
impl QBlock for Q40 {
    const BW: usize = 32;
    const BB: usize = 18;
    const STORE_BW: usize = 32;
    const STORE_BB: usize = 18;
    #[inline(always)]
    unsafe fn unit<Q: QVec, const R: usize, const T: usize>(
        b: &[*const u8; R],
        j: usize,
        xr: &[XRow; T],
        acc: &mut [[Acc<Q::F>; T]; R],
    ) {
        // SAFETY: the trait's contract; each block's 18 bytes and the 32
        // activations of block j are readable.
        unsafe {
            let mut x = [Q::bzero(); T];
            let mut off = [Q::izero(); T];
            let mut dx = [0f32; T];
            for k in 0..T {
                x[k] = Q::load(xr[k].q.add(32 * j));
                off[k] = Q::iload(xr[k].off8.add(8 * j));
                dx[k] = *xr[k].d.add(j);
            }
            for r in 0..R {
                let dw = Q::f16(b[r]);
                let u = Q::nibbles16(b[r].add(2));
                for k in 0..T {
                    let i = Q::dot(off[k], u, x[k]);
                    acc[r][k].dot = Q::fma(Q::cvt(i), Q::fsplat(dw * dx[k]), acc[r][k].dot);
                }
            }
        }
    }
    #[inline(always)]
    unsafe fn tail<Q: QVec, const R: usize, const T: usize>(
        _: &[*const u8; R],
        _: usize,
        _: &[XRow; T],
        _: &mut [[Acc<Q::F>; T]; R],
    ) {
        // A unit is one storage block: there is never a tail.
    }
}

/// A q4_k / q5_k header as the two `vphaddd`-ordered scale vectors `[d·sc0..3, d·sc0..3]`,
/// `[d·sc4..7, d·sc4..7]` and the min vector `[dmin·m0..7]` (GGML's `get_scale_min_k4`,
/// on the 12 bytes as three u32 words, as ggml's own kernels do).
///
/// # Safety
/// As [`QBlock::unit`].
#[inline(always)]
unsafe fn k4_scales<Q: QVec>(b: *const u8) -> (Q::F, Q::F, Q::F) {
    // SAFETY: the caller's contract; the 16 header bytes are readable.
    unsafe {
        let (d, dmin) = (Q::fsplat(Q::f16(b)), Q::fsplat(Q::f16(b.add(2))));
        let w = b.add(4).cast::<[u32; 3]>().read_unaligned();
        let (a0, a1, a2) = (u32::from_le(w[0]), u32::from_le(w[1]), u32::from_le(w[2]));
        let (low6, low4, top2) = (0x3F3F_3F3Fu32, 0x0F0F_0F0Fu32, 0x0303_0303u32);
        // Scales 0..4: low 6 bits of bytes 0..4; 4..8: low nibbles of bytes 8..12 with the
        // top 2 bits of bytes 0..4 above them. Mins: bytes 4..8, high nibbles of 8..12.
        let sc_lo = u64::from(a0 & low6);
        let sc_hi = u64::from((a2 & low4) | (((a0 >> 6) & top2) << 4));
        let mn_hi = (a2 >> 4) & low4 | (((a1 >> 6) & top2) << 4);
        let mn = u64::from(a1 & low6) | (u64::from(mn_hi) << 32);
        (
            Q::fmul(Q::bytes8(sc_lo | (sc_lo << 32)), d),
            Q::fmul(Q::bytes8(sc_hi | (sc_hi << 32)), d),
            Q::fmul(Q::bytes8(mn), dmin),
        )
    }
}

/// The shared body of q4_k and q5_k: `codes(r)` gives row r's eight sub-block code vectors
/// (weight order).
///
/// # Safety
/// As [`QBlock::unit`].
#[inline(always)]
unsafe fn k4_unit<Q: QVec, const R: usize, const T: usize>(
    b: &[*const u8; R],
    j: usize,
    xr: &[XRow; T],
    acc: &mut [[Acc<Q::F>; T]; R],
    codes: impl Fn(usize) -> [Q::B; 8],
) {
    // SAFETY: the caller's contract; the activations of unit j (256 values,
    // their steps and sums) are readable.
    unsafe {
        let (x, da, db) = unit_acts::<Q, T>(j, xr);
        let mut xs = [Q::fzero(); T];
        for k in 0..T {
            xs[k] = Q::fload(xr[k].xs.add(8 * j));
        }
        for r in 0..R {
            let (sa, sb, m) = k4_scales::<Q>(b[r]);
            let u = codes(r);
            for k in 0..T {
                let mut a = [Q::izero(); 8];
                for s in 0..8 {
                    a[s] = Q::dot(Q::izero(), u[s], x[k][s]);
                }
                let (qa, qb) = fold8::<Q>(&a);
                let c = &mut acc[r][k];
                c.dot = Q::fma(Q::cvt(qa), Q::fmul(sa, da[k]), c.dot);
                c.dot2 = Q::fma(Q::cvt(qb), Q::fmul(sb, db[k]), c.dot2);
                c.neg = Q::fma(m, xs[k], c.neg);
            }
        }
    }
}

/// q4_k (and mq4-k): fp16 d, fp16 dmin, 12 scale bytes, qs[128]; sub-block 2c is the low
/// nibbles of qs[32c..32c+32], 2c + 1 the high ones.
pub(crate) struct Q4k;
impl QBlock for Q4k {
    const BW: usize = 256;
    const BB: usize = 144;
    const STORE_BW: usize = 256;
    const STORE_BB: usize = 144;
    #[inline(always)]
    unsafe fn unit<Q: QVec, const R: usize, const T: usize>(
        b: &[*const u8; R],
        j: usize,
        xr: &[XRow; T],
        acc: &mut [[Acc<Q::F>; T]; R],
    ) {
        let codes = |r: usize| {
            // SAFETY: the trait's contract; qs[32c..32c + 32] lies in each block.
            unsafe {
                let mut u = [Q::bzero(); 8];
                for c in 0..4 {
                    let v = Q::load(b[r].add(16 + 32 * c));
                    u[2 * c] = Q::lo4(v);
                    u[2 * c + 1] = Q::hi4(v);
                }
                u
            }
        };
        // SAFETY: the trait's contract, forwarded.
        unsafe { k4_unit::<Q, R, T>(b, j, xr, acc, codes) }
    }
    #[inline(always)]
    unsafe fn tail<Q: QVec, const R: usize, const T: usize>(
        _: &[*const u8; R],
        _: usize,
        _: &[XRow; T],
        _: &mut [[Acc<Q::F>; T]; R],
    ) {
        // A unit is one storage block: there is never a tail.
    }
}

/// Bit `n` of each byte of `v` moved to bit 4, the other bits cleared. The 16-bit shift
/// carries bits across bytes, but only onto bits 0..4 (left shifts by at most 4) or 5..8
/// (right shifts by at most 3), which the mask drops.
///
/// # Safety
/// As [`QBlock::unit`].
#[inline(always)]
unsafe fn bit_to_4<Q: QVec>(v: Q::B, n: u32) -> Q::B {
    // SAFETY: the caller's contract.
    unsafe {
        let moved = if n <= 4 {
            Q::shl16(v, 4 - n)
        } else {
            Q::shr16(v, n - 4)
        };
        Q::and8(moved, 0x10)
    }
}

/// q5_k: q4_k's header, qh[32], qs[128]; the fifth bit of sub-block s's weight l is bit s
/// of qh[l].
pub(crate) struct Q5k;
impl QBlock for Q5k {
    const BW: usize = 256;
    const BB: usize = 176;
    const STORE_BW: usize = 256;
    const STORE_BB: usize = 176;
    #[inline(always)]
    unsafe fn unit<Q: QVec, const R: usize, const T: usize>(
        b: &[*const u8; R],
        j: usize,
        xr: &[XRow; T],
        acc: &mut [[Acc<Q::F>; T]; R],
    ) {
        let codes = |r: usize| {
            // SAFETY: the trait's contract; qh[0..32] and qs[32c..32c + 32] lie in each
            // block.
            unsafe {
                let qh = Q::load(b[r].add(16));
                let mut u = [Q::bzero(); 8];
                for c in 0..4 {
                    let v = Q::load(b[r].add(48 + 32 * c));
                    let n = 2 * c as u32;
                    u[2 * c] = Q::or8(Q::lo4(v), bit_to_4::<Q>(qh, n));
                    u[2 * c + 1] = Q::or8(Q::hi4(v), bit_to_4::<Q>(qh, n + 1));
                }
                u
            }
        };
        // SAFETY: the trait's contract, forwarded.
        unsafe { k4_unit::<Q, R, T>(b, j, xr, acc, codes) }
    }
    #[inline(always)]
    unsafe fn tail<Q: QVec, const R: usize, const T: usize>(
        _: &[*const u8; R],
        _: usize,
        _: &[XRow; T],
        _: &mut [[Acc<Q::F>; T]; R],
    ) {
        // A unit is one storage block: there is never a tail.
    }
}

/// q6_k: ql[128], qh[64], scales[16] (int8), fp16 d. Weight 128h + 32s + l: low 4 bits
/// from ql[64h + 32(s%2) + l] (nibble s/2), top 2 from bits 2s of qh[32h + l]; scale
/// 8h + 2s + l/16.
pub(crate) struct Q6k;
impl QBlock for Q6k {
    const BW: usize = 256;
    const BB: usize = 210;
    const STORE_BW: usize = 256;
    const STORE_BB: usize = 210;
    #[inline(always)]
    unsafe fn unit<Q: QVec, const R: usize, const T: usize>(
        b: &[*const u8; R],
        j: usize,
        xr: &[XRow; T],
        acc: &mut [[Acc<Q::F>; T]; R],
    ) {
        // SAFETY: the trait's contract; every offset read lies in the 210-byte
        // blocks, and the activations of unit j (256 values, their steps and 16-run sums)
        // are readable.
        unsafe {
            let (x, da, db) = unit_acts::<Q, T>(j, xr);
            for r in 0..R {
                // Run scales in the `vphaddd` lane order 0, 2, 4, 6, 1, 3, 5, 7 of each half.
                let d = Q::fsplat(Q::f16(b[r].add(208)));
                let sa = Q::fmul(Q::i8x8_even_odd(b[r].add(192)), d);
                let sb = Q::fmul(Q::i8x8_even_odd(b[r].add(200)), d);
                // Codes of 32-block p = 4h + s: low nibbles of ql[64h + 32(s%2)..] for
                // s < 2, high for s >= 2; bits 2s of qh[32h..] as bits 4..6.
                let mut u = [Q::bzero(); 8];
                for h in 0..2 {
                    let qh = Q::load(b[r].add(128 + 32 * h));
                    // Bits 2s..2s+2 to bits 4..6; the 0x30 mask below drops whatever the
                    // 16-bit shifts carried across bytes (it lands on bits 0..4 or 6..8).
                    let top = [Q::shl16(qh, 4), Q::shl16(qh, 2), qh, Q::shr16(qh, 2)];
                    for half in 0..2 {
                        let ql = Q::load(b[r].add(64 * h + 32 * half));
                        u[4 * h + half] = Q::or8(Q::lo4(ql), Q::and8(top[half], 0x30));
                        u[4 * h + 2 + half] = Q::or8(Q::hi4(ql), Q::and8(top[2 + half], 0x30));
                    }
                }
                for k in 0..T {
                    let mut a = [Q::izero(); 8];
                    for p in 0..8 {
                        let off = Q::iload(xr[k].off32.add(8 * (8 * j + p)));
                        a[p] = Q::dot(off, u[p], x[k][p]);
                    }
                    let (qa, qb) = fold8::<Q>(&a);
                    let c = &mut acc[r][k];
                    c.dot = Q::fma(Q::cvt(qa), Q::fmul(sa, da[k]), c.dot);
                    c.dot2 = Q::fma(Q::cvt(qb), Q::fmul(sb, db[k]), c.dot2);
                }
            }
        }
    }
    #[inline(always)]
    unsafe fn tail<Q: QVec, const R: usize, const T: usize>(
        _: &[*const u8; R],
        _: usize,
        _: &[XRow; T],
        _: &mut [[Acc<Q::F>; T]; R],
    ) {
        // A unit is one storage block: there is never a tail.
    }
}
