//! Golden digests of the GGML reference-quantizer ports (q2_k ... q6_k, iq4_nl, iq4_xs), and
//! of every GGML block format's encode and decode.
//!
//! The encoders reproduce llama.cpp's `quantize_row_*_ref` choice for choice, and their
//! search loops have been restructured for speed (candidates evaluated in SIMD lanes). The
//! digests below were taken from the straightforward scalar ports before that rewrite, so
//! any change to a single output byte, on Gaussian rows, outlier rows or the awkward blocks
//! of [`awkward_rows`], fails here. gguf-py has no quantizer for these types, so this is the
//! byte-level pin; `codecs::ggml_common`'s unit tests compare the helpers one by one.

use quant_core::testdata::{Rng, weights};
use quant_core::{EncodeOptions, Format, decode, encode};

const COLS: usize = 1024;

/// FNV-1a over the encoded weight and scale bytes.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Rows of blocks that exercise the corners of the searches: zeros, constants, one spike,
/// all-positive and all-negative blocks (the affine min clamps to 0), integer-valued blocks
/// (ties in the rounding), tiny and large magnitudes, and values near the iq4 table points.
fn awkward_rows(rng: &mut Rng) -> Vec<f32> {
    let mut rows: Vec<Vec<f32>> = Vec::new();
    rows.push(vec![0.0; COLS]);
    rows.push(vec![0.75; COLS]);
    rows.push(vec![-3.0; COLS]);
    let mut spike = vec![0.0; COLS];
    for (k, v) in spike.iter_mut().enumerate() {
        if k % 97 == 5 {
            *v = if k % 2 == 0 { 2.5 } else { -1.25 };
        }
    }
    rows.push(spike);
    rows.push((0..COLS).map(|_| rng.normal().abs() + 0.1).collect());
    rows.push((0..COLS).map(|_| -rng.normal().abs() - 0.1).collect());
    rows.push((0..COLS).map(|_| (rng.below(9) as f32) - 4.0).collect());
    rows.push((0..COLS).map(|_| (rng.below(33) as f32) - 16.0).collect());
    rows.push((0..COLS).map(|_| rng.normal() * 1e-12).collect());
    rows.push((0..COLS).map(|_| rng.normal() * 1e-20).collect());
    rows.push((0..COLS).map(|_| rng.normal() * 300.0).collect());
    let table = [
        -127.0f32, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0,
        69.0, 89.0, 113.0,
    ];
    rows.push((0..COLS).map(|_| table[rng.below(16)] / 127.0).collect());
    rows.push(
        (0..COLS)
            .map(|k| {
                // Mid-points between table values; with -127 as the block's extreme,
                // iq4_nl's scale is exactly 1, so these are exact nearest-value ties.
                let i = rng.below(15);
                let m = 0.5 * (table[i] + table[i + 1]);
                if k % 32 == 0 { -127.0 } else { m }
            })
            .collect(),
    );
    // Mixed: each 32-weight group a different scale, some groups zero.
    rows.push(
        (0..COLS)
            .map(|k| {
                let g = k / 32;
                if g % 5 == 2 {
                    0.0
                } else {
                    rng.normal() * (1.0 + g as f32).powi(2) * 1e-3
                }
            })
            .collect(),
    );
    rows.push(
        (0..COLS)
            .map(|k| {
                if k % 16 == 3 {
                    1.0
                } else {
                    1e-7 * rng.normal()
                }
            })
            .collect(),
    );
    rows.concat()
}

/// (digest of the encoded bytes, digest of the f32 decode of those bytes).
fn digests(format: &str) -> (u64, u64) {
    let f: Format = format.parse().expect("format name");
    let mut rng = Rng::new(0x0601_DE17);
    let mut w = weights(&mut rng, 64, COLS);
    w.extend(awkward_rows(&mut rng));
    let rows = w.len() / COLS;
    let t = encode(f, rows, COLS, &w, &EncodeOptions::default()).expect("encode");
    let v = t.view();
    let y: Vec<u8> = decode(&v)
        .expect("decode")
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    (fnv1a(&[v.weights(), v.scales()]), fnv1a(&[&y]))
}

fn digest(format: &str) -> u64 {
    digests(format).0
}

#[test]
fn ggml_encoders_match_the_scalar_reference_ports() {
    let golden: [(&str, u64); 7] = [
        ("q2_k", 0xf2e6_ef22_4de8_defb),
        ("q3_k", 0x6e97_fc9d_4da4_7775),
        ("q4_k", 0x7388_8ce4_d91e_6bf7),
        ("q5_k", 0xdcb9_e159_cc52_fe9f),
        ("q6_k", 0xedf0_2837_8dea_f974),
        ("iq4_nl", 0xa84f_0be1_5f50_8f9d),
        ("iq4_xs", 0xaab7_7211_4c99_894d),
    ];
    let mut bad = Vec::new();
    for (name, want) in golden {
        let got = digest(name);
        if got != want {
            bad.push(format!("{name}: 0x{got:016x}"));
        }
    }
    assert!(bad.is_empty(), "encoded bytes changed for {bad:?}");
}

/// Every GGML block format's encode and f32 decode, pinned: the decoders are GGML's
/// `dequantize_row_*` operation for operation, so a changed bit of output is a bug (the
/// kernel-vs-oracle tests cannot see a decode bug, since the oracle decodes the same way).
#[test]
fn ggml_block_formats_encode_and_decode_as_pinned() {
    let golden: [(&str, u64, u64); 13] = [
        ("q4_0", 0x13c1_7deb_0bb8_1ee4, 0x6c15_9381_2b20_db36),
        ("q4_1", 0xdd87_a2be_058c_63ae, 0x8b56_6575_f992_bdb7),
        ("q5_0", 0x216c_cbfd_a2ce_ae0b, 0x2331_ef01_77fd_7fc3),
        ("q5_1", 0x56ad_3de8_da3a_e291, 0x1426_ef92_372d_df41),
        ("q8_0", 0xf2d0_747d_3bb6_9130, 0xaa09_e5b4_402a_8a1f),
        ("q2_k", 0xf2e6_ef22_4de8_defb, 0xdc51_e417_e220_dcdc),
        ("q3_k", 0x6e97_fc9d_4da4_7775, 0xc941_9cb7_981b_91fb),
        ("q4_k", 0x7388_8ce4_d91e_6bf7, 0xd0fc_5b6d_c777_382b),
        ("q5_k", 0xdcb9_e159_cc52_fe9f, 0x7ae9_f660_bdbc_db3a),
        ("q6_k", 0xedf0_2837_8dea_f974, 0xadf4_1b84_7ed1_f26a),
        ("iq4_nl", 0xa84f_0be1_5f50_8f9d, 0x1c37_3e85_8d92_c41a),
        ("iq4_xs", 0xaab7_7211_4c99_894d, 0x3928_4122_e2ac_6c08),
        ("gguf-mxfp4", 0x4891_7e01_d741_b1b0, 0xe0de_7d58_c95b_05ba),
    ];
    let mut bad = Vec::new();
    for (name, enc, dec) in golden {
        let (e, d) = digests(name);
        if (e, d) != (enc, dec) {
            bad.push(format!("{name}: 0x{e:016x}, 0x{d:016x}"));
        }
    }
    assert!(
        bad.is_empty(),
        "encode or decode output changed for {bad:?}"
    );
}
