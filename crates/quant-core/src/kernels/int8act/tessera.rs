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
//!   lanes, lane l holding weights 8l..8l+8 (activation 32-block 2c + l/4). int4-row, int4
//!   groups that are a multiple of 64 and the affine blocks go a quad of four chunks at a
//!   time ([`quad_dots`]; one row against one activation row, at S = 1, through
//!   [`QVec::quad_dot`], which at the VNNI level is two 512-bit loads of codes and a
//!   `vpermt2d` fold): two `vphaddd` levels leave one lane per 32-block, to which the
//!   block's int4 offset `-8·Σ q8` is added exactly (in the integer sum) before one
//!   conversion, the block's step ([`QActs::dh`]) and the lane's group or span scale; the
//!   affine zero term is `zero · d · Σ q` per block, one vector FMA. Groups that are not a
//!   multiple of 64 give the lanes of one chunk different scales, so they go a chunk at a
//!   time ([`Int4Body::lane_tile`]): each lane's offset computed in the loop (two dots a
//!   chunk, shared by the tile's rows), the chunk's two steps spread over the lanes
//!   (`fpair`), the scales a per-lane vector. Every lane's integer sum is exact, so a row
//!   of zero weights gives exactly zero.

// Register-blocked micro-kernels index several parallel [R][T] arrays with the same row and
// activation indices; iterator chains would hide that shape.
#![allow(clippy::needless_range_loop)]

use super::super::SimdLevel;
use super::super::prefetch;
use super::super::tail_chunk;
use super::super::vector::QVec;
use super::panels::{self, UNIT, in_panels, in_panels_upto};
use super::{
    INT4_QUADS_ONE_ROW_MAX_COLS, Int8Kernel, ONE_ROW_MAX_COLS, QActs, QBody, QDriver, QLayout,
    pairs_at,
};
use crate::codecs::util::read_f32;
use crate::tensor::QTensor;

/// int8-row.
pub(crate) struct Int8RowQ;
pub(crate) static INT8_ROW: Int8RowQ = Int8RowQ;

impl Int8Kernel for Int8RowQ {
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
        in_panels(panels, t.cols().div_ceil(UNIT), a.s, out, |u0, u1, out| {
            let (all, per) = (t.cols().div_ceil(32), UNIT / 32);
            let walk = per * u0..(per * u1).min(all);
            QDriver(self.body(t, a, walk)).run(level, row0, n, out)
        });
    }
}

impl Int8RowQ {
    fn body<'a, 'b>(
        &self,
        t: &'a QTensor<'b>,
        a: &'a QActs,
        walk: std::ops::Range<usize>,
    ) -> Int8Body<'a, 'b> {
        Int8Body {
            t,
            a,
            full: t.cols() / 32,
            blocks: t.cols().div_ceil(32),
            walk,
        }
    }
}

struct Int8Body<'a, 'b> {
    t: &'a QTensor<'b>,
    a: &'a QActs,
    /// Whole 32-byte blocks a row.
    full: usize,
    /// Blocks a row, a partial one included.
    blocks: usize,
    /// The blocks walked: all of them, or one column panel's.
    walk: std::ops::Range<usize>,
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
        let ahead = panels::ahead(
            self.walk.len(),
            self.blocks,
            self.t.row_bytes(),
            prefetch::per_stream(R),
        );
        for j in self.walk.start..self.walk.end.min(self.full) {
            for r in 0..R {
                prefetch::lines(rows[r], 32 * j, 32, ahead);
                // SAFETY: see above.
                w[r] = unsafe { rows[r].add(32 * j) };
            }
            // SAFETY: see above.
            unsafe { self.block::<Q, R, T>(&w, j, &xq, &xd, &mut acc) };
        }
        if self.full < self.walk.end {
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
        // The panel's width decides whether rows go one at a time.
        (32 * self.walk.len()).min(self.t.cols())
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
        let body = self.body(t, a);
        if body.gs.is_multiple_of(64) {
            // The quads walk whole 256-weight units: long rows go in column panels.
            let units = body.chunks.div_ceil(4);
            let max = body.one_row_max_cols();
            in_panels_upto(panels, units, max, a.s, out, |q0, q1, out| {
                QDriver(self.body(t, a).window(q0, q1)).run(level, row0, n, out)
            });
        } else {
            QDriver(body).run(level, row0, n, out);
        }
    }
}

impl Int4Q {
    fn body<'a, 'b>(&self, t: &'a QTensor<'b>, a: &'a QActs) -> Int4Body<'a, 'b> {
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
        // Quads of 4 chunks (gs a multiple of 64): the pattern repeats every gs / gcd(gs, 256).
        let qperiod = if gs == 0 { 1 } else { gs / gcd(gs, 256) };
        let mut quad_groups = [[0u32; 8]; MAX_PERIOD];
        for (p, lanes) in quad_groups
            .iter_mut()
            .enumerate()
            .take(qperiod.min(MAX_PERIOD))
        {
            let first = (256 * p).checked_div(gs).unwrap_or(0);
            for (l, g) in lanes.iter_mut().enumerate() {
                *g = (64 * (4 * p + l % 4)).checked_div(gs).unwrap_or(0) as u32 - first as u32;
            }
        }
        Int4Body {
            t,
            a,
            gs,
            ng: if gs == 0 { 1 } else { cols.div_ceil(gs) },
            full: t.row_bytes() / 32,
            chunks: cols.div_ceil(64),
            lane_groups,
            period,
            quad_groups,
            qperiod,
            quad_step: 256usize.checked_div(gs).unwrap_or(0),
            quads: 0..cols.div_ceil(256),
        }
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
    /// [`Int4Body::lane_tile`]: for chunk phase `c mod period`, each lane's group counted from the
    /// chunk's first group (the pattern repeats every `gs / gcd(gs, 64)` chunks).
    lane_groups: [[u32; 8]; MAX_PERIOD],
    period: usize,
    /// [`Int4Body::quads`]: for quad phase `j mod qperiod`, lane l's group (that of chunk
    /// l % 4 of the quad) counted from the quad's first group.
    quad_groups: [[u32; 8]; MAX_PERIOD],
    qperiod: usize,
    /// Groups a quad advances by when `qperiod == 1` (gs 64, 128, 256: 4, 2, 1).
    quad_step: usize,
    /// [`Int4Body::quads`]: the quads walked (all of them, or one column panel's).
    quads: std::ops::Range<usize>,
}

/// The longest period of lane-to-group patterns over the group sizes (48 and 96 give 3 per
/// chunk, 192 gives 3 per quad).
const MAX_PERIOD: usize = 3;

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl Int4Body<'_, '_> {
    /// The body over quads `q0..q1` only (a column panel; gs a multiple of 64).
    fn window(self, q0: usize, q1: usize) -> Self {
        Int4Body {
            quads: q0..q1,
            ..self
        }
    }

    #[inline(always)]
    fn scale(&self, o: usize, g: usize) -> f32 {
        read_f32(self.t.scales(), 4 * (o * self.ng + g.min(self.ng - 1)))
    }

    /// Groups that are not a multiple of 64 (each dot lane its own scale): chunk `c` of
    /// rows `o..o+R`, whose 32 bytes are at `w[r]`, into `acc`, one chunk at a time.
    ///
    /// # Safety
    /// As [`QBody::run`]; 32 bytes at each `w[r]`; activation chunk `c` exists.
    #[inline(always)]
    unsafe fn lane_chunk<Q: QVec, const R: usize, const T: usize>(
        &self,
        o: usize,
        w: &[*const u8; R],
        c: usize,
        x: &[(*const u8, *const f32); T],
        acc: &mut [[Q::F; T]; R],
    ) {
        // SAFETY: the caller's contract; the stack array is 8 floats.
        unsafe {
            let (mut xe, mut xo) = ([Q::bzero(); T], [Q::bzero(); T]);
            let mut dl = [Q::fzero(); T];
            let mut off = [Q::izero(); T];
            let eight = Q::bsplat(8);
            let (e, od) = pairs_at(c);
            for k in 0..T {
                xe[k] = Q::load(x[k].0.add(e));
                xo[k] = Q::load(x[k].0.add(od));
                dl[k] = Q::fpair(x[k].1.add(2 * c));
                off[k] = Q::ineg(Q::dot(Q::dot(Q::izero(), eight, xe[k]), eight, xo[k]));
            }
            for r in 0..R {
                let v = Q::load(w[r]);
                let (lo, hi) = (Q::lo4(v), Q::hi4(v));
                // The (up to 8) scales from the chunk's first group, spread to the lanes by
                // the phase's pattern. Near the end of the scale buffer they come from a
                // zero-padded copy; lanes past the row's last group then read a
                // neighbour's scale or zero, and meet zero activations either way.
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
                let g = Q::fperm(v, &self.lane_groups[c % self.period]);
                for k in 0..T {
                    let i = Q::dot_nib2(off[k], lo, xe[k], hi, xo[k]);
                    acc[r][k] = Q::fma(Q::fmul(Q::cvt(i), dl[k]), g, acc[r][k]);
                }
            }
        }
    }

    /// Quad `j` (chunks 4j..4j+4, 128 bytes at each `w[r]`) of rows `o..o+R` into `acc`:
    /// the four chunks' integer dots reduced by two `vphaddd` levels to one lane per
    /// 32-block (the order of [`QActs::dh`]), the int4 offsets added there, exactly, then
    /// one conversion and one FMA per row and activation row. `sv[r]` holds row o + r's
    /// group scale of each lane's chunk (gs a multiple of 64); `by_row` (int4-row) leaves
    /// the scale to the end.
    ///
    /// # Safety
    /// As [`QBody::run`]; 128 bytes at each `w[r]`; activation quad `j` exists.
    #[inline(always)]
    unsafe fn quad<Q: QVec, const R: usize, const T: usize>(
        &self,
        by_row: bool,
        w: &[*const u8; R],
        j: usize,
        sv: &[Q::F; R],
        x: &[(*const u8, *const f32, *const i32); T],
        acc: &mut [[Q::F; T]; R],
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let xq = x.map(|a| a.0);
            let dots = quad_dots::<Q, R, T>(w, j, &xq);
            for k in 0..T {
                let dh = Q::fload(x[k].1.add(8 * j));
                let oh = Q::iload(x[k].2.add(8 * j));
                for r in 0..R {
                    let f = Q::cvt(Q::iadd(dots[r][k], oh));
                    acc[r][k] = if by_row {
                        Q::fma(f, dh, acc[r][k])
                    } else {
                        Q::fma(Q::fmul(f, dh), sv[r], acc[r][k])
                    };
                }
            }
        }
    }

    /// int4-row and gs a multiple of 64, a quad at a time ([`Self::quad`]); the last
    /// quad from zero-padded copies of the rows' remaining bytes (the padded activations
    /// and their offsets are zero there).
    ///
    /// # Safety
    /// As [`QBody::run`].
    #[inline(always)]
    unsafe fn quads<Q: QVec, const R: usize, const T: usize>(
        &self,
        by_row: bool,
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
            x[k] = (a.q(t0 + k), a.dh(t0 + k), a.oh(t0 + k));
        }
        let mut rows = [std::ptr::null::<u8>(); R];
        for r in 0..R {
            rows[r] = self.t.row(o + r).as_ptr();
        }
        // SAFETY: the caller's level contract; quad j < whole lies in each row, the last one
        // is read from local copies, and the activations (with dh, oh) are padded to a
        // multiple of 256 values.
        let mut acc = [[unsafe { Q::fzero() }; T]; R];
        let whole = self.full / 4;
        let scales = self.t.scales().as_ptr();
        // SAFETY: as above.
        let mut sv = [unsafe { Q::fzero() }; R];
        let mut w = [std::ptr::null::<u8>(); R];
        // The quad's first group, its offset in that group and the pattern phase, advanced
        // by counting (a division per quad would cost as much as a chunk's dots).
        let q0 = self.quads.start;
        let (mut g, mut rem, mut phase) = match self.gs {
            0 => (0, 0, 0),
            gs => (256 * q0 / gs, 256 * q0 % gs, q0 % self.qperiod),
        };
        let nscales = self.t.scales().len() / 4;
        // The last quad's zero-padded copies (zeroed once, not every quad).
        let mut bufs = [[0u8; 128]; R];
        // int4-g64: a whole quad's four group scales are the four f32 at group 4j of the
        // row, so each row's scales are one pointer advanced by 16 bytes a quad.
        let g64 = !by_row && self.gs == 64;
        let mut srow = [std::ptr::null::<u8>(); R];
        if g64 {
            for r in 0..R {
                // SAFETY: row o + r's scales start inside the buffer (o + r < rows).
                srow[r] = unsafe { scales.add(4 * (o + r) * self.ng) };
            }
        }
        let all = self.chunks.div_ceil(4);
        let ahead = panels::ahead(
            self.quads.len(),
            all,
            self.t.row_bytes(),
            prefetch::per_stream_int4(R),
        );
        // Whole quads of int4-row and int4-g64 in a loop of their own: no tail copies,
        // no group counting, the prefetch's two lines a row unrolled (one thread in
        // cache, 1024 x 16384: int4-row 303 -> 267 us, int4-g64 349 -> 318, against 254 for
        // the bare C quad body of the same instructions; docs/PERF.md "Session 23"). The loop below takes the rest: the other group sizes and tails.
        let fast_end = if by_row || g64 {
            whole.clamp(q0, self.quads.end)
        } else {
            q0
        };
        // One quad of the loops below: a macro, not a closure. A closure is a function of
        // its own and does not inherit this function's target features, so where it is not
        // inlined its intrinsics become calls (a closure here ran 40x slower, measured).
        macro_rules! step {
            ($j:expr) => {{
                let j = $j;
                for r in 0..R {
                    // SAFETY: quad j < whole lies in each row, and (g64) its groups 4j..4j+4
                    // in the row's scales.
                    unsafe {
                        w[r] = rows[r].add(128 * j);
                        if g64 {
                            sv[r] = Q::fquad(srow[r].add(16 * j).cast());
                        }
                    }
                }
                // SAFETY: see above.
                unsafe { self.quad::<Q, R, T>(by_row, &w, j, &sv, &x, &mut acc) };
            }};
        }
        // Without prefetch (`TESSERA_PREFETCH=0`), a loop that does not carry the
        // distances: with them, int4-g64's one-row loop kept its pointers on the stack.
        if ahead == prefetch::Ahead::OFF {
            for j in q0..fast_end {
                step!(j);
            }
        } else {
            for j in q0..fast_end {
                prefetch::lines_n::<2, R>(&rows, 128 * j, ahead);
                if g64 {
                    for r in 0..R {
                        prefetch::lines(srow[r], 16 * j, 16, ahead.over(8));
                    }
                }
                step!(j);
            }
        }
        if g64 {
            g += self.quad_step * (fast_end - q0);
        }
        for j in fast_end..self.quads.end {
            prefetch::rows(&rows, 128 * j, 128, ahead);
            for r in 0..R {
                w[r] = if j < whole {
                    // SAFETY: see above.
                    unsafe { rows[r].add(128 * j) }
                } else {
                    bufs[r] = tail_chunk(&self.t.row(o + r)[(128 * j).min(self.t.row_bytes())..]);
                    bufs[r].as_ptr()
                };
            }
            if !by_row {
                let pattern = &self.quad_groups[phase];
                for r in 0..R {
                    let first = (o + r) * self.ng + g;
                    // SAFETY: see above; four scales from `first` lie in the buffer, or
                    // come from a copy clamped to the row's last group.
                    // A whole quad's lanes select groups below ng; the four read may run
                    // into the next row's scales, never past the buffer.
                    sv[r] = unsafe {
                        if j < whole && first + 4 <= nscales {
                            let at = scales.add(4 * first).cast::<f32>();
                            match self.gs {
                                64 => Q::fquad(at),
                                gs if gs.is_multiple_of(256) => Q::fbroadcast(at),
                                _ => Q::fperm(Q::fquad(at), pattern),
                            }
                        } else {
                            let near = [0, 1, 2, 3].map(|m| self.scale(o + r, g + m));
                            Q::fperm(Q::fquad(near.as_ptr()), pattern)
                        }
                    };
                }
                if self.qperiod == 1 {
                    g += self.quad_step;
                } else {
                    rem += 256;
                    while rem >= self.gs {
                        rem -= self.gs;
                        g += 1;
                    }
                }
                phase += 1;
                if phase == self.qperiod {
                    phase = 0;
                }
            }
            // SAFETY: see above.
            unsafe { self.quad::<Q, R, T>(by_row, &w, j, &sv, &x, &mut acc) };
        }
        for r in 0..R {
            let d = if by_row { self.scale(o + r, 0) } else { 1.0 };
            for k in 0..T {
                // SAFETY: see above.
                out[r * a.s + t0 + k] = unsafe { Q::fsum(acc[r][k]) } * d;
            }
        }
    }

    /// Groups that are not a multiple of 64, one chunk at a time ([`Self::lane_chunk`]).
    ///
    /// # Safety
    /// As [`QBody::run`].
    #[inline(always)]
    unsafe fn lane_tile<Q: QVec, const R: usize, const T: usize>(
        &self,
        o: usize,
        t0: usize,
        out: &mut [f32],
    ) {
        let a = self.a;
        let mut x = [(std::ptr::null::<u8>(), std::ptr::null::<f32>()); T];
        for k in 0..T {
            x[k] = (a.q(t0 + k), a.d(t0 + k));
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
        let ahead = prefetch::per_stream(R);
        for c in 0..self.full {
            for r in 0..R {
                prefetch::lines(rows[r], 32 * c, 32, ahead);
                // SAFETY: see above.
                w[r] = unsafe { rows[r].add(32 * c) };
            }
            // SAFETY: see above.
            unsafe { self.lane_chunk::<Q, R, T>(o, &w, c, &x, &mut acc) };
        }
        if self.full < self.chunks {
            let mut bufs = [[0u8; 32]; R];
            for r in 0..R {
                bufs[r] = tail_chunk(&self.t.row(o + r)[32 * self.full..]);
                w[r] = bufs[r].as_ptr();
            }
            // SAFETY: see above; local 32-byte buffers.
            unsafe { self.lane_chunk::<Q, R, T>(o, &w, self.full, &x, &mut acc) };
        }
        for r in 0..R {
            for k in 0..T {
                // SAFETY: see above.
                out[r * a.s + t0 + k] = unsafe { Q::fsum(acc[r][k]) };
            }
        }
    }
}

/// The integer dots of quad `j` (chunks 4j..4j+4: 128 weight bytes at each `w[r]`, the
/// activations of those chunks at `xq[k]`), one lane per 32-block: lane m holds chunk m's
/// first block, lane 4 + m its second (the order of [`QActs::dh`]). Shared by the int4 and
/// affine quads. One row against one activation row (S = 1 on the one-row and panel walks)
/// goes to [`QVec::quad_dot`], which a level may do wider; tiles to [`quad_dots_narrow`].
///
/// # Safety
/// As [`QBody::run`]; 128 bytes at each `w[r]`; activation quad `j` exists.
#[inline(always)]
unsafe fn quad_dots<Q: QVec, const R: usize, const T: usize>(
    w: &[*const u8; R],
    j: usize,
    xq: &[*const u8; T],
) -> [[Q::I; T]; R] {
    // SAFETY: the caller's contract; quad j's activations are the 256 values from 256j.
    unsafe {
        if R == 1 && T == 1 {
            return [[Q::quad_dot(w[0], xq[0].add(256 * j)); T]; R];
        }
        quad_dots_narrow::<Q, R, T>(w, j, xq)
    }
}

/// [`quad_dots`] a 256-bit chunk at a time: each chunk's dot reduced with its neighbour's
/// by two `vphaddd` levels.
///
/// # Safety
/// As [`quad_dots`].
#[inline(always)]
pub(crate) unsafe fn quad_dots_narrow<Q: QVec, const R: usize, const T: usize>(
    w: &[*const u8; R],
    j: usize,
    xq: &[*const u8; T],
) -> [[Q::I; T]; R] {
    // SAFETY: the caller's contract.
    unsafe {
        let mut h01 = [[Q::izero(); T]; R];
        let mut h23 = [[Q::izero(); T]; R];
        let mut first = [[Q::izero(); T]; R];
        for m in 0..4 {
            let (e, od) = pairs_at(4 * j + m);
            let (mut xe, mut xo) = ([Q::bzero(); T], [Q::bzero(); T]);
            for k in 0..T {
                xe[k] = Q::load(xq[k].add(e));
                xo[k] = Q::load(xq[k].add(od));
            }
            for r in 0..R {
                let v = Q::load(w[r].add(32 * m));
                let (lo, hi) = (Q::lo4(v), Q::hi4(v));
                for k in 0..T {
                    let i = Q::dot_nib2(Q::izero(), lo, xe[k], hi, xo[k]);
                    match m {
                        1 => h01[r][k] = Q::hadd(first[r][k], i),
                        3 => h23[r][k] = Q::hadd(first[r][k], i),
                        _ => first[r][k] = i,
                    }
                }
            }
        }
        let mut out = [[Q::izero(); T]; R];
        for r in 0..R {
            for k in 0..T {
                out[r][k] = Q::hadd(h01[r][k], h23[r][k]);
            }
        }
        out
    }
}

impl QBody for Int4Body<'_, '_> {
    /// int4-row and int4-g64: eight rows share each activation load on long rows
    /// (measured, read-pair alternated on [6144 x 16384]: int4-row 1.36-1.41 ms against
    /// 1.58-1.62 four at a time, 2026-11-30 13:01 UTC; int4-g64 with its quad scales from
    /// one pointer a row (`quads`) 2.06-2.18 against 2.20-2.35 ms, 17:47 UTC; before that
    /// scale path it did not gain).
    fn eight_rows(&self) -> bool {
        self.gs == 0 || self.gs == 64
    }
    /// The quad bodies (int4-row, gs a multiple of 64) take whole rows of up to 16384
    /// columns one at a time ([`INT4_QUADS_ONE_ROW_MAX_COLS`]).
    fn one_row_max_cols(&self) -> usize {
        if self.gs.is_multiple_of(64) {
            INT4_QUADS_ONE_ROW_MAX_COLS
        } else {
            ONE_ROW_MAX_COLS
        }
    }
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
                self.quads::<Q, R, T>(true, o, t0, out)
            } else if self.gs.is_multiple_of(64) {
                self.quads::<Q, R, T>(false, o, t0, out)
            } else {
                self.lane_tile::<Q, R, T>(o, t0, out)
            }
        }
    }
    fn rows(&self) -> usize {
        self.t.rows()
    }
    fn cols(&self) -> usize {
        // The panel's width decides whether rows go one at a time.
        (256 * self.quads.len()).min(self.t.cols())
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
        in_panels(panels, t.cols() / 256, a.s, out, |b0, b1, out| {
            QDriver(self.body(t, a, b0..b1)).run(level, row0, n, out)
        });
    }
}

impl AffineQ {
    fn body<'a, 'b>(
        &self,
        t: &'a QTensor<'b>,
        a: &'a QActs,
        blocks: std::ops::Range<usize>,
    ) -> AffineBody<'a, 'b> {
        AffineBody {
            t,
            a,
            header: self.0,
            blocks,
        }
    }
}

struct AffineBody<'a, 'b> {
    t: &'a QTensor<'b>,
    a: &'a QActs,
    header: Header,
    /// The 256-weight blocks walked: all of a row's (I % 256 == 0 is checked by
    /// `QTensor::new`), or one column panel's.
    blocks: std::ops::Range<usize>,
}

/// Bytes of one block, header included.
const BLOCK_BYTES: usize = 136;
/// Bytes before the nibbles.
const HEADER_BYTES: usize = 8;

impl QBody for AffineBody<'_, '_> {
    /// Eight rows share each activation load on long rows (measured: mq4-g256-v2
    /// [6144 x 16384] 1.64-1.88 ms against 1.92-1.96 four at a time, as int4-row).
    fn eight_rows(&self) -> bool {
        true
    }
    /// A block is one quad of 4 chunks, reduced as [`Int4Body::quad`] does (two `vphaddd`
    /// levels to one lane per 32-block), times the block's steps and each lane's span
    /// scale; the zero term is `zero · d · Σ q` of each lane's 32-block, a vector FMA.
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
            x[k] = (a.q(t0 + k), a.dh(t0 + k), a.xh(t0 + k));
        }
        let xq = x.map(|a| a.0);
        let mut rows = [std::ptr::null::<u8>(); R];
        for r in 0..R {
            rows[r] = self.t.row(o + r).as_ptr();
        }
        // The header's (scale, zero) of each lane's chunk: lane l holds chunk l % 4, whose
        // 128-weight span is (l % 4) / 2.
        let (s_at, z_at): (&[u32; 8], &[u32; 8]) = match self.header {
            Header::F16Halves => (&[0, 0, 2, 2, 0, 0, 2, 2], &[1, 1, 3, 3, 1, 1, 3, 3]),
            Header::F32 | Header::F16 => (&[0; 8], &[1; 8]),
        };
        // SAFETY: the caller's level contract; block j < blocks lies in each row (136 bytes
        // from 136j) and the activations hold blocks * 256 values.
        unsafe {
            let mut acc = [[Q::fzero(); T]; R];
            let mut zacc = [[Q::fzero(); T]; R];
            let mut blk = [std::ptr::null::<u8>(); R];
            let (mut sv, mut zv) = ([Q::fzero(); R], [Q::fzero(); R]);
            let all = self.t.cols() / 256;
            let ahead = panels::ahead(
                self.blocks.len(),
                all,
                self.t.row_bytes(),
                prefetch::per_stream(R),
            );
            for j in self.blocks.clone() {
                prefetch::lines_n::<3, R>(&rows, j * BLOCK_BYTES, ahead);
                for r in 0..R {
                    let h = rows[r].add(j * BLOCK_BYTES);
                    blk[r] = h.add(HEADER_BYTES);
                    let hv = match self.header {
                        Header::F16Halves | Header::F16 => Q::f16x4(h),
                        Header::F32 => Q::f32x2(h),
                    };
                    (sv[r], zv[r]) = (Q::fperm(hv, s_at), Q::fperm(hv, z_at));
                }
                let dots = quad_dots::<Q, R, T>(&blk, j, &xq);
                for k in 0..T {
                    let dh = Q::fload(x[k].1.add(8 * j));
                    let xh = Q::fload(x[k].2.add(8 * j));
                    for r in 0..R {
                        let f = Q::cvt(dots[r][k]);
                        acc[r][k] = Q::fma(Q::fmul(f, dh), sv[r], acc[r][k]);
                        zacc[r][k] = Q::fma(zv[r], xh, zacc[r][k]);
                    }
                }
            }
            for r in 0..R {
                for k in 0..T {
                    out[r * a.s + t0 + k] = Q::fsum(Q::fadd(acc[r][k], zacc[r][k]));
                }
            }
        }
    }
    fn rows(&self) -> usize {
        self.t.rows()
    }
    fn cols(&self) -> usize {
        256 * self.blocks.len()
    }
    fn batch(&self) -> usize {
        self.a.s
    }
}

#[cfg(test)]
mod tile_policy {
    //! The row tiles each body asks the driver for at S = 1: one row at a time up to
    //! `ONE_ROW_MAX_COLS` columns (`INT4_QUADS_ONE_ROW_MAX_COLS` for int4-row and the
    //! groups that are a multiple of 64), and on longer rows eight at a time where that was
    //! measured to stream faster (each body's `eight_rows`; the driver takes them only at
    //! the AVX-512 levels), four otherwise. A speed choice:
    //! the results do not depend on it, so only these tests see the policy change.
    use super::*;
    use crate::kernels::Micro;
    use crate::registry::Format;
    use crate::testdata::{Rng, weights};
    use crate::{EncodeOptions, encode};

    /// (one row at a time, eight rows at a time) for a [2, cols] tensor of `format`.
    fn policy(format: Format, cols: usize) -> (bool, bool) {
        let w = weights(&mut Rng::new(7), 2, cols);
        let e = encode(format, 2, cols, &w, &EncodeOptions::default()).expect("encode");
        let t = e.view();
        let x = vec![0.5f32; cols];
        fn tiles(d: &impl Micro) -> (bool, bool) {
            (d.one_row_at_a_time(), d.eight_rows_at_a_time())
        }
        match format {
            Format::Int8Row => {
                let a = QActs::new(INT8_ROW.layout(), &x, 1, cols);
                tiles(&QDriver(INT8_ROW.body(&t, &a, 0..cols.div_ceil(32))))
            }
            Format::Mq4G256V2 => {
                let a = QActs::new(MQ4_V2.layout(), &x, 1, cols);
                tiles(&QDriver(MQ4_V2.body(&t, &a, 0..cols / 256)))
            }
            _ => {
                let a = QActs::new(INT4.layout(), &x, 1, cols);
                tiles(&QDriver(INT4.body(&t, &a)))
            }
        }
    }

    #[test]
    fn short_rows_go_one_at_a_time_long_rows_eight_where_measured() {
        for (format, max, eight) in [
            (Format::Int8Row, ONE_ROW_MAX_COLS, false),
            (Format::Int4Row, INT4_QUADS_ONE_ROW_MAX_COLS, true),
            (Format::Int4G64, INT4_QUADS_ONE_ROW_MAX_COLS, true),
            (Format::Int4G128, INT4_QUADS_ONE_ROW_MAX_COLS, false),
            (Format::Int4G96, ONE_ROW_MAX_COLS, false),
            (Format::Mq4G256V2, ONE_ROW_MAX_COLS, true),
        ] {
            assert!(policy(format, max).0, "{format}");
            assert_eq!(policy(format, max + 256), (false, eight), "{format}");
        }
    }
}
