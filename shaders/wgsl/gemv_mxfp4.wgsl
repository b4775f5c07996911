// tessera WGSL GEMV, family mxfp4: OCP MXFP4 (gpt-oss).
// Each row is ceil(I/32) blocks of 16 bytes of E2M1 nibbles (weight 32g + 2b the low nibble
// of byte b of block g); one UE8M0 byte per block in the sidecar, scale[o * ceil(I/32) + g];
// w = E2M1[nibble] * 2^(scale - 127) (crates/quant-core/src/codecs/mxfp4.rs). E2M1 is decoded
// by bit arithmetic. Each invocation takes blocks c = lid, lid + 128, ... of the ROWS rows.

// ---- family: gemv_mxfp4 ----
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
                for (var k = 0u; k < 4u; k++) {
                    let w = v[r][k];
                    tdot(i0 + 8u * k, e2m1v(nibbles_lo(w)));
                    tdot(i0 + 8u * k + 4u, e2m1v(nibbles_hi(w)));
                }
                fold(r, scaled(ue8m0(scale_byte(row * ng + group(c, ng)))));
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
