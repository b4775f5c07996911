// tessera WGSL GEMV, family affine256: hfq4-g256 and mq4-g256 (HDR 0), mq4-g256-v2 (HDR 1),
// mq4c-g256 (HDR 2). 136-byte blocks of 256 weights: an 8-byte header, then 128 payload
// bytes, weight 2b of the block the low nibble of payload byte b, q in [0, 15];
// w = q * scale[h] + zero[h]. Headers: HDR 0 f32 scale, f32 zero; HDR 1 two u32 words, each
// fp16 scale (low half) and fp16 zero (high half), the first for weights 0..127, the second
// for 128..255; HDR 2 one such word and 4 pad bytes
// (crates/quant-core/src/codecs/affine256.rs). Rotated formats (mq4-*) get x already
// rotated by the host. sum_j (q_j s + z) x_j = s * sum_j q_j x_j + z * sum_j x_j.
// A work item is 4 payload words of a block (words pp, pp + 8, pp + 16, pp + 24, pp < 8),
// so 8 neighbouring invocations read 8 neighbouring words; each invocation takes items
// j = lid, lid + WG, ... (block j / 8) of the ROWS rows.
// The host splits the blocks at upload (kernels::weight_binding): `wq` holds every block's
// 128 payload bytes back to back, so each block's payload starts on a 16-byte boundary, and
// `sc` every block's 8-byte header. p.row_bytes stays the stored row (136 bytes a block).

// ---- family: gemv_affine256 ----
override HDR: u32 = 0u;

// Payload word k (0..32) of block b of `row`, nb blocks a row.
fn pword(row: u32, nb: u32, b: u32, k: u32) -> u32 {
    return word((row * nb + b) * 32u + k);
}

// Header word k (0..2) of block b of `row`.
fn hword(row: u32, nb: u32, b: u32, k: u32) -> u32 {
    return sc[(row * nb + b) * 2u + k];
}

// Any S (the tail takes `partial1` instead where `fast1()`).
fn partial(row0: u32, lid: u32) {
    let rb = p.row_bytes;
    let nb = rb / 136u;
    for (var j = lid; j < 8u * nb; j += WG) {
        let b = j / 8u;
        let pp = j % 8u;
        var v: array<vec4<u32>, 4>;
        var h: array<vec2<u32>, 4>;
        for (var r = 0u; r < ROWS; r++) {
            if (row0 + r < p.o) {
                let row = row0 + r;
                let gb = group(b, nb);
                v[r] = vec4<u32>(pword(row, nb, b, pp), pword(row, nb, b, 8u + pp), pword(row, nb, b, 16u + pp), pword(row, nb, b, 24u + pp));
                h[r] = vec2<u32>(hword(row, nb, gb, 0u), hword(row, nb, gb, 1u));
            }
        }
        let i0 = 256u * b + 8u * pp;
        for (var r = 0u; r < ROWS; r++) {
            if (row0 + r < p.o) {
                for (var k = 0u; k < 4u; k++) {
                    let w = v[r][k];
                    let i = i0 + 64u * k;
                    tdot_sum(i, u2f(nibbles_lo(w)));
                    tdot_sum(i + 4u, u2f(nibbles_hi(w)));
                    if (HDR == 1u && k == 1u) {
                        // Words 0..15 of the payload (weights 0..127) are done.
                        let pr = f16x2(h[r].x);
                        fold_affine(r, scaled(pr.x), pr.y);
                    }
                }
                if (HDR == 0u) {
                    fold_affine(r, scaled(bitcast<f32>(h[r].x)), bitcast<f32>(h[r].y));
                } else if (HDR == 1u) {
                    let pr = f16x2(h[r].y);
                    fold_affine(r, scaled(pr.x), pr.y);
                } else {
                    let pr = f16x2(h[r].x);
                    fold_affine(r, scaled(pr.x), pr.y);
                }
            }
        }
    }
}

// ---- S = 1 (issue #5's speed case) -------------------------------------------------------
// The tail takes `partial1` instead of `partial` at S = 1. The same work items (4 payload
// words of a block), but each invocation takes item j of all ROWS rows at once (ROWS x 4
// independent loads in flight), reads the item's activations once for all of them, and
// keeps one partial per row in a vector component: no function or private arrays anywhere.
// Rows past O (a partial last workgroup) re-read row O - 1; the tail never stores them.

fn fast1() -> bool {
    return true;
}

// Payload word pp + 8 k of block b of `row`, k = 0..3, and the block's 2 header words.
fn item(row: u32, rb: u32, b: u32, pp: u32) -> vec4<u32> {
    let nb = rb / 136u;
    return vec4<u32>(pword(row, nb, b, pp), pword(row, nb, b, 8u + pp), pword(row, nb, b, 16u + pp), pword(row, nb, b, 24u + pp));
}

fn header(row: u32, rb: u32, b: u32) -> vec2<u32> {
    let nb = rb / 136u;
    return vec2<u32>(hword(row, nb, b, 0u), hword(row, nb, b, 1u));
}

// (scale, zero) of weights 0..127 (h = 0) or 128..255 (h = 1) of a block with header hd.
fn sz(hd: vec2<u32>, h: u32) -> vec2<f32> {
    var r: vec2<f32>;
    if (HDR == 0u) {
        r = vec2<f32>(bitcast<f32>(hd.x), bitcast<f32>(hd.y));
    } else if (HDR == 1u) {
        r = f16x2(select(hd.x, hd.y, h == 1u));
    } else {
        r = f16x2(hd.x);
    }
    return vec2<f32>(scaled(r.x), r.y);
}

// Item j's payload words and headers of the 4 rows.
struct Items4 {
    v0: vec4<u32>,
    v1: vec4<u32>,
    v2: vec4<u32>,
    v3: vec4<u32>,
    h0: vec2<u32>,
    h1: vec2<u32>,
    h2: vec2<u32>,
    h3: vec2<u32>,
}

fn items4(rr: vec4<u32>, rb: u32, b: u32, pp: u32, gb: u32) -> Items4 {
    var q: Items4;
    q.v0 = item(rr.x, rb, b, pp);
    q.h0 = header(rr.x, rb, gb);
    if (ROWS > 1u) {
        q.v1 = item(rr.y, rb, b, pp);
        q.h1 = header(rr.y, rb, gb);
    }
    if (ROWS > 2u) {
        q.v2 = item(rr.z, rb, b, pp);
        q.h2 = header(rr.z, rb, gb);
    }
    if (ROWS > 3u) {
        q.v3 = item(rr.w, rb, b, pp);
        q.h3 = header(rr.w, rb, gb);
    }
    return q;
}

// sum_j q_j x_j over the 16 nibbles of words w0, w1 (one row) against x = (xa0, xb0, xa1,
// xb1): per nibble position (nib_in_place minus 2^23 is q 16^j, exact), then NIB_POS.
fn q4a16(w0: u32, w1: u32, xa0: vec4<f32>, xb0: vec4<f32>, xa1: vec4<f32>, xb1: vec4<f32>) -> f32 {
    let off = vec4<f32>(8388608.0);
    let a = nib_order(w0);
    let b = nib_order(w1);
    let f = (nib_in_place(a) - off) * xa0 + (nib_in_place(a >> 16u) - off) * xb0
        + (nib_in_place(b) - off) * xa1 + (nib_in_place(b >> 16u) - off) * xb1;
    return dot(f, NIB_POS);
}

// ---- S = 1, packed int8 activations (p.reserved0 = 1 or 2; prelude: `XQ`, `xq`, `q4i8`) ----
// A work item is one 32-weight x block j (payload words 4 m .. 4 m + 3 of block b = j / 8,
// m = j % 8, in half m / 4): the planes of block j pair with those 4 words exactly as with
// a 16-byte chunk of int4-row. q4i8 gives F = sum (q - 8) x / (d / 256); with X = sum x,
// sum (q s + z) x = s F' + (z + 8 s) X (F' = F d / 256). X is taken from the header
// (sum q_k = (INT8_X_BIAS - h_k) / 8, exact in i32), so it is the sum of the planes' x_hat
// and the result is sum w x_hat: the same declared bound as int4-row's packed path
// (docs/VULKAN.md).

// Payload words 4 m .. 4 m + 3 of block b of `row`: one aligned 16-byte load.
fn sub4(row: u32, rb: u32, b: u32, m: u32) -> vec4<u32> {
    return wq[(row * (rb / 136u) + b) * 8u + m];
}

// (scale, zero + 8 scale) of half h of block gb of `row`.
fn sz8(row: u32, rb: u32, gb: u32, h: u32) -> vec2<f32> {
    let nb = rb / 136u;
    var hd: vec2<u32>;
    if (HDR == 1u) {
        hd = vec2<u32>(hword(row, nb, gb, h), 0u);
    } else {
        hd = vec2<u32>(hword(row, nb, gb, 0u), hword(row, nb, gb, 1u));
    }
    var r: vec2<f32>;
    if (HDR == 0u) {
        r = vec2<f32>(bitcast<f32>(hd.x), bitcast<f32>(hd.y));
    } else {
        // The hardware conversion (gemv_fp8's decode relies on it keeping binary16
        // subnormals too; kernels-rocm's every_fp8_code_decodes_exactly checks that).
        r = unpack2x16float(hd.x);
    }
    let s = scaled(r.x);
    return vec2<f32>(s, fma(8.0, s, r.y));
}

// Item j of the 4 rows (payload words, scale, zero + 8 scale) and block j's planes.
struct Ld1 {
    v: Rows4,
    sc4: vec4<f32>,
    z4: vec4<f32>,
    x: XQ,
}

fn load1_i8(rr: vec4<u32>, j: u32, rb: u32, nb: u32) -> Ld1 {
    let b = j / 8u;
    let m = j % 8u;
    let h = m / 4u;
    let gb = group(b, nb);
    let v = Rows4(sub4(rr.x, rb, b, m), sub4(rr.y, rb, b, m), sub4(rr.z, rb, b, m), sub4(rr.w, rb, b, m));
    let k0 = sz8(rr.x, rb, gb, h);
    let k1 = sz8(rr.y, rb, gb, h);
    let k2 = sz8(rr.z, rb, gb, h);
    let k3 = sz8(rr.w, rb, gb, h);
    return Ld1(v, vec4<f32>(k0.x, k1.x, k2.x, k3.x), vec4<f32>(k0.y, k1.y, k2.y, k3.y), xq(j));
}

fn step1_i8(l: Ld1, j: u32) -> vec4<f32> {
    let v = l.v;
    let x = l.x;
    var f: vec4<f32>;
    var sx: f32;
    if ((x.h.x & 0x7F800000u) != 0x7F800000u) {
        let dh = bitcast<f32>(x.h.x);
        // 65536 sum q0 + 256 sum q1 + sum q2 (|.| < 2^29: exact in i32), times d / 2^16.
        let q = bitcast<vec3<i32>>(vec3<u32>(0x4B400000u) - x.h.yzw) >> vec3<u32>(3u);
        sx = f32(q.x * 65536 + q.y * 256 + q.z) * (dh * 0.00390625);
        f = dh * vec4<f32>(q4i8(v.v0, x), q4i8(v.v1, x), q4i8(v.v2, x), q4i8(v.v3, x));
    } else {
        let xf = x8(j);
        sx = dot((xf.x0 + xf.x1) + (xf.x2 + xf.x3) + ((xf.x4 + xf.x5) + (xf.x6 + xf.x7)), vec4<f32>(1.0));
        f = vec4<f32>(
            dot(q4row(v.v0, xf), NIB_POS),
            dot(q4row(v.v1, xf), NIB_POS),
            dot(q4row(v.v2, xf), NIB_POS),
            dot(q4row(v.v3, xf), NIB_POS),
        );
    }
    return l.sc4 * f + l.z4 * sx;
}

// The item loop (one an iteration, as gemv_int_row's `partial1_i8`).
fn partial1_i8(rr: vec4<u32>, lid: u32) -> vec4<f32> {
    let rb = p.row_bytes;
    let nb = rb / 136u;
    let n = 8u * nb;
    var a = vec4<f32>(0.0);
    for (var j = lid; j < n; j += WG) {
        a += step1_i8(load1_i8(rr, j, rb, nb), j);
    }
    return a;
}

fn partial1(row0: u32, lid: u32) -> vec4<f32> {
    let rb = p.row_bytes;
    let nb = rb / 136u;
    let last = p.o - 1u;
    let rr = vec4<u32>(row0, min(row0 + 1u, last), min(row0 + 2u, last), min(row0 + 3u, last));
    if (p.reserved0 != 0u) {
        return partial1_i8(rr, lid);
    }
    var a = vec4<f32>(0.0);
    for (var j = lid; j < 8u * nb; j += WG) {
        let b = j / 8u;
        let pp = j % 8u;
        let it = items4(rr, rb, b, pp, group(b, nb));
        // Word pp + 8 k covers weights i0 + 64 k .. + 8; k = 0, 1 are the block's first
        // half (weights 0..127), k = 2, 3 its second.
        let xi = (256u * b + 8u * pp) / 4u;
        let xa0 = xv[xi];
        let xb0 = xv[xi + 1u];
        let xa1 = xv[xi + 16u];
        let xb1 = xv[xi + 17u];
        let xa2 = xv[xi + 32u];
        let xb2 = xv[xi + 33u];
        let xa3 = xv[xi + 48u];
        let xb3 = xv[xi + 49u];
        let one = vec4<f32>(1.0);
        let sx0 = dot((xa0 + xb0) + (xa1 + xb1), one);
        let sx1 = dot((xa2 + xb2) + (xa3 + xb3), one);
        let f0 = vec4<f32>(
            q4a16(it.v0.x, it.v0.y, xa0, xb0, xa1, xb1),
            q4a16(it.v1.x, it.v1.y, xa0, xb0, xa1, xb1),
            q4a16(it.v2.x, it.v2.y, xa0, xb0, xa1, xb1),
            q4a16(it.v3.x, it.v3.y, xa0, xb0, xa1, xb1),
        );
        let f1 = vec4<f32>(
            q4a16(it.v0.z, it.v0.w, xa2, xb2, xa3, xb3),
            q4a16(it.v1.z, it.v1.w, xa2, xb2, xa3, xb3),
            q4a16(it.v2.z, it.v2.w, xa2, xb2, xa3, xb3),
            q4a16(it.v3.z, it.v3.w, xa2, xb2, xa3, xb3),
        );
        // Per half: sum (q s + z) x = s F + z X (F = sum q x).
        let a0 = sz(it.h0, 0u);
        let b0 = sz(it.h1, 0u);
        let c0 = sz(it.h2, 0u);
        let d0 = sz(it.h3, 0u);
        let a1 = sz(it.h0, 1u);
        let b1 = sz(it.h1, 1u);
        let c1 = sz(it.h2, 1u);
        let d1 = sz(it.h3, 1u);
        let sc0 = vec4<f32>(a0.x, b0.x, c0.x, d0.x);
        let z0 = vec4<f32>(a0.y, b0.y, c0.y, d0.y);
        let sc1 = vec4<f32>(a1.x, b1.x, c1.x, d1.x);
        let z1 = vec4<f32>(a1.y, b1.y, c1.y, d1.y);
        a += sc0 * f0 + z0 * sx0;
        a += sc1 * f1 + z1 * sx1;
    }
    return a;
}

// ---- S > 1, 4 rows a workgroup (prelude: `AccB`, `accb`) ----------------------------------
// The tails take `partialb` instead of `partial` when S > 1 and ROWS = 4: item j (4 payload
// words of a block) of the 4 rows is decoded once into weights q s + z (one rounding a
// weight) and each activation vector is read once for all 4 rows.

fn fastb() -> bool {
    return true;
}

fn partialb(row0: u32, lid: u32) -> AccB {
    let rb = p.row_bytes;
    let nb = rb / 136u;
    let rr = rows_b(row0);
    var a: AccB;
    for (var j = lid; j < 8u * nb; j += WG) {
        let b = j / 8u;
        let pp = j % 8u;
        let it = items4(rr, rb, b, pp, group(b, nb));
        for (var k = 0u; k < 4u; k++) {
            // Word pp + 8 k: weights 64 k + 8 pp .. + 8 of the block, half k / 2.
            let hh = k >> 1u;
            let z0 = sz(it.h0, hh);
            let z1 = sz(it.h1, hh);
            let z2 = sz(it.h2, hh);
            let z3 = sz(it.h3, hh);
            let w = vec4<u32>(it.v0[k], it.v1[k], it.v2[k], it.v3[k]);
            let i = 256u * b + 64u * k + 8u * pp;
            accb(&a, Q4(
                fma(u2f(nibbles_lo(w.x)), vec4<f32>(z0.x), vec4<f32>(z0.y)),
                fma(u2f(nibbles_lo(w.y)), vec4<f32>(z1.x), vec4<f32>(z1.y)),
                fma(u2f(nibbles_lo(w.z)), vec4<f32>(z2.x), vec4<f32>(z2.y)),
                fma(u2f(nibbles_lo(w.w)), vec4<f32>(z3.x), vec4<f32>(z3.y)),
            ), i);
            accb(&a, Q4(
                fma(u2f(nibbles_hi(w.x)), vec4<f32>(z0.x), vec4<f32>(z0.y)),
                fma(u2f(nibbles_hi(w.y)), vec4<f32>(z1.x), vec4<f32>(z1.y)),
                fma(u2f(nibbles_hi(w.z)), vec4<f32>(z2.x), vec4<f32>(z2.y)),
                fma(u2f(nibbles_hi(w.w)), vec4<f32>(z3.x), vec4<f32>(z3.y)),
            ), i + 4u);
        }
    }
    return a;
}
