// tessera WGSL GEMV, family ggml_q: GGML's 32-weight blocks, byte-identical to llama.cpp:
// KIND 0 q8_0 (fp16 d, 32 int8; q * d), 1 q4_0 (fp16 d, 16 B nibbles; (q - 8) * d),
// 2 q4_1 (fp16 d, fp16 m, nibbles; q * d + m), 3 q5_0 (fp16 d, u32 qh, nibbles;
// (q - 16) * d), 4 q5_1 (fp16 d, fp16 m, u32 qh, nibbles; q * d + m), 5 iq4_nl (fp16 d,
// nibbles; d * kvalues_iq4nl[q]), 6 gguf-mxfp4 (E8M0 byte e, nibbles;
// kvalues_mxfp4[q] * 2^(e - 128)). Nibbles: weight j < 16 is the low nibble of qs[j], weight
// j + 16 the high nibble; q5's fifth bit of weight j is bit j of qh
// (crates/quant-core/src/codecs/ggml_legacy.rs, ggml_iq4.rs, ggml_mxfp4.rs). Blocks are only
// byte-aligned, so words are read at any byte offset. The block size is
// row_bytes / (I / 32). A work item is one block; each invocation takes blocks
// b = lid, lid + 128, ... of the ROWS rows.

// ---- family: gemv_ggml_q ----
override KIND: u32 = 0u;

// GGML's kvalues_iq4nl.
const KV_IQ4NL = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn iq4nl(n: vec4<u32>) -> vec4<f32> {
    var kv = KV_IQ4NL;
    return vec4<f32>(kv[n.x], kv[n.y], kv[n.z], kv[n.w]);
}

// Where the codes start within the block.
fn qs_offset() -> u32 {
    switch KIND {
        case 0u, 1u, 5u: {
            return 2u;
        }
        case 2u, 3u: {
            return 4u + 2u * (KIND - 2u);
        }
        case 4u: {
            return 8u;
        }
        default: {
            return 1u;
        }
    }
}

fn q_block(r: u32, base: u32, hbase: u32, i0: u32) {
    let hdr = bytes4(hbase);
    if (KIND == 0u) {
        for (var k = 0u; k < 8u; k++) {
            let w = bytes4(base + 2u + 4u * k);
            tdot(i0 + 4u * k, u2f(bytes_of(w ^ 0x80808080u)) - vec4<f32>(128.0));
        }
        fold(r, scaled(f16_lo(hdr)));
        return;
    }
    let qs = base + qs_offset();
    var qh = 0u;
    if (KIND == 3u) {
        qh = bytes4(base + 2u);
    } else if (KIND == 4u) {
        qh = bytes4(base + 4u);
    }
    for (var k = 0u; k < 4u; k++) {
        let w = bytes4(qs + 4u * k);
        for (var hi = 0u; hi < 2u; hi++) {
            var n = ggml_nib(w, hi == 1u);
            let j = 16u * hi + 4u * k;
            let i = i0 + j;
            if (KIND == 3u || KIND == 4u) {
                n |= ((vec4<u32>(qh) >> vec4<u32>(j, j + 1u, j + 2u, j + 3u)) & vec4<u32>(1u)) << vec4<u32>(4u);
            }
            switch KIND {
                case 1u: {
                    tdot(i, u2f(n) - vec4<f32>(8.0));
                }
                case 3u: {
                    tdot(i, u2f(n) - vec4<f32>(16.0));
                }
                case 2u, 4u: {
                    tdot_sum(i, u2f(n));
                }
                case 5u: {
                    tdot(i, iq4nl(n));
                }
                default: {
                    // kvalues_mxfp4 = 2 * E2M1 (exact).
                    tdot(i, e2m1v(n) * 2.0);
                }
            }
        }
    }
    switch KIND {
        case 2u, 4u: {
            let dm = f16x2(hdr);
            fold_affine(r, scaled(dm.x), dm.y);
        }
        case 6u: {
            // GGML_E8M0_TO_FP32_HALF(e) = 2^(e - 128), subnormal for e < 2; 0xFF is 2^127
            // (GGML reads no NaN here).
            let e = hdr & 255u;
            var d = bitcast<f32>((e - 1u) << 23u);
            if (e < 2u) {
                d = bitcast<f32>(0x00200000u << e);
            }
            fold(r, scaled(d));
        }
        default: {
            fold(r, scaled(f16_lo(hdr)));
        }
    }
}

fn partial(row0: u32, lid: u32) {
    let rb = p.row_bytes;
    let nb = p.i / 32u;
    let bb = rb / nb;
    for (var b = lid; b < nb; b += WG) {
        for (var r = 0u; r < ROWS; r++) {
            if (row0 + r < p.o) {
                let row = (row0 + r) * rb;
                q_block(r, row + bb * b, row + bb * group(b, nb), 32u * b);
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
