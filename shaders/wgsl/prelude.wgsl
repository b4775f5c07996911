// ---- prelude: interface and helpers (shaders/wgsl/prelude.wgsl: composed before every
// family file, kernels_metal::kernels::shader_source) ---------------------------------------

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

// Invocations a workgroup (kernels_metal::kernels::KernelSpec::workgroup_size: 64 for the
// packed-activation S = 1 kernels, 128 for every other pipeline); a multiple of 16.
override WG: u32 = 128u;

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


// ---- S = 1 helpers (issue #5's speed case) --------------------------------------------------

// Chunk c of row `row` (rows of rb bytes): one 16-byte load when rows are 16-byte aligned.
fn rowc(row: u32, c: u32, rb: u32) -> vec4<u32> {
    if ((rb & 15u) == 0u) {
        return wq[row * (rb >> 4u) + c];
    }
    let base = row * rb;
    return load16(base + 16u * c, base + rb);
}

// One 16-byte chunk of each of a workgroup's 4 rows.
struct Rows4 {
    v0: vec4<u32>,
    v1: vec4<u32>,
    v2: vec4<u32>,
    v3: vec4<u32>,
}

// Chunk c of rows r0..r3 (rows past ROWS read as zero without a load), with the rows'
// 16-byte alignment tested once for the 4 loads. Tested per row (`rows4_per_row`), the
// NVIDIA driver kept 16 bytes of int4-row's S = 1 kernel in local memory, and the kernel
// ran 4% slower (docs/VULKAN.md "Session 26").
fn rows4(r: vec4<u32>, c: u32, rb: u32) -> Rows4 {
    if ((rb & 15u) != 0u) {
        return rows4_per_row(r, c, rb);
    }
    let n = rb >> 4u;
    var q: Rows4;
    q.v0 = wq[r.x * n + c];
    if (ROWS > 1u) {
        q.v1 = wq[r.y * n + c];
    }
    if (ROWS > 2u) {
        q.v2 = wq[r.z * n + c];
    }
    if (ROWS > 3u) {
        q.v3 = wq[r.w * n + c];
    }
    return q;
}

// rows4 with the alignment tested row by row (`rowc`). gemv_int_group keeps it: there the
// driver allocated fewer registers for `rows4` and int4-g64 ran 2% slower (same section).
fn rows4_per_row(r: vec4<u32>, c: u32, rb: u32) -> Rows4 {
    var q: Rows4;
    q.v0 = rowc(r.x, c, rb);
    if (ROWS > 1u) {
        q.v1 = rowc(r.y, c, rb);
    }
    if (ROWS > 2u) {
        q.v2 = rowc(r.z, c, rb);
    }
    if (ROWS > 3u) {
        q.v3 = rowc(r.w, c, rb);
    }
    return q;
}

// Swaps the nibbles of every byte of w under MUTATE 1.
fn nib_order(w: u32) -> u32 {
    if (MUTATE == 1u) {
        return ((w & 0x0F0F0F0Fu) << 4u) | ((w >> 4u) & 0x0F0F0F0Fu);
    }
    return w;
}

// Nibbles j = 0..3 of w in place, as n_j 16^j + 2^23 (exact f32): one mask-and-or a weight,
// no shift. The caller subtracts the offset vector and scales component j by 16^-j once.
fn nib_in_place(w: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>((vec4<u32>(w) & vec4<u32>(0xFu, 0xF0u, 0xF00u, 0xF000u)) | vec4<u32>(0x4B000000u));
}

// 16^-j, j = 0..3: undoes nib_in_place's positions.
const NIB_POS: vec4<f32> = vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625);

// The activations of 16-byte chunk c of a 4-bit row (weights 32 c .. 32 c + 31).
struct X8 {
    x0: vec4<f32>,
    x1: vec4<f32>,
    x2: vec4<f32>,
    x3: vec4<f32>,
    x4: vec4<f32>,
    x5: vec4<f32>,
    x6: vec4<f32>,
    x7: vec4<f32>,
}

fn x8(c: u32) -> X8 {
    let xi = 8u * c;
    return X8(xv[xi], xv[xi + 1u], xv[xi + 2u], xv[xi + 3u], xv[xi + 4u], xv[xi + 5u], xv[xi + 6u], xv[xi + 7u]);
}

// One row's chunk w (32 offset-binary nibbles, q + 8) against its activations x, per nibble
// position: component j sums nibbles j and j + 4 of each word, times 16^j (dot with NIB_POS
// for the sum); (q - 8) 16^j is nib_in_place minus (8 16^j + 2^23), exact. Per weight: one
// mask-and-or, one subtraction, one multiply-add.
fn q4row(w: vec4<u32>, x: X8) -> vec4<f32> {
    let off = vec4<f32>(8388616.0, 8388736.0, 8390656.0, 8421376.0);
    let a = nib_order(w.x);
    let b = nib_order(w.y);
    let c = nib_order(w.z);
    let d = nib_order(w.w);
    return (nib_in_place(a) - off) * x.x0 + (nib_in_place(a >> 16u) - off) * x.x1
        + (nib_in_place(b) - off) * x.x2 + (nib_in_place(b >> 16u) - off) * x.x3
        + (nib_in_place(c) - off) * x.x4 + (nib_in_place(c >> 16u) - off) * x.x5
        + (nib_in_place(d) - off) * x.x6 + (nib_in_place(d >> 16u) - off) * x.x7;
}

// ---- S = 1, int4 (offset binary), packed int8 activations ----------------------------------
// Where p.reserved0 is 1 or 2 (gemv_int_row BITS 4, gemv_int_group and gemv_affine256 at
// S = 1 only: the host appended them; kernels_metal::kernels::int8_activations; 1 and 2 name
// the layout, `xq`).
// kernels_metal::kernels::pack_int8_activations: after x's x_stride floats, 7 vec4s for
// each 32-weight block b (= 16-byte chunk b of a row): planes 0, 1, 2 (2 vec4s each) of
// signed bytes q_k with x ~ d (q0 + q1 / 256 + q2 / 65536), then (d / 256, and for each
// plane 0x4B400000 - 8 sum q_k); byte j of plane word 2k is weight 8k + 2j, of word 2k + 1 weight
// 8k + 2j + 1, matching the nibble bytes (w & 0x0F0F0F0F), ((w >> 4) & 0x0F0F0F0F) of word k.
// d / 256 is a NaN where the block holds a non-finite or tiny activation: that chunk then
// takes the f32 path (tested on the bits: drivers may assume no NaN in float compares).

// Block c's planes and header.
struct XQ {
    a0: vec4<u32>,
    b0: vec4<u32>,
    a1: vec4<u32>,
    b1: vec4<u32>,
    a2: vec4<u32>,
    b2: vec4<u32>,
    h: vec4<u32>,
}

// Block c's 7 vec4s. p.reserved0 == 2 (planar, the hosts' default since session 6): vec4 k
// of every block together, at x_stride / 4 + k nb + c (nb = x_stride / 32 blocks at S = 1),
// so a subgroup's 7 loads each read one contiguous run; 1 (interleaved): block c's 7 vec4s
// together at x_stride / 4 + 7 c, each load strided by 112 bytes across the subgroup.
fn xq(c: u32) -> XQ {
    if (p.reserved0 == 2u) {
        let nb = p.x_stride >> 5u;
        let k0 = (p.x_stride >> 2u) + c;
        return XQ(
            bitcast<vec4<u32>>(xv[k0]),
            bitcast<vec4<u32>>(xv[k0 + nb]),
            bitcast<vec4<u32>>(xv[k0 + 2u * nb]),
            bitcast<vec4<u32>>(xv[k0 + 3u * nb]),
            bitcast<vec4<u32>>(xv[k0 + 4u * nb]),
            bitcast<vec4<u32>>(xv[k0 + 5u * nb]),
            bitcast<vec4<u32>>(xv[k0 + 6u * nb]),
        );
    }
    let k = (p.x_stride >> 2u) + 7u * c;
    return XQ(
        bitcast<vec4<u32>>(xv[k]),
        bitcast<vec4<u32>>(xv[k + 1u]),
        bitcast<vec4<u32>>(xv[k + 2u]),
        bitcast<vec4<u32>>(xv[k + 3u]),
        bitcast<vec4<u32>>(xv[k + 4u]),
        bitcast<vec4<u32>>(xv[k + 5u]),
        bitcast<vec4<u32>>(xv[k + 6u]),
    );
}

// sum_i (n_i - 8) q_i of row chunk w's nibble bytes (lo, hi) and one plane (a: words 0..3,
// b: 4..7), as the bits of the f32 1.5 2^23 + that sum: the dot products accumulate onto the
// header's 0x4B400000 - 8 sum q (h), and |the sum| <= 32 * 8 * 128 < 2^22 keeps it exact.
fn q4plane(lo: vec4<u32>, hi: vec4<u32>, a: vec4<u32>, b: vec4<u32>, h: u32) -> f32 {
    let s = bitcast<i32>(h) + dot4I8Packed(lo.x, a.x) + dot4I8Packed(hi.x, a.y)
        + dot4I8Packed(lo.y, a.z) + dot4I8Packed(hi.y, a.w) + dot4I8Packed(lo.z, b.x)
        + dot4I8Packed(hi.z, b.y) + dot4I8Packed(lo.w, b.z) + dot4I8Packed(hi.w, b.w);
    return bitcast<f32>(s) - 12582912.0;
}

// sum_i (n_i - 8) x_i / (d / 256) for one row's chunk w against block x's planes: every
// plane sum is an exact f32 (no conversion instruction), and s0 256 + s1
// (|.| <= 32 * 8 * (127 * 256 + 128) < 2^24) is exact too, so one rounding remains.
fn q4i8(w: vec4<u32>, x: XQ) -> f32 {
    let v = vec4<u32>(nib_order(w.x), nib_order(w.y), nib_order(w.z), nib_order(w.w));
    let lo = v & vec4<u32>(0x0F0F0F0Fu);
    let hi = (v >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu);
    let s0 = q4plane(lo, hi, x.a0, x.b0, x.h.y);
    let s1 = q4plane(lo, hi, x.a1, x.b1, x.h.z);
    let s2 = q4plane(lo, hi, x.a2, x.b2, x.h.w);
    return fma(s0, 256.0, s1) + s2 * 0.00390625;
}

// ---- S > 1, 4 rows a workgroup (issue #5's batch path) --------------------------------------
// Where a family's `fastb()` holds and ROWS is 4 (kernels.rs `KernelSpec::rows`), the tails
// call `partialb` instead of `partial`: every invocation decodes 4 weights of each of the 4
// rows once and reads each activation vector x[s, i .. i + 3] once for all 4 rows, and the
// S x 4 partials live in the vec4 members of an `AccB` (constant indices only, so they stay
// in registers; the private `acc`/`t`/`u` arrays are never touched). Today's path re-read
// x once per row and indexed private arrays with loop variables.

// a<s>: batch row s's partials of the workgroup's 4 rows (component r = row row0 + r).
struct AccB {
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
    a4: vec4<f32>,
    a5: vec4<f32>,
    a6: vec4<f32>,
    a7: vec4<f32>,
    a8: vec4<f32>,
    a9: vec4<f32>,
    a10: vec4<f32>,
    a11: vec4<f32>,
    a12: vec4<f32>,
    a13: vec4<f32>,
    a14: vec4<f32>,
    a15: vec4<f32>,
}

// 4 consecutive weights of each of the 4 rows.
struct Q4 {
    r0: vec4<f32>,
    r1: vec4<f32>,
    r2: vec4<f32>,
    r3: vec4<f32>,
}

// q . x for each row.
fn qdot(q: Q4, x: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(dot(q.r0, x), dot(q.r1, x), dot(q.r2, x), dot(q.r3, x));
}

// a<s> += q . x[s, i .. i + 3] for every s < S (S is a constant: the branches fold away).
fn accb(a: ptr<function, AccB>, q: Q4, i: u32) {
    (*a).a0 += qdot(q, x4(0u, i));
    if (S > 1u) {
        (*a).a1 += qdot(q, x4(1u, i));
    }
    if (S > 2u) {
        (*a).a2 += qdot(q, x4(2u, i));
    }
    if (S > 3u) {
        (*a).a3 += qdot(q, x4(3u, i));
    }
    if (S > 4u) {
        (*a).a4 += qdot(q, x4(4u, i));
    }
    if (S > 5u) {
        (*a).a5 += qdot(q, x4(5u, i));
    }
    if (S > 6u) {
        (*a).a6 += qdot(q, x4(6u, i));
    }
    if (S > 7u) {
        (*a).a7 += qdot(q, x4(7u, i));
    }
    if (S > 8u) {
        (*a).a8 += qdot(q, x4(8u, i));
    }
    if (S > 9u) {
        (*a).a9 += qdot(q, x4(9u, i));
    }
    if (S > 10u) {
        (*a).a10 += qdot(q, x4(10u, i));
    }
    if (S > 11u) {
        (*a).a11 += qdot(q, x4(11u, i));
    }
    if (S > 12u) {
        (*a).a12 += qdot(q, x4(12u, i));
    }
    if (S > 13u) {
        (*a).a13 += qdot(q, x4(13u, i));
    }
    if (S > 14u) {
        (*a).a14 += qdot(q, x4(14u, i));
    }
    if (S > 15u) {
        (*a).a15 += qdot(q, x4(15u, i));
    }
}

// Every a<s> times the rows' scales d.
fn scaleb(a: AccB, d: vec4<f32>) -> AccB {
    return AccB(
        a.a0 * d, a.a1 * d, a.a2 * d, a.a3 * d, a.a4 * d, a.a5 * d, a.a6 * d, a.a7 * d,
        a.a8 * d, a.a9 * d, a.a10 * d, a.a11 * d, a.a12 * d, a.a13 * d, a.a14 * d, a.a15 * d,
    );
}

// Every a<s> with the rows where `bad` set to NaN (a NaN weight poisons its whole row).
fn poisonb(a: AccB, bad: vec4<bool>) -> AccB {
    let q = vec4<f32>(bitcast<f32>(0x7FC00000u + p.reserved0 * 0u));
    return AccB(
        select(a.a0, q, bad), select(a.a1, q, bad), select(a.a2, q, bad), select(a.a3, q, bad),
        select(a.a4, q, bad), select(a.a5, q, bad), select(a.a6, q, bad), select(a.a7, q, bad),
        select(a.a8, q, bad), select(a.a9, q, bad), select(a.a10, q, bad), select(a.a11, q, bad),
        select(a.a12, q, bad), select(a.a13, q, bad), select(a.a14, q, bad), select(a.a15, q, bad),
    );
}

// a<s> for a runtime s (the reduction only, outside the hot loop).
fn accb_at(a: AccB, s: u32) -> vec4<f32> {
    switch (s) {
        case 0u: { return a.a0; }
        case 1u: { return a.a1; }
        case 2u: { return a.a2; }
        case 3u: { return a.a3; }
        case 4u: { return a.a4; }
        case 5u: { return a.a5; }
        case 6u: { return a.a6; }
        case 7u: { return a.a7; }
        case 8u: { return a.a8; }
        case 9u: { return a.a9; }
        case 10u: { return a.a10; }
        case 11u: { return a.a11; }
        case 12u: { return a.a12; }
        case 13u: { return a.a13; }
        case 14u: { return a.a14; }
        default: { return a.a15; }
    }
}

// The workgroup's 4 rows (rows past O re-read row O - 1; the tails never store them).
fn rows_b(row0: u32) -> vec4<u32> {
    let last = p.o - 1u;
    return vec4<u32>(row0, min(row0 + 1u, last), min(row0 + 2u, last), min(row0 + 3u, last));
}
