// tessera WGSL GEMV, family int3: int3-g64.
// 8 codes per 3 bytes: weights 8k .. 8k + 7 form the little-endian 24-bit word at bytes
// 3k .. 3k + 2, weight 8k + j in bits 3j .. 3j + 2, stored q + 4; one f32 scale per 64
// weights along I, scale[o * ceil(I/64) + i/64] (crates/quant-core/src/codecs/int_group.rs).
// A work item is one group (24 bytes, 64 weights); each invocation takes groups
// g = lid, lid + 128, ... of the ROWS rows.

// ---- family: gemv_int3 ----
fn partial(row0: u32, lid: u32) {
    let rb = p.row_bytes;
    let ng = p.sc_row;
    for (var g = lid; g < ng; g += WG) {
        var v: array<array<u32, 7>, 4>;
        for (var r = 0u; r < ROWS; r++) {
            let base = (row0 + r) * rb;
            if (row0 + r < p.o) {
                let b = base + 24u * g;
                for (var k = 0u; k < 6u; k++) {
                    v[r][k] = keep_before(bytes4(b + 4u * k), b + 4u * k, base + rb);
                }
            }
        }
        let i0 = 64u * g;
        for (var r = 0u; r < ROWS; r++) {
            let row = row0 + r;
            if (row < p.o) {
                for (var m = 0u; m < 8u; m++) {
                    let k = (24u * m) / 32u;
                    let sh = (24u * m) % 32u;
                    var cw = v[r][k] >> sh;
                    if (sh > 8u) {
                        cw |= v[r][k + 1u] << (32u - sh);
                    }
                    let lo = vec4<u32>(cw, cw >> 3u, cw >> 6u, cw >> 9u) & vec4<u32>(7u);
                    let hi = vec4<u32>(cw >> 12u, cw >> 15u, cw >> 18u, cw >> 21u) & vec4<u32>(7u);
                    tdot(i0 + 8u * m, u2f(lo) - vec4<f32>(4.0));
                    tdot(i0 + 8u * m + 4u, u2f(hi) - vec4<f32>(4.0));
                }
                fold(r, scaled(scale_f32(row * ng + group(g, ng))));
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
