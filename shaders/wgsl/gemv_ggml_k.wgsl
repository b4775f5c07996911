// tessera WGSL GEMV, family ggml_k: GGML's 256-weight super-blocks, byte-identical to
// llama.cpp's block_q*_K / block_iq4_xs (crates/quant-core/src/codecs/ggml_kquants.rs,
// kquant.rs, ggml_iq4.rs, whose module docs give every bit position used here):
// KIND 0 q2_k (scales[16], qs[64], d, dmin), 1 q3_k (hmask[32], qs[64], scales[12], d),
// 2 q4_k and mq4-k (d, dmin, scales[12], qs[128]; mq4-k's x is rotated by the host),
// 3 q5_k (d, dmin, scales[12], qh[32], qs[128]), 4 q6_k (ql[128], qh[64], scales[16] int8,
// d), 5 iq4_xs (d, scales_h, scales_l[4], qs[128]). The block size is row_bytes / (I / 256).
// A work item is a quarter of a block (64 weights, part c); each invocation takes items
// j = lid, lid + 128, ... (block j / 4, part j % 4) of the ROWS rows.

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

// ---- family: gemv_ggml_k ----
override KIND: u32 = 2u;

// GGML's kvalues_iq4nl.
const KV_IQ4NL = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn iq4nl(n: vec4<u32>) -> vec4<f32> {
    var kv = KV_IQ4NL;
    return vec4<f32>(kv[n.x], kv[n.y], kv[n.z], kv[n.w]);
}

// GGML's get_scale_min_k4: 6-bit scale and min of sub-block j from the 12 bytes at q.
fn scale_min_k4(q: u32, j: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>(byte_at(q + j) & 63u, byte_at(q + j + 4u) & 63u);
    }
    return vec2<u32>(
        (byte_at(q + j + 4u) & 15u) | ((byte_at(q + j - 4u) >> 6u) << 4u),
        (byte_at(q + j + 4u) >> 4u) | ((byte_at(q + j) >> 6u) << 4u),
    );
}

// q3_k's 6-bit scale k from the 12 bytes at q.
fn q3_scale(q: u32, k: u32) -> u32 {
    let lo = (byte_at(q + k % 8u) >> (4u * (k / 8u))) & 15u;
    let hi = (byte_at(q + 8u + k % 4u) >> (2u * (k / 4u))) & 3u;
    return lo | (hi << 4u);
}

// The 4 bytes of w shifted right by sh, masked to `mask`.
fn fields(w: u32, sh: u32, mask: u32) -> vec4<u32> {
    return (bytes_of(w) >> vec4<u32>(sh)) & vec4<u32>(mask);
}

fn k_part(r: u32, base: u32, c: u32, i0: u32) {
    switch KIND {
        case 0u: {
            // q2_k: part (h, k) holds weights 128h + 32s + 16k + l (s < 4, l < 16): bits 2s of
            // qs[32h + 16k + l], scale byte 8h + 2s + k (low nibble scale, high min).
            let h = c / 2u;
            let k = c % 2u;
            let d = f16x2(bytes4(base + 80u));
            for (var s = 0u; s < 4u; s++) {
                for (var m = 0u; m < 4u; m++) {
                    let w = bytes4(base + 16u + 32u * h + 16u * k + 4u * m);
                    tdot_sum(i0 + 128u * h + 32u * s + 16u * k + 4u * m, u2f(fields(w, 2u * s, 3u)));
                }
                let sc = byte_at(base + group(8u * h + 2u * s + k, 16u));
                fold_affine(r, scaled(d.x) * f32(sc & 15u), -(d.y * f32(sc >> 4u)));
            }
        }
        case 1u: {
            // q3_k: as q2_k's codes, minus 4 where bit 4h + s of hmask[16k + l] is clear;
            // w = d * (scale - 32) * q.
            let h = c / 2u;
            let k = c % 2u;
            let d = f16_lo(bytes4(base + 108u));
            for (var s = 0u; s < 4u; s++) {
                for (var m = 0u; m < 4u; m++) {
                    let w = bytes4(base + 32u + 32u * h + 16u * k + 4u * m);
                    let hm = bytes4(base + 16u * k + 4u * m);
                    let q = fields(w, 2u * s, 3u) + fields(hm, 4u * h + s, 1u) * vec4<u32>(4u);
                    tdot(i0 + 128u * h + 32u * s + 16u * k + 4u * m, u2f(q) - vec4<f32>(4.0));
                }
                let sc = q3_scale(base + 96u, group(8u * h + 2u * s + k, 16u));
                fold(r, scaled(d) * (f32(sc) - 32.0));
            }
        }
        case 2u, 3u: {
            // q4_k / q5_k: part c is qs[32c .. 32c + 32]: low nibbles weights 64c + l
            // (sub-block 2c), high nibbles 64c + 32 + l (sub-block 2c + 1); q5_k adds bit
            // 2c (low) or 2c + 1 (high) of qh[l] as the fifth bit.
            let d = f16x2(bytes4(base));
            let qs = base + select(16u, 48u, KIND == 3u);
            for (var hi = 0u; hi < 2u; hi++) {
                for (var m = 0u; m < 8u; m++) {
                    let w = bytes4(qs + 32u * c + 4u * m);
                    var q = ggml_nib(w, hi == 1u);
                    if (KIND == 3u) {
                        q |= fields(bytes4(base + 16u + 4u * m), 2u * c + hi, 1u) << vec4<u32>(4u);
                    }
                    tdot_sum(i0 + 64u * c + 32u * hi + 4u * m, u2f(q));
                }
                let sm = scale_min_k4(base + 4u, group(2u * c + hi, 8u));
                fold_affine(r, scaled(d.x) * f32(sm.x), -(d.y * f32(sm.y)));
            }
        }
        case 4u: {
            // q6_k: part (h, k2) holds weights 128h + 32s + l for s in {k2, k2 + 2}: low 4
            // bits from ql[64h + 32k2 + l] (low nibble for s < 2, high for s >= 2), top 2
            // from bits 2s of qh[32h + l]; scale int8 scales[8h + 2s + l / 16].
            let h = c / 2u;
            let k2 = c % 2u;
            let d = f16_lo(bytes4(base + 208u));
            for (var t2 = 0u; t2 < 2u; t2++) {
                let s = k2 + 2u * t2;
                for (var half = 0u; half < 2u; half++) {
                    for (var m = 0u; m < 4u; m++) {
                        let l = 16u * half + 4u * m;
                        let ql = bytes4(base + 64u * h + 32u * k2 + l);
                        let qh = bytes4(base + 128u + 32u * h + l);
                        let q = ggml_nib(ql, t2 == 1u) | (fields(qh, 2u * s, 3u) << vec4<u32>(4u));
                        tdot(i0 + 128u * h + 32u * s + l, u2f(q) - vec4<f32>(32.0));
                    }
                    let sc = bitcast<i32>(byte_at(base + 192u + group(8u * h + 2u * s + half, 16u)) << 24u) >> 24u;
                    fold(r, scaled(d) * f32(sc));
                }
            }
        }
        default: {
            // iq4_xs: sub-blocks ib = 2c, 2c + 1 of 32: qs[16 ib + j], low nibble weight
            // 32 ib + j, high 32 ib + 16 + j; ls = 6-bit from scales_l / scales_h;
            // w = d * (ls - 32) * kvalues_iq4nl[q].
            let hdr = bytes4(base);
            let d = f16_lo(hdr);
            let sh = hdr >> 16u;
            for (var e = 0u; e < 2u; e++) {
                let ib = 2u * c + e;
                for (var m = 0u; m < 4u; m++) {
                    let w = bytes4(base + 8u + 16u * ib + 4u * m);
                    tdot(i0 + 32u * ib + 4u * m, iq4nl(ggml_nib(w, false)));
                    tdot(i0 + 32u * ib + 16u + 4u * m, iq4nl(ggml_nib(w, true)));
                }
                let gb = group(ib, 8u);
                let ls = ((byte_at(base + 4u + gb / 2u) >> (4u * (gb % 2u))) & 15u) | (((sh >> (2u * gb)) & 3u) << 4u);
                fold(r, scaled(d) * (f32(ls) - 32.0));
            }
        }
    }
}

fn partial(row0: u32, lid: u32) {
    let rb = p.row_bytes;
    let nb = p.i / 256u;
    let bb = rb / nb;
    for (var j = lid; j < 4u * nb; j += WG) {
        let b = j / 4u;
        for (var r = 0u; r < ROWS; r++) {
            if (row0 + r < p.o) {
                k_part(r, (row0 + r) * rb + bb * b, j % 4u, 256u * b);
            }
        }
    }
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
