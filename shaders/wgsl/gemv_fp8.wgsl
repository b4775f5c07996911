// tessera WGSL GEMV, family fp8: fp8-e4m3-b128 (UE8M0 0: f32 tile scales) and
// fp8-e4m3-b128-ue8m0 (UE8M0 1: one UE8M0 byte per tile).
// O * I raw OCP E4M3-FN bytes; one scale per 128x128 tile, tiles row-major over
// [ceil(O/128), ceil(I/128)]: scale[(o / 128) * ceil(I / 128) + i / 128]; w = e4m3(b) * scale
// (crates/quant-core/src/codecs/fp8.rs, tables.rs). E4M3 is decoded by bit arithmetic
// (exact, subnormals included); a NaN byte (0x7F / 0xFF) poisons its whole row, as in the
// oracle. Each invocation takes 16-byte chunks (16 weights, inside one tile) c = lid,
// lid + 128, ... of the ROWS rows.

// ---- family: gemv_fp8 ----
override UE8M0: u32 = 0u;

// Any S (S = 1 takes `partial1`).
fn partial_s(row0: u32, lid: u32) {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let tpr = p.sc_row;
    var nan: array<u32, 4>;
    for (var c = lid; c < nch; c += WG) {
        var v: array<vec4<u32>, 4>;
        for (var r = 0u; r < ROWS; r++) {
            let base = (row0 + r) * rb;
            if (row0 + r < p.o) {
                v[r] = load16(base + 16u * c, base + rb);
            }
        }
        let i0 = 16u * c;
        for (var r = 0u; r < ROWS; r++) {
            let row = row0 + r;
            if (row < p.o) {
                for (var k = 0u; k < 4u; k++) {
                    let w = v[r][k];
                    // A byte is NaN iff its low 7 bits are 0x7F: + 1 then carries into its
                    // bit 7 only.
                    nan[r] |= ((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
                    tdot(i0 + 4u * k, e4m3v(w));
                }
                let tk = (row / 128u) * tpr + group(i0 / 128u, tpr);
                var d: f32;
                if (UE8M0 == 1u) {
                    d = ue8m0(scale_byte(tk));
                } else {
                    d = scale_f32(tk);
                }
                fold(r, scaled(d));
            }
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        if (nan[r] != 0u) {
            poison(r);
        }
    }
}

// ---- S = 1 (issue #5's speed case) -------------------------------------------------------
// Every invocation reads 16-byte chunk c of all ROWS rows (ROWS independent loads in
// flight), reads the activations of chunk c once for all of them, and keeps one partial per
// row in a vector component: no function or private arrays in the loop, nothing to spill.
// Rows past O (a partial last workgroup) re-read row O - 1; the tail never stores them.
// The workgroup's rows (row0 a multiple of ROWS <= 4) lie in one 128-row band: one tile
// scale per chunk for all of them.

// Chunk c of row `row` (rows of rb bytes): one 16-byte load when rows are 16-byte aligned.
fn rowc(row: u32, c: u32, rb: u32) -> vec4<u32> {
    if ((rb & 15u) == 0u) {
        return wq[row * (rb >> 4u) + c];
    }
    let base = row * rb;
    return load16(base + 16u * c, base + rb);
}

// The 4 E4M3 bytes of w, each times 2^8, exact when no byte has exponent 0: the 7 bits
// eeee mmm go to bits 20..26 of an f32 whose exponent field is 128 + eeee, i.e.
// 2^(e + 1) (1 + m / 8) = 2^8 times the E4M3 value; the sign bit goes to bit 31.
// No conversion instruction and no per-weight subtraction.
fn e4m3_fast(w: u32) -> vec4<f32> {
    let m = vec4<u32>(w << 20u, w << 12u, w << 4u, w >> 4u) & vec4<u32>(0x07F00000u);
    let sg = vec4<u32>(w << 24u, w << 16u, w << 8u, w) & vec4<u32>(0x80000000u);
    return bitcast<vec4<f32>>(m | sg | vec4<u32>(0x40000000u));
}

// Bit 7 of a byte of the result: that byte of w is special for e4m3_fast, i.e. its low 7
// bits t are < 8 (exponent 0: zero or subnormal, whose value is not 2^(e - 7) (1 + m / 8))
// or 0x7F (NaN). t + 0x78 reaches bit 7 iff t >= 8; t + 1 reaches it iff t == 0x7F.
fn e4m3_special(w: u32) -> u32 {
    let t = w & 0x7F7F7F7Fu;
    return (~(t + 0x78787878u) | (t + 0x01010101u)) & 0x80808080u;
}

// The 4 weights of w times 2^8, exactly, and whether one is NaN: a word with a special
// byte (rare) takes the general decoder.
fn e4m3_w(w: u32, nan: ptr<function, u32>) -> vec4<f32> {
    if (e4m3_special(w) != 0u) {
        *nan |= ((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
        return e4m3v(w) * 256.0;
    }
    return e4m3_fast(w);
}

// q . x of word k of the 4 rows (w = that word of rows 0..3) against x[i .. i + 4); NaN
// codes are flagged in the rows' `nan` components.
fn f8dotx4(w: vec4<u32>, xk: vec4<f32>, nan: ptr<function, vec4<u32>>) -> vec4<f32> {
    var n0 = 0u;
    var n1 = 0u;
    var n2 = 0u;
    var n3 = 0u;
    let r = vec4<f32>(
        dot(e4m3_w(w.x, &n0), xk),
        dot(e4m3_w(w.y, &n1), xk),
        dot(e4m3_w(w.z, &n2), xk),
        dot(e4m3_w(w.w, &n3), xk),
    );
    *nan |= vec4<u32>(n0, n1, n2, n3);
    return r;
}

fn partial1(row0: u32, lid: u32) -> vec4<f32> {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let tpr = p.sc_row;
    let last = p.o - 1u;
    let r1 = min(row0 + 1u, last);
    let r2 = min(row0 + 2u, last);
    let r3 = min(row0 + 3u, last);
    let band = (row0 / 128u) * tpr;
    var a = vec4<f32>(0.0);
    var nan = vec4<u32>(0u);
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
        let tk = band + group((16u * c) / 128u, tpr);
        var d: f32;
        if (UE8M0 == 1u) {
            d = ue8m0(scale_byte(tk));
        } else {
            d = scale_f32(tk);
        }
        let xi = 4u * c;
        var f = f8dotx4(vec4<u32>(v0.x, v1.x, v2.x, v3.x), xv[xi], &nan);
        f += f8dotx4(vec4<u32>(v0.y, v1.y, v2.y, v3.y), xv[xi + 1u], &nan);
        f += f8dotx4(vec4<u32>(v0.z, v1.z, v2.z, v3.z), xv[xi + 2u], &nan);
        f += f8dotx4(vec4<u32>(v0.w, v1.w, v2.w, v3.w), xv[xi + 3u], &nan);
        a += scaled(d) * f;
    }
    // The weights were decoded times 2^8.
    let qnan = bitcast<f32>(0x7FC00000u + p.reserved0 * 0u);
    return select(a * 0.00390625, vec4<f32>(qnan), nan != vec4<u32>(0u));
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

