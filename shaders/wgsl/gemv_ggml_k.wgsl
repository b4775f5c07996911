// tessera WGSL GEMV, family ggml_k: GGML's 256-weight super-blocks, byte-identical to
// llama.cpp's block_q*_K / block_iq4_xs (crates/quant-core/src/codecs/ggml_kquants.rs,
// kquant.rs, ggml_iq4.rs, whose module docs give every bit position used here):
// KIND 0 q2_k (scales[16], qs[64], d, dmin), 1 q3_k (hmask[32], qs[64], scales[12], d),
// 2 q4_k and mq4-k (d, dmin, scales[12], qs[128]; mq4-k's x is rotated by the host),
// 3 q5_k (d, dmin, scales[12], qh[32], qs[128]), 4 q6_k (ql[128], qh[64], scales[16] int8,
// d), 5 iq4_xs (d, scales_h, scales_l[4], qs[128]). The block size is row_bytes / (I / 256).
// A work item is a quarter of a block (64 weights, part c); each invocation takes items
// j = lid, lid + 128, ... (block j / 4, part j % 4) of the ROWS rows.

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
