// tessera WGSL GEMV, family int_group: int4-g{GS}, GS in {16, 32, 48, 64, 96, 128, 192, 256}.
// int4-row's nibbles (q + 8, weight 2b the low nibble of byte b) with one f32 scale per GS
// weights along I: scale[o * ceil(I / GS) + i / GS] (crates/quant-core/src/codecs/int_group.rs).
// The scale is folded into the sum once per group part, never once per row (seed 000).
// Each invocation takes 16-byte chunks (32 weights) c = lid, lid + 128, ... of the ROWS rows;
// GS is a multiple of 16, so each 16-weight half of a chunk lies in one group.

// ---- family: gemv_int_group ----
override GS: u32 = 64u;

// Any S (S = 1 takes `partial1` when GS is a multiple of 32).
fn partial_s(row0: u32, lid: u32) {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let ng = p.sc_row;
    for (var c = lid; c < nch; c += WG) {
        var v: array<vec4<u32>, 4>;
        for (var r = 0u; r < ROWS; r++) {
            let base = (row0 + r) * rb;
            if (row0 + r < p.o) {
                v[r] = load16(base + 16u * c, base + rb);
            }
        }
        let i0 = 32u * c;
        for (var r = 0u; r < ROWS; r++) {
            let row = row0 + r;
            if (row < p.o) {
                for (var h = 0u; h < 2u; h++) {
                    let w0 = v[r][2u * h];
                    let w1 = v[r][2u * h + 1u];
                    let i = i0 + 16u * h;
                    tdot(i, u2f(nibbles_lo(w0)) - vec4<f32>(8.0));
                    tdot(i + 4u, u2f(nibbles_hi(w0)) - vec4<f32>(8.0));
                    tdot(i + 8u, u2f(nibbles_lo(w1)) - vec4<f32>(8.0));
                    tdot(i + 12u, u2f(nibbles_hi(w1)) - vec4<f32>(8.0));
                    // A GS multiple of 32 keeps the whole chunk in one group: fold once.
                    if (h == 1u || GS % 32u != 0u) {
                        let g = i / GS;
                        var d = 0.0;
                        if (g < ng) {
                            d = scaled(scale_f32(row * ng + group(g, ng)));
                        }
                        fold(r, d);
                    }
                }
            }
        }
    }
}

// ---- S = 1 (issue #5's speed case) -------------------------------------------------------
// Every invocation reads 16-byte chunk c of all ROWS rows (ROWS independent loads in
// flight), reads the activations of chunk c once for all of them, and keeps one partial per
// row in a vector component: no function or private arrays in the loop, nothing to spill.
// Rows past O (a partial last workgroup) re-read row O - 1; the tail never stores them.
// GS a multiple of 32 keeps each chunk (32 weights) in one group: one scale per chunk and row.

// Chunk c of row `row` (rows of rb bytes): one 16-byte load when rows are 16-byte aligned.
fn rowc(row: u32, c: u32, rb: u32) -> vec4<u32> {
    if ((rb & 15u) == 0u) {
        return wq[row * (rb >> 4u) + c];
    }
    let base = row * rb;
    return load16(base + 16u * c, base + rb);
}

// The 4 int8 codes of w as exact f32: the bits of 2^23 + (q + 128), minus 2^23 + 128.
fn i8v(w: u32) -> vec4<f32> {
    let b = (vec4<u32>(w ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4B000000u)) - vec4<f32>(8388736.0);
}

// Nibbles 0..3 of w (low nibble of byte 0 first) as (q - 8) / 16 = (n - 8) / 16, exact: each
// nibble n shifted into the top 4 mantissa bits of 1.0 is 1 + n / 16, minus 1.5. No
// conversion instruction; the caller multiplies by 16 once per sum. (Folding the -1.5 into
// one subtraction per sum instead loses too much to cancellation on outlier rows.)
// MUTATE 1 swaps the nibbles.
fn fnib(w: u32) -> vec4<f32> {
    var sh = vec4<u32>(19u, 15u, 11u, 7u);
    if (MUTATE == 1u) {
        sh = vec4<u32>(15u, 19u, 7u, 11u);
    }
    return bitcast<vec4<f32>>(((vec4<u32>(w) << sh) & vec4<u32>(0x00780000u)) | vec4<u32>(0x3F800000u)) - vec4<f32>(1.5);
}

// sum_j (q_j / 16) x_j over the 8 nibbles of w against x[i .. i + 8) = (xa, xb).
fn fdot8(w: u32, xa: vec4<f32>, xb: vec4<f32>) -> f32 {
    return dot(fnib(w), xa) + dot(fnib(w >> 16u), xb);
}

// fdot8 of word k of the 4 rows (w = that word of rows 0..3).
fn fdot8x4(w: vec4<u32>, xa: vec4<f32>, xb: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(fdot8(w.x, xa, xb), fdot8(w.y, xa, xb), fdot8(w.z, xa, xb), fdot8(w.w, xa, xb));
}

fn partial1(row0: u32, lid: u32) -> vec4<f32> {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let ng = p.sc_row;
    let last = p.o - 1u;
    let r1 = min(row0 + 1u, last);
    let r2 = min(row0 + 2u, last);
    let r3 = min(row0 + 3u, last);
    var a = vec4<f32>(0.0);
    for (var c = lid; c < nch; c += WG) {
        let v0 = rowc(row0, c, rb);
        var v1 = vec4<u32>(0u);
        var v2 = vec4<u32>(0u);
        var v3 = vec4<u32>(0u);
        if (ROWS > 1u) {
            v1 = rowc(r1, c, rb);
        }
        if (ROWS > 2u) {
            v2 = rowc(r2, c, rb);
        }
        if (ROWS > 3u) {
            v3 = rowc(r3, c, rb);
        }
        let g = group(min((32u * c) / GS, ng - 1u), ng);
        let d = vec4<f32>(
            scaled(scale_f32(row0 * ng + g)),
            scaled(scale_f32(r1 * ng + g)),
            scaled(scale_f32(r2 * ng + g)),
            scaled(scale_f32(r3 * ng + g)),
        );
        let xi = 8u * c;
        let x0 = xv[xi];
        let x1 = xv[xi + 1u];
        let x2 = xv[xi + 2u];
        let x3 = xv[xi + 3u];
        let x4_ = xv[xi + 4u];
        let x5 = xv[xi + 5u];
        let x6 = xv[xi + 6u];
        let x7 = xv[xi + 7u];
        var f = fdot8x4(vec4<u32>(v0.x, v1.x, v2.x, v3.x), x0, x1);
        f += fdot8x4(vec4<u32>(v0.y, v1.y, v2.y, v3.y), x2, x3);
        f += fdot8x4(vec4<u32>(v0.z, v1.z, v2.z, v3.z), x4_, x5);
        f += fdot8x4(vec4<u32>(v0.w, v1.w, v2.w, v3.w), x6, x7);
        // fnib gave (q - 8) / 16.
        a += d * (16.0 * f);
    }
    return a;
}

fn partial(row0: u32, lid: u32) {
    if (S == 1u && GS % 32u == 0u) {
        let a = partial1(row0, lid);
        acc[0] = a.x;
        acc[1] = a.y;
        acc[2] = a.z;
        acc[3] = a.w;
        return;
    }
    partial_s(row0, lid);
}

