// tessera WGSL GEMV, family float: f32 (KIND 0), f16 (KIND 1), bf16 (KIND 2).
// y[s, o] = sum_i w[o, i] * x[s, i], weights little-endian, row-major, no scales
// (crates/quant-core/src/codecs/float.rs). binary16 is decoded exactly by bit arithmetic,
// bfloat16 by a shift. Each invocation takes 16-byte chunks c = lid, lid + 128, ... of the
// ROWS rows.

// ---- family: gemv_float ----
override KIND: u32 = 0u;

fn float_chunk(i0: u32, v: vec4<u32>) {
    if (KIND == 0u) {
        tdot(i0, bitcast<vec4<f32>>(v));
    } else if (KIND == 1u) {
        tdot(i0, vec4<f32>(f16x2(v.x), f16x2(v.y)));
        tdot(i0 + 4u, vec4<f32>(f16x2(v.z), f16x2(v.w)));
    } else {
        let lo = vec4<u32>(v.x << 16u, v.x & 0xFFFF0000u, v.y << 16u, v.y & 0xFFFF0000u);
        let hi = vec4<u32>(v.z << 16u, v.z & 0xFFFF0000u, v.w << 16u, v.w & 0xFFFF0000u);
        tdot(i0, bitcast<vec4<f32>>(lo));
        tdot(i0 + 4u, bitcast<vec4<f32>>(hi));
    }
}

fn partial(row0: u32, lid: u32) {
    let rb = p.row_bytes;
    let nch = (rb + 15u) / 16u;
    let wpc = select(8u, 4u, KIND == 0u);
    for (var c = lid; c < nch; c += WG) {
        var v: array<vec4<u32>, 4>;
        for (var r = 0u; r < ROWS; r++) {
            let base = (row0 + r) * rb;
            if (row0 + r < p.o) {
                v[r] = load16(base + 16u * c, base + rb);
            }
        }
        for (var r = 0u; r < ROWS; r++) {
            if (row0 + r < p.o) {
                float_chunk(c * wpc, v[r]);
                fold(r, 1.0);
            }
        }
    }
}

// No S = 1 path of its own: the tail calls `partial` at every S.
fn fast1() -> bool {
    return false;
}

fn partial1(row0: u32, lid: u32) -> vec4<f32> {
    return vec4<f32>(0.0);
}

// ---- S > 1, 4 rows a workgroup: not in this family (the tails call `partial`). ----------

fn fastb() -> bool {
    return false;
}

fn partialb(row0: u32, lid: u32) -> AccB {
    var a: AccB;
    return a;
}
