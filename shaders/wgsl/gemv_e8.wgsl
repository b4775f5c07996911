// tessera WGSL GEMV, family e8: e8-lattice.
// 98-byte blocks of 256 weights: binary16 block scale d at [0, 2), then 32 little-endian
// 24-bit codes; code k covers weights 8k .. 8k + 7: bit 0 the coset s, bits 1 + 3j the u_j
// (k_j = u_j - 4, j < 7), bits 22..23 m (k_7 = 2m - 4 + (sum u_j) % 2); v_j = k_j + s/2;
// w = (d * t) * v_j with t the f32 tensor scale in the sidecar
// (crates/quant-core/src/codecs/e8.rs, docs/FORMATS.md). A work item is one code; each
// invocation takes codes j = lid, lid + 128, ... (block j / 32, code j % 32) of the rows.

// ---- family: gemv_e8 ----
fn partial(row0: u32, lid: u32) {
    let rb = p.row_bytes;
    let nb = rb / 98u;
    let ts = scale_f32(0u);
    for (var j = lid; j < 32u * nb; j += WG) {
        let b = j / 32u;
        let k = j % 32u;
        var code: array<u32, 4>;
        var hdr: array<u32, 4>;
        for (var r = 0u; r < ROWS; r++) {
            let base = (row0 + r) * rb;
            if (row0 + r < p.o) {
                code[r] = bytes4(base + 98u * b + 2u + 3u * k) & 0xFFFFFFu;
                hdr[r] = bytes4(base + 98u * group(b, nb)) & 0xFFFFu;
            }
        }
        let i0 = 256u * b + 8u * k;
        for (var r = 0u; r < ROWS; r++) {
            if (row0 + r < p.o) {
                let cw = code[r];
                let half = select(0.0, 0.5, (cw & 1u) != 0u);
                let ulo = vec4<u32>(cw >> 1u, cw >> 4u, cw >> 7u, cw >> 10u) & vec4<u32>(7u);
                let uhi = vec4<u32>(cw >> 13u, cw >> 16u, cw >> 19u, 0u) & vec4<u32>(7u);
                let usum = ulo.x + ulo.y + ulo.z + ulo.w + uhi.x + uhi.y + uhi.z;
                let k7 = 2u * ((cw >> 22u) & 3u) + (usum & 1u);
                let vlo = u2f(ulo) - vec4<f32>(4.0 - half);
                let vhi = u2f(vec4<u32>(uhi.xyz, k7)) - vec4<f32>(4.0 - half);
                tdot(i0, vlo);
                tdot(i0 + 4u, vhi);
                fold(r, scaled(f16_lo(hdr[r])) * ts);
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
