//! int8-activation kernels of tessera's own formats: int8-row, int4-row / int4-g{gs}, and
//! the 136-byte affine 4-bit family (mq4-g256-v2, hfq4-g256, mq4-g256, mq4c-g256).
//!
//! - int8-row ([`QLayout::Natural`]): each 32 signed weights against one activation
//!   32-block, `|q|` against `x·sign(q)`; the block sum scaled by the block's step, the
//!   row scale applied to the finished row (it is one number per row). A partial last
//!   block is copied into a zeroed buffer; the padded activations are zero.
//! - int4 and the affine family ([`QLayout::Pairs`]): 32 packed bytes hold 64 weights,
//!   weight 2b the low nibble of byte b. The low nibbles are dotted with the chunk's
//!   even-indexed activations and the high nibbles with the odd ones, into the same 8
//!   lanes, lane l holding weights 8l..8l+8 — whose activation 32-block is 2c + l/4, so
//!   one vector of per-lane steps scales the chunk. int4's `q - 8` offset starts the
//!   integer sum at `-8·Σ q8` per lane (precomputed with the activations); group scales
//!   multiply the lanes per chunk (one broadcast when gs is a multiple of 64, else a
//!   per-lane vector). The affine blocks add `zero · Σ x̂` per (scale, zero) span from the
//!   activations' chunk sums.

// Register-blocked micro-kernels index several parallel [R][T] arrays with the same row and
// activation indices; iterator chains would hide that shape.
#![allow(clippy::needless_range_loop)]

use super::super::SimdLevel;
use super::super::tail_chunk;
use super::super::vector::QVec;
use super::{Int8Kernel, QActs, QBody, QDriver, QLayout};
use crate::codecs::util::read_f32;
use crate::tensor::QTensor;

/// int8-row.
pub(crate) struct Int8RowQ;
pub(crate) static INT8_ROW: Int8RowQ = Int8RowQ;

impl Int8Kernel for Int8RowQ {
    fn layout(&self) -> QLayout {
        QLayout::Natural
    }
    fn dot_rows(
        &self,
        level: SimdLevel,
        t: &QTensor<'_>,
        a: &QActs,
        row0: usize,
        n: usize,
        out: &mut [f32],
    ) {
        let body = Int8Body {
            t,
            a,
            full: t.cols() / 32,
            blocks: t.cols().div_ceil(32),
        };
        QDriver(body).run(level, row0, n, out);
    }
}

struct Int8Body<'a, 'b> {
    t: &'a QTensor<'b>,
    a: &'a QActs,
    /// Whole 32-byte blocks a row.
    full: usize,
    /// Blocks a row, a partial one included.
    blocks: usize,
}

impl Int8Body<'_, '_> {
    /// Block `j` of rows at `w[r]` (32 readable bytes each) into `acc`.
    ///
    /// # Safety
    /// As [`QBody::run`]; 32 bytes at each `w[r]`; activation block `j` exists.
    #[inline(always)]
    unsafe fn block<Q: QVec, const R: usize, const T: usize>(
        &self,
        w: &[*const u8; R],
        j: usize,
        xq: &[*const u8; T],
        xd: &[*const f32; T],
        acc: &mut [[Q::F; T]; R],
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let mut x = [Q::bzero(); T];
            let mut d = [Q::fzero(); T];
            for k in 0..T {
                x[k] = Q::load(xq[k].add(32 * j));
                d[k] = Q::fbroadcast(xd[k].add(j));
            }
            for r in 0..R {
                let v = Q::load(w[r]);
                for k in 0..T {
                    let i = Q::dot_signed(Q::izero(), v, x[k]);
                    acc[r][k] = Q::fma(Q::cvt(i), d[k], acc[r][k]);
                }
            }
        }
    }
}

impl QBody for Int8Body<'_, '_> {
    #[inline(always)]
    unsafe fn run<Q: QVec, const R: usize, const T: usize>(
        &self,
        o: usize,
        t0: usize,
        out: &mut [f32],
    ) {
        let a = self.a;
        let (mut xq, mut xd) = ([std::ptr::null::<u8>(); T], [std::ptr::null::<f32>(); T]);
        for k in 0..T {
            (xq[k], xd[k]) = (a.q(t0 + k), a.d(t0 + k));
        }
        let mut rows = [std::ptr::null::<u8>(); R];
        for r in 0..R {
            rows[r] = self.t.row(o + r).as_ptr();
        }
        // SAFETY: the caller's level contract; block j < full lies in
        // each row, the partial one is read from local copies, and the activations are
        // padded past `blocks * 32` values.
        let mut acc = [[unsafe { Q::fzero() }; T]; R];
        let mut w = [std::ptr::null::<u8>(); R];
        for j in 0..self.full {
            for r in 0..R {
                // SAFETY: see above.
                w[r] = unsafe { rows[r].add(32 * j) };
            }
            // SAFETY: see above.
            unsafe { self.block::<Q, R, T>(&w, j, &xq, &xd, &mut acc) };
        }
        if self.full < self.blocks {
            let mut bufs = [[0u8; 32]; R];
            for r in 0..R {
                bufs[r] = tail_chunk(&self.t.row(o + r)[32 * self.full..]);
                w[r] = bufs[r].as_ptr();
            }
            // SAFETY: see above; local 32-byte buffers.
            unsafe { self.block::<Q, R, T>(&w, self.full, &xq, &xd, &mut acc) };
        }
        for r in 0..R {
            let scale = read_f32(self.t.scales(), 4 * (o + r));
            for k in 0..T {
                // SAFETY: see above.
                out[r * a.s + t0 + k] = unsafe { Q::fsum(acc[r][k]) } * scale;
            }
        }
    }
    fn rows(&self) -> usize {
        self.t.rows()
    }
    fn cols(&self) -> usize {
        self.t.cols()
    }
    fn batch(&self) -> usize {
        self.a.s
    }
}

/// int4-row and int4-g{gs}.
pub(crate) struct Int4Q;
pub(crate) static INT4: Int4Q = Int4Q;

impl Int8Kernel for Int4Q {
    fn layout(&self) -> QLayout {
        QLayout::Pairs
    }
    fn dot_rows(
        &self,
        level: SimdLevel,
        t: &QTensor<'_>,
        a: &QActs,
        row0: usize,
        n: usize,
        out: &mut [f32],
    ) {
        let cols = t.cols();
        let gs = t.format().spec().group_size().map_or(0, |g| g as usize);
        let period = if gs == 0 { 1 } else { gs / gcd(gs, 64) };
        let mut lane_groups = [[0u32; 8]; MAX_PERIOD];
        for (p, lanes) in lane_groups
            .iter_mut()
            .enumerate()
            .take(period.min(MAX_PERIOD))
        {
            let first = (64 * p).checked_rem(gs).unwrap_or(0);
            for (l, g) in lanes.iter_mut().enumerate() {
                *g = (first + 8 * l).checked_div(gs).unwrap_or(0) as u32;
            }
        }
        let body = Int4Body {
            t,
            a,
            gs,
            ng: if gs == 0 { 1 } else { cols.div_ceil(gs) },
            full: t.row_bytes() / 32,
            chunks: cols.div_ceil(64),
            lane_groups,
            period,
        };
        QDriver(body).run(level, row0, n, out);
    }
}

struct Int4Body<'a, 'b> {
    t: &'a QTensor<'b>,
    a: &'a QActs,
    /// Weights a group scale covers; 0 for int4-row.
    gs: usize,
    /// Scales a row.
    ng: usize,
    /// Whole 32-byte chunks a row.
    full: usize,
    /// Chunks a row, a partial one included.
    chunks: usize,
    /// [`Groups::Lane`]: for chunk phase `c mod period`, each lane's group counted from the
    /// chunk's first group (the pattern repeats every `gs / gcd(gs, 64)` chunks).
    lane_groups: [[u32; 8]; MAX_PERIOD],
    period: usize,
}

/// The longest period of lane-to-group patterns over the group sizes (48 and 96 give 3).
const MAX_PERIOD: usize = 3;

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// How int4 group scales meet a 64-weight chunk.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Groups {
    /// int4-row: one scale a row, applied at the end.
    Row,
    /// gs a multiple of 64: one scale a chunk.
    Chunk,
    /// Otherwise: each lane's (8 weights') own scale.
    Lane,
}

impl Int4Body<'_, '_> {
    #[inline(always)]
    fn scale(&self, o: usize, g: usize) -> f32 {
        read_f32(self.t.scales(), 4 * (o * self.ng + g.min(self.ng - 1)))
    }

    /// Chunk `c` of rows `o..o+R`, whose 32 bytes are at `w[r]`, into `acc`.
    ///
    /// # Safety
    /// As [`QBody::run`]; 32 bytes at each `w[r]`; activation chunk `c` exists.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn chunk<Q: QVec, const R: usize, const T: usize>(
        &self,
        groups: Groups,
        o: usize,
        w: &[*const u8; R],
        c: usize,
        sp: &[*const u8; R],
        x: &[(*const u8, *const f32, *const i32); T],
        acc: &mut [[Q::F; T]; R],
    ) {
        // SAFETY: the caller's contract; the stack array is 8 floats.
        unsafe {
            let (mut xe, mut xo) = ([Q::bzero(); T], [Q::bzero(); T]);
            let mut dl = [Q::fzero(); T];
            let mut off = [Q::izero(); T];
            for k in 0..T {
                xe[k] = Q::load(x[k].0.add(64 * c));
                xo[k] = Q::load(x[k].0.add(64 * c + 32));
                dl[k] = Q::fload(x[k].1.add(8 * c));
                off[k] = Q::iload(x[k].2.add(8 * c));
            }
            for r in 0..R {
                let v = Q::load(w[r]);
                let (lo, hi) = (Q::lo4(v), Q::hi4(v));
                let g = match groups {
                    Groups::Row => Q::fzero(),
                    // `sp[r]` points at the chunk's group scale of row o + r.
                    Groups::Chunk => {
                        Q::fsplat(f32::from_le_bytes(sp[r].cast::<[u8; 4]>().read_unaligned()))
                    }
                    Groups::Lane => {
                        // The (up to 8) scales from the chunk's first group, spread to the
                        // lanes by the phase's pattern. Near the end of the scale buffer
                        // they come from a zero-padded copy; lanes past the row's last
                        // group then read a neighbour's scale or zero, and meet zero
                        // activations either way.
                        let first = (o + r) * self.ng + 64 * c / self.gs;
                        let all = self.t.scales();
                        let v = if 4 * (first + 8) <= all.len() {
                            Q::fload(all.as_ptr().add(4 * first).cast())
                        } else {
                            let mut tail = [0f32; 8];
                            for (l, v) in tail.iter_mut().enumerate() {
                                if 4 * (first + l + 1) <= all.len() {
                                    *v = read_f32(all, 4 * (first + l));
                                }
                            }
                            Q::fload(tail.as_ptr())
                        };
                        Q::fperm(v, &self.lane_groups[c % self.period])
                    }
                };
                for k in 0..T {
                    let i = Q::dot(Q::dot(off[k], lo, xe[k]), hi, xo[k]);
                    acc[r][k] = match groups {
                        Groups::Row => Q::fma(Q::cvt(i), dl[k], acc[r][k]),
                        Groups::Chunk | Groups::Lane => {
                            Q::fma(Q::fmul(Q::cvt(i), dl[k]), g, acc[r][k])
                        }
                    };
                }
            }
        }
    }

    /// The whole tile for one grouping (a separate instantiation per grouping keeps the
    /// hot loop free of the choice).
    ///
    /// # Safety
    /// As [`QBody::run`].
    #[inline(always)]
    unsafe fn tile<Q: QVec, const R: usize, const T: usize>(
        &self,
        groups: Groups,
        o: usize,
        t0: usize,
        out: &mut [f32],
    ) {
        let a = self.a;
        let mut x = [(
            std::ptr::null::<u8>(),
            std::ptr::null::<f32>(),
            std::ptr::null::<i32>(),
        ); T];
        for k in 0..T {
            x[k] = (a.q(t0 + k), a.dl(t0 + k), a.off8(t0 + k));
        }
        let mut rows = [std::ptr::null::<u8>(); R];
        for r in 0..R {
            rows[r] = self.t.row(o + r).as_ptr();
        }
        // SAFETY: the caller's level contract; chunk c < full lies in
        // each row, the partial one is read from local copies, and the activations are
        // padded past `chunks * 64` values.
        let mut acc = [[unsafe { Q::fzero() }; T]; R];
        let mut w = [std::ptr::null::<u8>(); R];
        // Group scales of the current chunk ([`Groups::Chunk`]: gs is a multiple of 64, so
        // a chunk has one), advanced every gs / 64 chunks.
        let scales = self.t.scales().as_ptr();
        let mut sp = [scales; R];
        let per_group = (self.gs / 64).max(1);
        // The chunk's group, advanced by counting (a division per chunk showed in profiles).
        let (mut g, mut left) = (0usize, per_group);
        let group_scales = |g: usize, sp: &mut [*const u8; R]| {
            if groups == Groups::Chunk {
                let g = g.min(self.ng - 1);
                for r in 0..R {
                    // SAFETY: row o + r owns ng scales from (o + r) * ng; g < ng.
                    sp[r] = unsafe { scales.add(4 * ((o + r) * self.ng + g)) };
                }
            }
        };
        for c in 0..self.full {
            group_scales(g, &mut sp);
            left -= 1;
            if left == 0 {
                (g, left) = (g + 1, per_group);
            }
            for r in 0..R {
                // SAFETY: see above.
                w[r] = unsafe { rows[r].add(32 * c) };
            }
            // SAFETY: see above.
            unsafe { self.chunk::<Q, R, T>(groups, o, &w, c, &sp, &x, &mut acc) };
        }
        if self.full < self.chunks {
            group_scales(g, &mut sp);
            let mut bufs = [[0u8; 32]; R];
            for r in 0..R {
                bufs[r] = tail_chunk(&self.t.row(o + r)[32 * self.full..]);
                w[r] = bufs[r].as_ptr();
            }
            // SAFETY: see above; local 32-byte buffers.
            unsafe { self.chunk::<Q, R, T>(groups, o, &w, self.full, &sp, &x, &mut acc) };
        }
        for r in 0..R {
            let d = match groups {
                Groups::Row => self.scale(o + r, 0),
                Groups::Chunk | Groups::Lane => 1.0,
            };
            for k in 0..T {
                // SAFETY: see above.
                out[r * a.s + t0 + k] = unsafe { Q::fsum(acc[r][k]) } * d;
            }
        }
    }
}

impl QBody for Int4Body<'_, '_> {
    #[inline(always)]
    unsafe fn run<Q: QVec, const R: usize, const T: usize>(
        &self,
        o: usize,
        t0: usize,
        out: &mut [f32],
    ) {
        // SAFETY: the caller's contract, forwarded to each arm.
        unsafe {
            if self.gs == 0 {
                self.tile::<Q, R, T>(Groups::Row, o, t0, out)
            } else if self.gs.is_multiple_of(64) {
                self.tile::<Q, R, T>(Groups::Chunk, o, t0, out)
            } else {
                self.tile::<Q, R, T>(Groups::Lane, o, t0, out)
            }
        }
    }
    fn rows(&self) -> usize {
        self.t.rows()
    }
    fn cols(&self) -> usize {
        self.t.cols()
    }
    fn batch(&self) -> usize {
        self.a.s
    }
}

/// How a 136-byte block header stores its (scale, zero) pairs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Header {
    /// Two fp16 pairs, one per 128 weights (mq4-g256-v2).
    F16Halves,
    /// One f32 pair (hfq4-g256, mq4-g256).
    F32,
    /// One fp16 pair and 4 pad bytes (mq4c-g256).
    F16,
}

/// The kernel of one header kind.
pub(crate) struct AffineQ(Header);
pub(crate) static MQ4_V2: AffineQ = AffineQ(Header::F16Halves);
pub(crate) static HFQ4: AffineQ = AffineQ(Header::F32);
pub(crate) static MQ4C: AffineQ = AffineQ(Header::F16);

impl Int8Kernel for AffineQ {
    fn layout(&self) -> QLayout {
        QLayout::Pairs
    }
    fn dot_rows(
        &self,
        level: SimdLevel,
        t: &QTensor<'_>,
        a: &QActs,
        row0: usize,
        n: usize,
        out: &mut [f32],
    ) {
        let body = AffineBody {
            t,
            a,
            header: self.0,
            blocks: t.cols() / 256,
        };
        QDriver(body).run(level, row0, n, out);
    }
}

struct AffineBody<'a, 'b> {
    t: &'a QTensor<'b>,
    a: &'a QActs,
    header: Header,
    /// 256-weight blocks a row (I % 256 == 0 is checked by `QTensor::new`).
    blocks: usize,
}

/// Bytes of one block, header included.
const BLOCK_BYTES: usize = 136;
/// Bytes before the nibbles.
const HEADER_BYTES: usize = 8;

impl QBody for AffineBody<'_, '_> {
    #[inline(always)]
    unsafe fn run<Q: QVec, const R: usize, const T: usize>(
        &self,
        o: usize,
        t0: usize,
        out: &mut [f32],
    ) {
        let a = self.a;
        let mut x = [(
            std::ptr::null::<u8>(),
            std::ptr::null::<f32>(),
            std::ptr::null::<f32>(),
        ); T];
        for k in 0..T {
            x[k] = (a.q(t0 + k), a.dl(t0 + k), a.xs64(t0 + k));
        }
        let mut rows = [std::ptr::null::<u8>(); R];
        for r in 0..R {
            rows[r] = self.t.row(o + r).as_ptr();
        }
        // SAFETY: the caller's level contract; block j < blocks lies in
        // each row (136 bytes from 136j) and the activations hold blocks * 256 values.
        let zero = unsafe { Q::fzero() };
        let mut acc = [[zero; T]; R];
        let mut zacc = [[0f32; T]; R];
        let mut blk = [std::ptr::null::<u8>(); R];
        // Per row: (scale, zero) of the block's two 128-weight spans.
        let mut sz = [[0f32; 4]; R];
        let (mut dl, mut xsum) = ([zero; T], [0f32; T]);
        // SAFETY: see above.
        let (mut xe8, mut xo8) = unsafe { ([Q::bzero(); T], [Q::bzero(); T]) };
        for j in 0..self.blocks {
            for r in 0..R {
                // SAFETY: see above; the block's 8 header bytes are readable.
                unsafe {
                    let h = rows[r].add(j * BLOCK_BYTES);
                    blk[r] = h;
                    sz[r] = match self.header {
                        Header::F16Halves => [
                            Q::f16(h),
                            Q::f16(h.add(2)),
                            Q::f16(h.add(4)),
                            Q::f16(h.add(6)),
                        ],
                        Header::F32 => {
                            let b = h.cast::<[u8; 8]>().read_unaligned();
                            let (s, z) = (read_f32(&b, 0), read_f32(&b, 4));
                            [s, z, s, z]
                        }
                        Header::F16 => {
                            let (s, z) = (Q::f16(h), Q::f16(h.add(2)));
                            [s, z, s, z]
                        }
                    };
                }
            }
            for span in 0..2 {
                let mut part = [[zero; T]; R];
                for cc in 2 * span..2 * span + 2 {
                    let c = 4 * j + cc;
                    for k in 0..T {
                        // SAFETY: see above.
                        unsafe {
                            xe8[k] = Q::load(x[k].0.add(64 * c));
                            xo8[k] = Q::load(x[k].0.add(64 * c + 32));
                            dl[k] = Q::fload(x[k].1.add(8 * c));
                            xsum[k] = *x[k].2.add(c);
                        }
                    }
                    for r in 0..R {
                        // SAFETY: see above; header + 32(cc + 1) <= 136 bytes of the block.
                        unsafe {
                            let v = Q::load(blk[r].add(HEADER_BYTES + 32 * cc));
                            let (lo, hi) = (Q::lo4(v), Q::hi4(v));
                            for k in 0..T {
                                let i = Q::dot(Q::dot(Q::izero(), lo, xe8[k]), hi, xo8[k]);
                                part[r][k] = Q::fma(Q::cvt(i), dl[k], part[r][k]);
                                zacc[r][k] += sz[r][2 * span + 1] * xsum[k];
                            }
                        }
                    }
                }
                for r in 0..R {
                    // SAFETY: see above.
                    let s = unsafe { Q::fsplat(sz[r][2 * span]) };
                    for k in 0..T {
                        // SAFETY: see above.
                        acc[r][k] = unsafe { Q::fma(part[r][k], s, acc[r][k]) };
                    }
                }
            }
        }
        for r in 0..R {
            for k in 0..T {
                // SAFETY: see above.
                out[r * a.s + t0 + k] = unsafe { Q::fsum(acc[r][k]) } + zacc[r][k];
            }
        }
    }
    fn rows(&self) -> usize {
        self.t.rows()
    }
    fn cols(&self) -> usize {
        self.t.cols()
    }
    fn batch(&self) -> usize {
        self.a.s
    }
}
