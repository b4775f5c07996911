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
// j = lid, lid + 128, ... (block j / 8) of the ROWS rows.

// ---- prelude: interface and helpers (identical in every gemv_*.wgsl) ----------------------

struct Params {
    o: u32,
    i: u32,
    s: u32,
    x_stride: u32,
    row_bytes: u32,
    sc_row: u32,
    reserved0: u32,
    reserved1: u32,
}

// The container's weight bytes, zero-padded (kernels.rs `padded_len`).
@group(0) @binding(0) var<storage, read> wq: array<vec4<u32>>;
// The sidecar scale bytes, zero-padded (a 16-byte dummy for formats without a sidecar).
@group(0) @binding(1) var<storage, read> sc: array<u32>;
// Activations [S, x_stride], zero past I, in the stored (rotated) domain.
@group(0) @binding(2) var<storage, read> xv: array<vec4<f32>>;
// Outputs [S, O].
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<immediate> p: Params;

// Batch (one pipeline per S), rows a workgroup owns, and the deliberate defect of the
// mutation tests (0 = none, 1 = swap nibbles, 2 = group off by one, 3 = scales 1% high).
override S: u32 = 1u;
override ROWS: u32 = 1u;
override MUTATE: u32 = 0u;

const WG: u32 = 128u;

// acc[r * S + s]: the row partials of this invocation (ROWS * S <= 16); t and u collect
// one scale group's sum of q * x and sum of x before it is folded into acc.
var<private> acc: array<f32, 16>;
var<private> t: array<f32, 16>;
var<private> u: array<f32, 16>;

fn word(k: u32) -> u32 {
    return wq[k >> 2u][k & 3u];
}

// The 4 bytes at byte offset b, any alignment, little-endian.
fn bytes4(b: u32) -> u32 {
    let k = b >> 2u;
    let sh = (b & 3u) * 8u;
    let lo = word(k);
    if (sh == 0u) {
        return lo;
    }
    return (lo >> sh) | (word(k + 1u) << (32u - sh));
}

// The byte at byte offset b.
fn byte_at(b: u32) -> u32 {
    return (word(b >> 2u) >> ((b & 3u) * 8u)) & 255u;
}

// Keeps the bytes of word v (at byte offset b) that lie before byte `end`.
fn keep_before(v: u32, b: u32, end: u32) -> u32 {
    if (b + 4u <= end) {
        return v;
    }
    if (b >= end) {
        return 0u;
    }
    return v & ((1u << (8u * (end - b))) - 1u);
}

// The 16 bytes at byte offset b (any alignment); bytes at or past `end` read as zero, so a
// row's partial last chunk never sees the next row.
fn load16(b: u32, end: u32) -> vec4<u32> {
    if ((b & 15u) == 0u && b + 16u <= end) {
        return wq[b >> 4u];
    }
    return vec4<u32>(
        keep_before(bytes4(b), b, end),
        keep_before(bytes4(b + 4u), b + 4u, end),
        keep_before(bytes4(b + 8u), b + 8u, end),
        keep_before(bytes4(b + 12u), b + 12u, end),
    );
}

// Activation s at columns i .. i + 3 (i a multiple of 4).
fn x4(s: u32, i: u32) -> vec4<f32> {
    return xv[(s * p.x_stride + i) >> 2u];
}

// Small unsigned integers (< 2^23) to f32 without a conversion instruction:
// the bits of 2^23 + v, minus 2^23.
fn u2f(v: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(v | vec4<u32>(0x4B000000u)) - vec4<f32>(8388608.0);
}

// The 8 nibbles of w, low nibble first (weights 8k .. 8k + 7 of a low-nibble-first byte
// stream), as two vectors of unsigned codes; MUTATE 1 swaps the nibbles of every byte.
fn nibbles_lo(w: u32) -> vec4<u32> {
    if (MUTATE == 1u) {
        return (vec4<u32>(w >> 4u, w, w >> 12u, w >> 8u)) & vec4<u32>(15u);
    }
    return (vec4<u32>(w, w >> 4u, w >> 8u, w >> 12u)) & vec4<u32>(15u);
}

fn nibbles_hi(w: u32) -> vec4<u32> {
    return nibbles_lo(w >> 16u);
}

// The 4 low nibbles (weights j .. j + 3 of a GGML half-block) or high nibbles
// (j + 16 ..) of the 4 bytes of w; MUTATE 1 swaps which is which.
fn ggml_nib(w: u32, high: bool) -> vec4<u32> {
    let sh = select(0u, 4u, high != (MUTATE == 1u));
    return (vec4<u32>(w, w >> 8u, w >> 16u, w >> 24u) >> vec4<u32>(sh)) & vec4<u32>(15u);
}

// The 4 bytes of w as unsigned values.
fn bytes_of(w: u32) -> vec4<u32> {
    return vec4<u32>(w, w >> 8u, w >> 16u, w >> 24u) & vec4<u32>(255u);
}

// A scale as the kernel uses it (MUTATE 3: 1% high).
fn scaled(d: f32) -> f32 {
    if (MUTATE == 3u) {
        return d * 1.01;
    }
    return d;
}

// Group g of n (MUTATE 2: the next one, wrapping).
fn group(g: u32, n: u32) -> u32 {
    if (MUTATE == 2u) {
        return select(0u, g + 1u, g + 1u < n);
    }
    return g;
}

// IEEE binary16 -> f32, exact, by bit arithmetic (unpack2x16float needs a capability
// some adapters lack, and may flush binary16 subnormals).
fn f16v(h: vec4<u32>) -> vec4<f32> {
    let sign = (h & vec4<u32>(0x8000u)) << vec4<u32>(16u);
    let e = (h >> vec4<u32>(10u)) & vec4<u32>(31u);
    let m = h & vec4<u32>(0x3FFu);
    let normal = bitcast<vec4<f32>>(sign | ((e + vec4<u32>(112u)) << vec4<u32>(23u)) | (m << vec4<u32>(13u)));
    let special = bitcast<vec4<f32>>(sign | vec4<u32>(0x7F800000u) | (m << vec4<u32>(13u)));
    // Subnormal: m * 2^-24 with the sign (exact in f32).
    let sub = bitcast<vec4<f32>>(bitcast<vec4<u32>>(u2f(m) * 5.9604644775390625e-8) | sign);
    return select(select(normal, special, e == vec4<u32>(31u)), sub, e == vec4<u32>(0u));
}

fn f16_lo(w: u32) -> f32 {
    return f16v(vec4<u32>(w & 0xFFFFu, 0u, 0u, 0u)).x;
}

fn f16_hi(w: u32) -> f32 {
    return f16v(vec4<u32>(w >> 16u, 0u, 0u, 0u)).x;
}

// Both halves of w as f32 (low half first).
fn f16x2(w: u32) -> vec2<f32> {
    return f16v(vec4<u32>(w & 0xFFFFu, w >> 16u, 0u, 0u)).xy;
}

// f32 sidecar scale k.
fn scale_f32(k: u32) -> f32 {
    return bitcast<f32>(sc[k]);
}

// Byte k of the sidecar.
fn scale_byte(k: u32) -> u32 {
    return (sc[k >> 2u] >> ((k & 3u) * 8u)) & 255u;
}

// UE8M0 byte -> 2^(e - 127); 0xFF is NaN, 0 the subnormal 2^-127.
fn ue8m0(e: u32) -> f32 {
    if (e == 255u) {
        return bitcast<f32>(0x7FC00000u + p.reserved0 * 0u);
    }
    if (e == 0u) {
        return bitcast<f32>(0x00400000u);
    }
    return bitcast<f32>(e << 23u);
}

// t[s] += q . x[s, i .. i + 3].
fn tdot(i: u32, q: vec4<f32>) {
    for (var s = 0u; s < S; s++) {
        t[s] += dot(q, x4(s, i));
    }
}

// t[s] += q . x[s, i ..], u[s] += sum of x[s, i ..] (affine formats' zero term).
fn tdot_sum(i: u32, q: vec4<f32>) {
    for (var s = 0u; s < S; s++) {
        let xx = x4(s, i);
        t[s] += dot(q, xx);
        u[s] += dot(xx, vec4<f32>(1.0));
    }
}

// acc[r, s] += d * t[s]; t = 0.
fn fold(r: u32, d: f32) {
    for (var s = 0u; s < S; s++) {
        acc[r * S + s] += d * t[s];
        t[s] = 0.0;
    }
}

// acc[r, s] += d * t[s] + z * u[s]; t = u = 0.
fn fold_affine(r: u32, d: f32, z: f32) {
    for (var s = 0u; s < S; s++) {
        acc[r * S + s] += d * t[s] + z * u[s];
        t[s] = 0.0;
        u[s] = 0.0;
    }
}

// acc[r, s] = NaN for every s (a NaN weight poisons its whole row, as in the oracle).
fn poison(r: u32) {
    for (var s = 0u; s < S; s++) {
        acc[r * S + s] = bitcast<f32>(0x7FC00000u + p.reserved0 * 0u);
    }
}

// E4M3-FN bytes (the 4 bytes of w) -> f32, exact; the NaN codes (0x7F, 0xFF) decode as
// 480 and are flagged by the caller.
fn e4m3v(w: u32) -> vec4<f32> {
    let b = bytes_of(w);
    let e = (b >> vec4<u32>(3u)) & vec4<u32>(15u);
    let m = b & vec4<u32>(7u);
    let normal = bitcast<vec4<f32>>(((e + vec4<u32>(120u)) << vec4<u32>(23u)) | (m << vec4<u32>(20u)));
    // Subnormal: m * 2^-9 (exact).
    let mag = select(normal, u2f(m) * 0.001953125, e == vec4<u32>(0u));
    return select(mag, -mag, (b & vec4<u32>(128u)) != vec4<u32>(0u));
}

// E2M1 codes (4 nibble values) -> f32, exact: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
fn e2m1v(n: vec4<u32>) -> vec4<f32> {
    let e = (n >> vec4<u32>(1u)) & vec4<u32>(3u);
    let m = n & vec4<u32>(1u);
    let normal = bitcast<vec4<f32>>(((e + vec4<u32>(126u)) << vec4<u32>(23u)) | (m << vec4<u32>(22u)));
    let mag = select(normal, u2f(m) * 0.5, e == vec4<u32>(0u));
    return select(mag, -mag, (n & vec4<u32>(8u)) != vec4<u32>(0u));
}

// ---- family: gemv_affine256 ----
override HDR: u32 = 0u;

// Any S (S = 1 takes `partial1`).
fn partial_s(row0: u32, lid: u32) {
    let rb = p.row_bytes;
    let nb = rb / 136u;
    for (var j = lid; j < 8u * nb; j += WG) {
        let b = j / 8u;
        let pp = j % 8u;
        var v: array<vec4<u32>, 4>;
        var h: array<vec2<u32>, 4>;
        for (var r = 0u; r < ROWS; r++) {
            if (row0 + r < p.o) {
                // Rows and blocks start on multiples of 8 bytes: whole words.
                let bw = ((row0 + r) * rb + 136u * b) / 4u;
                let hw = ((row0 + r) * rb + 136u * group(b, nb)) / 4u;
                v[r] = vec4<u32>(word(bw + 2u + pp), word(bw + 10u + pp), word(bw + 18u + pp), word(bw + 26u + pp));
                h[r] = vec2<u32>(word(hw), word(hw + 1u));
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
// The same work items (4 payload words of a block), but each invocation takes item j of all
// ROWS rows at once (ROWS x 4 independent loads in flight), reads the item's activations
// once for all of them, and keeps one partial per row in a vector component: no function
// or private arrays in the loop, nothing to spill. Rows past O (a partial last workgroup)
// re-read row O - 1; the tail never stores them.

// Nibbles 0..3 of w (low nibble of byte 0 first) as q / 16, exact: each nibble shifted into
// the top 4 mantissa bits of 1.0 is 1 + q / 16, minus 1. No conversion instruction; the
// caller multiplies by 16 once per sum. MUTATE 1 swaps the nibbles.
fn fnib(w: u32) -> vec4<f32> {
    var sh = vec4<u32>(19u, 15u, 11u, 7u);
    if (MUTATE == 1u) {
        sh = vec4<u32>(15u, 19u, 7u, 11u);
    }
    return bitcast<vec4<f32>>(((vec4<u32>(w) << sh) & vec4<u32>(0x00780000u)) | vec4<u32>(0x3F800000u)) - vec4<f32>(1.0);
}

// sum_j (q_j / 16) x_j over the 8 nibbles of w against x[i .. i + 8) = (xa, xb).
fn fdot8(w: u32, xa: vec4<f32>, xb: vec4<f32>) -> f32 {
    return dot(fnib(w), xa) + dot(fnib(w >> 16u), xb);
}

// fdot8 of one word of the 4 rows (w = that word of rows 0..3).
fn fdot8x4(w: vec4<u32>, xa: vec4<f32>, xb: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(fdot8(w.x, xa, xb), fdot8(w.y, xa, xb), fdot8(w.z, xa, xb), fdot8(w.w, xa, xb));
}

// Payload word pp + 8 k of block b of `row`, k = 0..3, and the block's 2 header words.
fn item(row: u32, rb: u32, b: u32, pp: u32) -> vec4<u32> {
    let bw = (row * rb + 136u * b) / 4u;
    return vec4<u32>(word(bw + 2u + pp), word(bw + 10u + pp), word(bw + 18u + pp), word(bw + 26u + pp));
}

fn header(row: u32, rb: u32, b: u32) -> vec2<u32> {
    let hw = (row * rb + 136u * b) / 4u;
    return vec2<u32>(word(hw), word(hw + 1u));
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

fn partial1(row0: u32, lid: u32) -> vec4<f32> {
    let rb = p.row_bytes;
    let nb = rb / 136u;
    let last = p.o - 1u;
    let r1 = min(row0 + 1u, last);
    let r2 = min(row0 + 2u, last);
    let r3 = min(row0 + 3u, last);
    var a = vec4<f32>(0.0);
    for (var j = lid; j < 8u * nb; j += WG) {
        let b = j / 8u;
        let pp = j % 8u;
        let gb = group(b, nb);
        let v0 = item(row0, rb, b, pp);
        let h0 = header(row0, rb, gb);
        var v1 = vec4<u32>(0u);
        var v2 = vec4<u32>(0u);
        var v3 = vec4<u32>(0u);
        var h1 = vec2<u32>(0u);
        var h2 = vec2<u32>(0u);
        var h3 = vec2<u32>(0u);
        if (ROWS > 1u) {
            v1 = item(r1, rb, b, pp);
            h1 = header(r1, rb, gb);
        }
        if (ROWS > 2u) {
            v2 = item(r2, rb, b, pp);
            h2 = header(r2, rb, gb);
        }
        if (ROWS > 3u) {
            v3 = item(r3, rb, b, pp);
            h3 = header(r3, rb, gb);
        }
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
        let f0 = fdot8x4(vec4<u32>(v0.x, v1.x, v2.x, v3.x), xa0, xb0)
            + fdot8x4(vec4<u32>(v0.y, v1.y, v2.y, v3.y), xa1, xb1);
        let f1 = fdot8x4(vec4<u32>(v0.z, v1.z, v2.z, v3.z), xa2, xb2)
            + fdot8x4(vec4<u32>(v0.w, v1.w, v2.w, v3.w), xa3, xb3);
        // Per half: sum (q s + z) x = s 16 F + z X (F = sum (q / 16) x, see fnib).
        let a0 = sz(h0, 0u);
        let b0 = sz(h1, 0u);
        let c0 = sz(h2, 0u);
        let d0 = sz(h3, 0u);
        let a1 = sz(h0, 1u);
        let b1 = sz(h1, 1u);
        let c1 = sz(h2, 1u);
        let d1 = sz(h3, 1u);
        let sc0 = vec4<f32>(a0.x, b0.x, c0.x, d0.x);
        let z0 = vec4<f32>(a0.y, b0.y, c0.y, d0.y);
        let sc1 = vec4<f32>(a1.x, b1.x, c1.x, d1.x);
        let z1 = vec4<f32>(a1.y, b1.y, c1.y, d1.y);
        a += sc0 * (16.0 * f0) + z0 * sx0;
        a += sc1 * (16.0 * f1) + z1 * sx1;
    }
    return a;
}

fn partial(row0: u32, lid: u32) {
    if (S == 1u) {
        let a = partial1(row0, lid);
        acc[0] = a.x;
        acc[1] = a.y;
        acc[2] = a.z;
        acc[3] = a.w;
        return;
    }
    partial_s(row0, lid);
}

// ---- tail: entry point and reduction across the workgroup (shared-memory variant) ---------
// `.subgroup.wgsl` is this file with everything from the line above replaced by the
// subgroup tail (crates/kernels-metal/tests/shaders.rs checks it).

// 16 partials of each of the 128 invocations.
var<workgroup> red: array<f32, 2048>;

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row0 = (wid.x + wid.y * nwg.x) * ROWS;
    // Uniform across the workgroup: a workgroup past O does nothing.
    if (row0 >= p.o) {
        return;
    }
    for (var k = 0u; k < 16u; k++) {
        acc[k] = 0.0;
        t[k] = 0.0;
        u[k] = 0.0;
    }
    partial(row0, lid);
    let n = ROWS * S;
    for (var k = 0u; k < n; k++) {
        red[k * WG + lid] = acc[k];
    }
    workgroupBarrier();
    // Invocation lid sums 16 of value lid / 8's 128 partials ...
    let kk = lid >> 3u;
    var part = 0.0;
    if (kk < n) {
        for (var m = 0u; m < 16u; m++) {
            part += red[kk * WG + (lid & 7u) * 16u + m];
        }
    }
    workgroupBarrier();
    red[lid] = part;
    workgroupBarrier();
    // ... and invocation k < n adds value k's 8 sums and stores it.
    if (lid < n) {
        var v = 0.0;
        for (var m = 0u; m < 8u; m++) {
            v += red[lid * 8u + m];
        }
        let row = row0 + lid / S;
        if (row < p.o) {
            y[(lid % S) * p.o + row] = v;
        }
    }
}
