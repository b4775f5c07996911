// tessera WGSL GEMV, family int_row: int8-row (BITS 8), int4-row (BITS 4), int2-row (BITS 2).
// y[s, o] = d[o] * sum_i q[o, i] * x[s, i]; codes as docs/FORMATS.md and
// crates/quant-core/src/codecs/int_row.rs: int8 two's complement; int4 offset binary
// (q + 8), weight 2b the low nibble of byte b; int2 offset binary (q + 2), weight 4b + j in
// bits 2j .. 2j + 1 of byte b. One f32 scale per row in the sidecar.
// Work: each invocation takes 16-byte chunks c = lid, lid + 128, ... of the ROWS rows.

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

// Any S (S = 1 takes `partial1` when BITS is 8 or 4).
fn partial_s(row0: u32, lid: u32) {
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
// Every invocation reads 16-byte chunk c of all ROWS rows (ROWS independent loads in
// flight), reads the activations of chunk c once for all of them, and keeps one partial per
// row in a vector component: no function or private arrays in the loop, nothing to spill.
// Rows past O (a partial last workgroup) re-read row O - 1; the tail never stores them.

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

// q . x of int8 word k of the 4 rows against x[i .. i + 4).
fn i8dotx4(w: vec4<u32>, xk: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(dot(i8v(w.x), xk), dot(i8v(w.y), xk), dot(i8v(w.z), xk), dot(i8v(w.w), xk));
}

fn partial1(row0: u32, lid: u32) -> vec4<f32> {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
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
        if (BITS == 8u) {
            let xi = 4u * c;
            a += i8dotx4(vec4<u32>(v0.x, v1.x, v2.x, v3.x), xv[xi]);
            a += i8dotx4(vec4<u32>(v0.y, v1.y, v2.y, v3.y), xv[xi + 1u]);
            a += i8dotx4(vec4<u32>(v0.z, v1.z, v2.z, v3.z), xv[xi + 2u]);
            a += i8dotx4(vec4<u32>(v0.w, v1.w, v2.w, v3.w), xv[xi + 3u]);
        } else {
            let xi = 8u * c;
            let x0 = xv[xi];
            let x1 = xv[xi + 1u];
            let x2 = xv[xi + 2u];
            let x3 = xv[xi + 3u];
            let x4_ = xv[xi + 4u];
            let x5 = xv[xi + 5u];
            let x6 = xv[xi + 6u];
            let x7 = xv[xi + 7u];
            // Summed per chunk first (as gemv_int_group does): accumulating each word into
            // `a` directly ran 5x slower on NVIDIA's compiler with the subgroup tail.
            var f = fdot8x4(vec4<u32>(v0.x, v1.x, v2.x, v3.x), x0, x1);
            f += fdot8x4(vec4<u32>(v0.y, v1.y, v2.y, v3.y), x2, x3);
            f += fdot8x4(vec4<u32>(v0.z, v1.z, v2.z, v3.z), x4_, x5);
            f += fdot8x4(vec4<u32>(v0.w, v1.w, v2.w, v3.w), x6, x7);
            a += 16.0 * f;
        }
    }
    let d = vec4<f32>(
        scaled(scale_f32(row0)),
        scaled(scale_f32(r1)),
        scaled(scale_f32(r2)),
        scaled(scale_f32(r3)),
    );
    if (BITS == 8u) {
        return a * d;
    }
    return a * d;
}

fn partial(row0: u32, lid: u32) {
    if (S == 1u && BITS != 2u) {
        let a = partial1(row0, lid);
        acc[0] = a.x;
        acc[1] = a.y;
        acc[2] = a.z;
        acc[3] = a.w;
        return;
    }
    partial_s(row0, lid);
}

