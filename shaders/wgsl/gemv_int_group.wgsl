// tessera WGSL GEMV, family int_group: int4-g{GS}, GS in {16, 32, 48, 64, 96, 128, 192, 256}.
// int4-row's nibbles (q + 8, weight 2b the low nibble of byte b) with one f32 scale per GS
// weights along I: scale[o * ceil(I / GS) + i / GS] (crates/quant-core/src/codecs/int_group.rs).
// The scale is folded into the sum once per group part, never once per row (seed 000).
// Each invocation takes 16-byte chunks (32 weights) c = lid, lid + WG, ... of the ROWS rows;
// GS is a multiple of 16, so each 16-weight half of a chunk lies in one group.

// ---- family: gemv_int_group ----
override GS: u32 = 64u;

// Any S (the tail takes `partial1` instead where `fast1()`).
fn partial(row0: u32, lid: u32) {
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
// The tail takes `partial1` instead of `partial` when `fast1()` (S = 1, GS a multiple of
// 32, so each 16-byte chunk of 32 weights lies in one group: one scale per chunk and row).
// Every invocation reads chunk c of all ROWS rows (ROWS independent loads in flight), reads
// the chunk's activations once for all of them, and keeps its partials in vectors: no
// function or private arrays anywhere. Rows past O (a partial last workgroup) re-read row
// O - 1; the tail never stores them.

fn fast1() -> bool {
    return GS % 32u == 0u;
}

// Packed int8 activations (p.reserved0 = 1 or 2, prelude `xq`, `q4i8`): each chunk's integer sums
// times d / 256 and its group scale; a block the host flagged takes the f32 path.
// Chunk c of the 4 rows, their group scales and block c's planes.
struct Ld1 {
    v: Rows4,
    sg: vec4<f32>,
    x: XQ,
}

fn load1_i8(rr: vec4<u32>, c: u32, rb: u32, ng: u32) -> Ld1 {
    let g = group(min((32u * c) / GS, ng - 1u), ng);
    let sg = vec4<f32>(
        scaled(scale_f32(rr.x * ng + g)),
        scaled(scale_f32(rr.y * ng + g)),
        scaled(scale_f32(rr.z * ng + g)),
        scaled(scale_f32(rr.w * ng + g)),
    );
    return Ld1(rows4_per_row(rr, c, rb), sg, xq(c));
}

fn step1_i8(l: Ld1, c: u32) -> vec4<f32> {
    let v = l.v;
    let x = l.x;
    if ((x.h.x & 0x7F800000u) != 0x7F800000u) {
        let dh = bitcast<f32>(x.h.x);
        return (dh * l.sg) * vec4<f32>(q4i8(v.v0, x), q4i8(v.v1, x), q4i8(v.v2, x), q4i8(v.v3, x));
    }
    let xf = x8(c);
    return l.sg * vec4<f32>(
        dot(q4row(v.v0, xf), NIB_POS),
        dot(q4row(v.v1, xf), NIB_POS),
        dot(q4row(v.v2, xf), NIB_POS),
        dot(q4row(v.v3, xf), NIB_POS),
    );
}

// The chunk loop (one an iteration, as gemv_int_row's `partial1_i8`).
fn partial1_i8(rr: vec4<u32>, lid: u32) -> vec4<f32> {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let ng = p.sc_row;
    var a = vec4<f32>(0.0);
    for (var c = lid; c < nch; c += WG) {
        a += step1_i8(load1_i8(rr, c, rb, ng), c);
    }
    return a;
}

fn partial1(row0: u32, lid: u32) -> vec4<f32> {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let ng = p.sc_row;
    let last = p.o - 1u;
    let rr = vec4<u32>(row0, min(row0 + 1u, last), min(row0 + 2u, last), min(row0 + 3u, last));
    if (p.reserved0 != 0u) {
        return partial1_i8(rr, lid);
    }
    // Per row and nibble position (q4row), each chunk's sum times its group scale.
    var p0 = vec4<f32>(0.0);
    var p1 = vec4<f32>(0.0);
    var p2 = vec4<f32>(0.0);
    var p3 = vec4<f32>(0.0);
    for (var c = lid; c < nch; c += WG) {
        let v = rows4_per_row(rr, c, rb);
        let g = group(min((32u * c) / GS, ng - 1u), ng);
        let x = x8(c);
        p0 += scaled(scale_f32(rr.x * ng + g)) * q4row(v.v0, x);
        p1 += scaled(scale_f32(rr.y * ng + g)) * q4row(v.v1, x);
        p2 += scaled(scale_f32(rr.z * ng + g)) * q4row(v.v2, x);
        p3 += scaled(scale_f32(rr.w * ng + g)) * q4row(v.v3, x);
    }
    return vec4<f32>(dot(p0, NIB_POS), dot(p1, NIB_POS), dot(p2, NIB_POS), dot(p3, NIB_POS));
}

// ---- S > 1, 4 rows a workgroup (prelude: `AccB`, `accb`) ----------------------------------
// The tails take `partialb` instead of `partial` when S > 1, ROWS = 4 and `fastb()` (GS a
// multiple of 32: one group scale per chunk and row, folded into the decoded weights): each
// 4-weight slice of chunk c is decoded once for the 4 rows and each activation vector is
// read once for all of them.

fn fastb() -> bool {
    return GS % 32u == 0u;
}

fn partialb(row0: u32, lid: u32) -> AccB {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let ng = p.sc_row;
    let rr = rows_b(row0);
    var a: AccB;
    for (var c = lid; c < nch; c += WG) {
        let v = rows4_per_row(rr, c, rb);
        let g = group(min((32u * c) / GS, ng - 1u), ng);
        let sg = vec4<f32>(
            scaled(scale_f32(rr.x * ng + g)),
            scaled(scale_f32(rr.y * ng + g)),
            scaled(scale_f32(rr.z * ng + g)),
            scaled(scale_f32(rr.w * ng + g)),
        );
        let o = vec4<f32>(8.0);
        for (var k = 0u; k < 4u; k++) {
            let w = vec4<u32>(v.v0[k], v.v1[k], v.v2[k], v.v3[k]);
            let i = 32u * c + 8u * k;
            accb(&a, Q4(sg.x * (u2f(nibbles_lo(w.x)) - o), sg.y * (u2f(nibbles_lo(w.y)) - o), sg.z * (u2f(nibbles_lo(w.z)) - o), sg.w * (u2f(nibbles_lo(w.w)) - o)), i);
            accb(&a, Q4(sg.x * (u2f(nibbles_hi(w.x)) - o), sg.y * (u2f(nibbles_hi(w.y)) - o), sg.z * (u2f(nibbles_hi(w.z)) - o), sg.w * (u2f(nibbles_hi(w.w)) - o)), i + 4u);
        }
    }
    return a;
}
