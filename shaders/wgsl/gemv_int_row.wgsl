// tessera WGSL GEMV, family int_row: int8-row (BITS 8), int4-row (BITS 4), int2-row (BITS 2).
// y[s, o] = d[o] * sum_i q[o, i] * x[s, i]; codes as docs/FORMATS.md and
// crates/quant-core/src/codecs/int_row.rs: int8 two's complement; int4 offset binary
// (q + 8), weight 2b the low nibble of byte b; int2 offset binary (q + 2), weight 4b + j in
// bits 2j .. 2j + 1 of byte b. One f32 scale per row in the sidecar.
// Work: each invocation takes 16-byte chunks c = lid, lid + WG, ... of the ROWS rows.

// ---- family: gemv_int_row ----
override BITS: u32 = 8u;

fn int_chunk(r: u32, i0: u32, v: vec4<u32>) {
    for (var k = 0u; k < 4u; k++) {
        let w = v[k];
        if (BITS == 8u) {
            // byte ^ 0x80 = q + 128.
            tdot(i0 + 4u * k, u2f(bytes_of(w ^ 0x80808080u)) - vec4<f32>(128.0));
        } else if (BITS == 4u) {
            tdot(i0 + 8u * k, u2f(nibbles_lo(w)) - vec4<f32>(8.0));
            tdot(i0 + 8u * k + 4u, u2f(nibbles_hi(w)) - vec4<f32>(8.0));
        } else {
            for (var h = 0u; h < 4u; h++) {
                let b = w >> (8u * h);
                let c = vec4<u32>(b, b >> 2u, b >> 4u, b >> 6u) & vec4<u32>(3u);
                tdot(i0 + 16u * k + 4u * h, u2f(c) - vec4<f32>(2.0));
            }
        }
    }
}

// Any S (the tail takes `partial1` instead where `fast1()`).
fn partial(row0: u32, lid: u32) {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let wpc = 128u / BITS;
    var d: array<f32, 4>;
    for (var r = 0u; r < ROWS; r++) {
        if (row0 + r < p.o) {
            d[r] = scaled(scale_f32(row0 + r));
        }
    }
    for (var c = lid; c < nch; c += WG) {
        // All rows' loads first, so ROWS independent reads are in flight.
        var v: array<vec4<u32>, 4>;
        for (var r = 0u; r < ROWS; r++) {
            let base = (row0 + r) * rb;
            if (row0 + r < p.o) {
                v[r] = load16(base + 16u * c, base + rb);
            }
        }
        for (var r = 0u; r < ROWS; r++) {
            if (row0 + r < p.o) {
                int_chunk(r, c * wpc, v[r]);
                fold(r, d[r]);
            }
        }
    }
}

// ---- S = 1 (issue #5's speed case) -------------------------------------------------------
// The tail takes `partial1` instead of `partial` when `fast1()` (S = 1, BITS 8 or 4). Every
// invocation reads 16-byte chunk c of all ROWS rows (ROWS independent loads in flight),
// reads the activations of chunk c once for all of them, and keeps one partial per row in a
// vector component: no function or private arrays anywhere, nothing to spill. Rows past O
// (a partial last workgroup) re-read row O - 1; the tail never stores them.

fn fast1() -> bool {
    return BITS != 2u;
}

// The 4 int8 codes of w as exact f32: the bits of 2^23 + (q + 128), minus 2^23 + 128.
fn i8v(w: u32) -> vec4<f32> {
    let b = (vec4<u32>(w ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4B000000u)) - vec4<f32>(8388736.0);
}

// q . x of int8 word k of the 4 rows against x[i .. i + 4).
fn i8dotx4(w: vec4<u32>, xk: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(dot(i8v(w.x), xk), dot(i8v(w.y), xk), dot(i8v(w.z), xk), dot(i8v(w.w), xk));
}

// ---- S = 1, int4, packed int8 activations (p.reserved0 = 1 or 2; prelude: `XQ`, `xq`, `q4i8`) ----

// One chunk's contribution: v (chunk c of the 4 rows) against block c's planes x.
fn step1_i8(v: Rows4, x: XQ, c: u32) -> vec4<f32> {
    if ((x.h.x & 0x7F800000u) != 0x7F800000u) {
        let dh = bitcast<f32>(x.h.x);
        return dh * vec4<f32>(q4i8(v.v0, x), q4i8(v.v1, x), q4i8(v.v2, x), q4i8(v.v3, x));
    }
    let xf = x8(c);
    return vec4<f32>(
        dot(q4row(v.v0, xf), NIB_POS),
        dot(q4row(v.v1, xf), NIB_POS),
        dot(q4row(v.v2, xf), NIB_POS),
        dot(q4row(v.v3, xf), NIB_POS),
    );
}

// The chunk loop of the packed path: one chunk an iteration. (Two chunks an iteration, or
// the next chunk's loads issued before the current one is decoded, lost on the H200 in
// session 6 and were removed in session 7: docs/VULKAN.md.)
fn partial1_i8(rr: vec4<u32>, lid: u32) -> vec4<f32> {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    var a = vec4<f32>(0.0);
    for (var c = lid; c < nch; c += WG) {
        a += step1_i8(rows4(rr, c, rb), xq(c), c);
    }
    return a;
}

// The 4 rows' scales.
fn row_scales4(rr: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(
        scaled(scale_f32(rr.x)),
        scaled(scale_f32(rr.y)),
        scaled(scale_f32(rr.z)),
        scaled(scale_f32(rr.w)),
    );
}

fn partial1(row0: u32, lid: u32) -> vec4<f32> {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let last = p.o - 1u;
    let rr = vec4<u32>(row0, min(row0 + 1u, last), min(row0 + 2u, last), min(row0 + 3u, last));
    if (BITS == 4u && p.reserved0 != 0u) {
        // The scales loaded after the loop, not before: 0.1-0.2 us less on an H100
        // (docs/VULKAN.md "Session 26").
        let ai = partial1_i8(rr, lid);
        return ai * row_scales4(rr);
    }
    // int8: one partial per row; int4: per row and nibble position (q4row).
    let d = row_scales4(rr);

    var a = vec4<f32>(0.0);
    var p0 = vec4<f32>(0.0);
    var p1 = vec4<f32>(0.0);
    var p2 = vec4<f32>(0.0);
    var p3 = vec4<f32>(0.0);
    for (var c = lid; c < nch; c += WG) {
        let v = rows4(rr, c, rb);
        if (BITS == 8u) {
            let xi = 4u * c;
            a += i8dotx4(vec4<u32>(v.v0.x, v.v1.x, v.v2.x, v.v3.x), xv[xi]);
            a += i8dotx4(vec4<u32>(v.v0.y, v.v1.y, v.v2.y, v.v3.y), xv[xi + 1u]);
            a += i8dotx4(vec4<u32>(v.v0.z, v.v1.z, v.v2.z, v.v3.z), xv[xi + 2u]);
            a += i8dotx4(vec4<u32>(v.v0.w, v.v1.w, v.v2.w, v.v3.w), xv[xi + 3u]);
        } else {
            let x = x8(c);
            p0 += q4row(v.v0, x);
            p1 += q4row(v.v1, x);
            p2 += q4row(v.v2, x);
            p3 += q4row(v.v3, x);
        }
    }
    if (BITS == 4u) {
        a = vec4<f32>(dot(p0, NIB_POS), dot(p1, NIB_POS), dot(p2, NIB_POS), dot(p3, NIB_POS));
    }
    return a * d;
}

// ---- S > 1, 4 rows a workgroup (prelude: `AccB`, `accb`) ----------------------------------
// The tails take `partialb` instead of `partial` when S > 1, ROWS = 4 and `fastb()` (BITS 8
// or 4): each 4-weight slice of chunk c is decoded once for the 4 rows and each activation
// vector is read once for all of them.

fn fastb() -> bool {
    return BITS != 2u;
}

fn partialb(row0: u32, lid: u32) -> AccB {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let rr = rows_b(row0);
    let d = vec4<f32>(
        scaled(scale_f32(rr.x)),
        scaled(scale_f32(rr.y)),
        scaled(scale_f32(rr.z)),
        scaled(scale_f32(rr.w)),
    );
    var a: AccB;
    for (var c = lid; c < nch; c += WG) {
        let v = rows4(rr, c, rb);
        for (var k = 0u; k < 4u; k++) {
            let w = vec4<u32>(v.v0[k], v.v1[k], v.v2[k], v.v3[k]);
            if (BITS == 8u) {
                accb(&a, Q4(i8v(w.x), i8v(w.y), i8v(w.z), i8v(w.w)), 16u * c + 4u * k);
            } else {
                let i = 32u * c + 8u * k;
                let o = vec4<f32>(8.0);
                accb(&a, Q4(u2f(nibbles_lo(w.x)) - o, u2f(nibbles_lo(w.y)) - o, u2f(nibbles_lo(w.z)) - o, u2f(nibbles_lo(w.w)) - o), i);
                accb(&a, Q4(u2f(nibbles_hi(w.x)) - o, u2f(nibbles_hi(w.y)) - o, u2f(nibbles_hi(w.z)) - o, u2f(nibbles_hi(w.w)) - o), i + 4u);
            }
        }
    }
    return scaleb(a, d);
}
