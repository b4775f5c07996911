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

