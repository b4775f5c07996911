//! The row concatenation behind the resident path's fused q/k/v and gate/up GEMVs
//! (`engine::fuse`): for every registry format, concatenating the parts' encodings is
//! admitted exactly when it is byte for byte the encoding of the stacked matrix, and
//! refused (typed error) otherwise.

use engine::fuse::{concat_rows, refusal};
use quant_core::testdata::{Rng, weights};
use quant_core::{EncodeOptions, EncodedTensor, FORMATS, Format, QTensor, ScaleLayout, encode};

/// I for every format: a whole number of the 256-weight blocks, tiles and groups.
const COLS: usize = 256;
/// Part row counts: q/k/v-like (a long part, two short ones), all on 128-row tile bands.
const PARTS: [usize; 3] = [256, 128, 128];

fn parts_and_stacked(format: Format, rows: &[usize], seed: u64) -> (Vec<EncodedTensor>, Vec<f32>) {
    let mut rng = Rng::new(seed);
    let opts = EncodeOptions {
        rotation_seed: 0x5eed_0001,
        ..Default::default()
    };
    let mut stacked = Vec::new();
    let mut parts = Vec::new();
    for (k, &r) in rows.iter().enumerate() {
        let mut w = weights(&mut rng, r, COLS);
        // Parts of different magnitude: a tensor-wide or band-wide scale of the stacked
        // matrix then differs from each part's own.
        for v in &mut w {
            *v *= (k + 1) as f32 * 3.0;
        }
        parts.push(encode(format, r, COLS, &w, &opts).unwrap());
        stacked.extend(w);
    }
    (parts, stacked)
}

fn views(parts: &[EncodedTensor]) -> Vec<QTensor<'_>> {
    parts.iter().map(EncodedTensor::view).collect()
}

#[test]
fn admitted_concatenations_equal_the_stacked_encoding_byte_for_byte() {
    let opts = EncodeOptions {
        rotation_seed: 0x5eed_0001,
        ..Default::default()
    };
    let (mut admitted, mut refused) = (Vec::new(), Vec::new());
    for spec in FORMATS {
        let f = spec.format;
        let (parts, stacked) = parts_and_stacked(f, &PARTS, 7);
        let total: usize = PARTS.iter().sum();
        let whole = encode(f, total, COLS, &stacked, &opts).unwrap();
        let cat = concat_rows(&views(&parts));
        match refusal(f, &PARTS) {
            None => {
                let cat = cat.unwrap_or_else(|e| panic!("{f}: admitted but failed: {e}"));
                assert_eq!(cat.rows, total, "{f}");
                assert!(cat.weights == whole.weights, "{f}: weight bytes differ");
                assert!(cat.scales == whole.scales, "{f}: scale bytes differ");
                assert_eq!(cat, whole, "{f}");
                admitted.push(f);
            }
            Some(why) => {
                assert!(cat.is_err(), "{f}: refused ({why}) but concatenated");
                // The refusal is needed: here the bytes really differ.
                let mut w = Vec::new();
                let mut s = Vec::new();
                for p in &parts {
                    w.extend_from_slice(&p.weights);
                    s.extend_from_slice(&p.scales);
                }
                assert!(
                    w != whole.weights || s != whole.scales,
                    "{f}: refused, yet the naive concatenation equals the stacked encoding"
                );
                refused.push(f);
            }
        }
    }
    eprintln!("admitted: {admitted:?}\nrefused: {refused:?}");
    // The registry decides; these are the cases the rule must get right.
    for f in [
        Format::Int4G64,
        Format::Int8Row,
        Format::Fp8E4m3B128,
        Format::Q4K,
        Format::Mq4G256V2,
    ] {
        assert!(admitted.contains(&f), "{f} should be admitted");
    }
    assert_eq!(refused, vec![Format::E8Lattice]);
}

#[test]
fn tile_formats_are_refused_when_a_cut_splits_a_band() {
    for spec in FORMATS {
        let ScaleLayout::PerTile { rows, .. } = spec.scales else {
            continue;
        };
        let f = spec.format;
        let bad = [rows as usize + 64, 64];
        assert!(refusal(f, &bad).is_some(), "{f}");
        let (parts, _) = parts_and_stacked(f, &bad, 9);
        assert!(concat_rows(&views(&parts)).is_err(), "{f}");
        // The last part may end inside a band: the stacked tensor's last band is partial too.
        let ok = [rows as usize, 64];
        assert!(refusal(f, &ok).is_none(), "{f}");
    }
}

#[test]
fn mismatched_parts_are_refused() {
    let (a, _) = parts_and_stacked(Format::Int4G64, &[128], 1);
    let (b, _) = parts_and_stacked(Format::Int4G128, &[128], 2);
    let e = concat_rows(&[a[0].view(), b[0].view()]).unwrap_err();
    assert!(e.to_string().contains("one format"), "{e}");
    let mut rng = Rng::new(3);
    let other_i = encode(
        Format::Int4G64,
        64,
        512,
        &weights(&mut rng, 64, 512),
        &EncodeOptions::default(),
    )
    .unwrap();
    assert!(concat_rows(&[a[0].view(), other_i.view()]).is_err());
    let mut seeded = parts_and_stacked(Format::Mq4G256V2, &[128, 128], 4).0;
    seeded[1].rotation_seed ^= 1;
    let e = concat_rows(&views(&seeded)).unwrap_err();
    assert!(e.to_string().contains("rotation seed"), "{e}");
    assert!(concat_rows(&[]).is_err());
}
