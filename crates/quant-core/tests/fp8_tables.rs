//! The E4M3-FN, E2M1 and UE8M0 tables against an independent derivation from the OCP specs
//! (OFP8 for E4M3-FN, OCP Microscaling for E2M1 and E8M0), and the two encoders against a
//! brute-force nearest-value search over those derived tables.
//!
//! Nothing here calls the library to build its expectations: the values come from the
//! sign/exponent/mantissa formulas written out below, in f64.

use quant_core::tables::{E2M1, E4M3_FN, e2m1_encode, e4m3_encode, ue8m0};

/// OFP8 E4M3 ("FN": finite + NaN): bias 7; exponent field 0 is subnormal,
/// (-1)^s * 2^-6 * m/8; otherwise (-1)^s * 2^(e-7) * (1 + m/8); S.1111.111 is NaN and there
/// is no infinity. `None` for NaN.
fn ocp_e4m3(b: u8) -> Option<f64> {
    let s = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((b >> 3) & 0xF);
    let m = f64::from(b & 0x7);
    if e == 0xF && m == 7.0 {
        return None;
    }
    let mag = if e == 0 {
        2f64.powi(-6) * (m / 8.0)
    } else {
        2f64.powi(e - 7) * (1.0 + m / 8.0)
    };
    Some(s * mag)
}

/// OCP MX E2M1: bias 1; exponent field 0 is subnormal, (-1)^s * 2^0 * m/2; otherwise
/// (-1)^s * 2^(e-1) * (1 + m/2). No NaN, no infinity.
fn ocp_e2m1(c: u8) -> f64 {
    let s = if c & 0x8 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((c >> 1) & 0x3);
    let m = f64::from(c & 0x1);
    let mag = if e == 0 {
        m / 2.0
    } else {
        2f64.powi(e - 1) * (1.0 + m / 2.0)
    };
    s * mag
}

#[test]
fn e4m3_table_matches_the_ofp8_formula_bit_for_bit() {
    for b in 0..=255u8 {
        let got = E4M3_FN[b as usize];
        match ocp_e4m3(b) {
            None => {
                assert!(got.is_nan(), "code {b:#04x} must be NaN, table has {got}");
                assert_eq!(
                    got.is_sign_negative(),
                    b & 0x80 != 0,
                    "NaN sign of {b:#04x}"
                );
            }
            Some(want) => {
                // Exactly representable in f32, so the cast is exact and -0.0 keeps its sign.
                assert_eq!((want as f32) as f64, want);
                assert_eq!(
                    got.to_bits(),
                    (want as f32).to_bits(),
                    "code {b:#04x}: {got} != {want}"
                );
            }
        }
    }
}

#[test]
fn e4m3_landmarks() {
    let nans: Vec<usize> = (0..256).filter(|&b| E4M3_FN[b].is_nan()).collect();
    assert_eq!(nans, vec![0x7F, 0xFF], "NaN only at exp=0xF, mant=7");
    assert!(
        E4M3_FN.iter().all(|v| !v.is_infinite()),
        "E4M3-FN has no infinities"
    );
    let max = E4M3_FN
        .iter()
        .filter(|v| !v.is_nan())
        .fold(0f32, |m, v| m.max(v.abs()));
    assert_eq!(max, 448.0);
    assert_eq!(E4M3_FN[0x7E], 448.0);
    assert_eq!(E4M3_FN[0xFE], -448.0);
    assert_eq!(
        E4M3_FN[0x78], 256.0,
        "exp=0xF, mant=0 is a normal number, not infinity"
    );
    assert_eq!(E4M3_FN[0x00].to_bits(), 0f32.to_bits());
    assert_eq!(E4M3_FN[0x80].to_bits(), (-0f32).to_bits());
    assert_eq!(E4M3_FN[0x01] as f64, 2f64.powi(-9), "smallest subnormal");
    assert_eq!(
        E4M3_FN[0x07] as f64,
        0.875 * 2f64.powi(-6),
        "largest subnormal"
    );
    assert_eq!(E4M3_FN[0x08] as f64, 2f64.powi(-6), "smallest normal");
    assert_eq!(E4M3_FN[0x38], 1.0);
}

#[test]
fn e2m1_table_matches_the_mx_formula() {
    let want = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    for c in 0..16u8 {
        let derived = ocp_e2m1(c);
        assert_eq!(
            E2M1[c as usize].to_bits(),
            (derived as f32).to_bits(),
            "code {c:#x}"
        );
        let sign = if c & 8 != 0 { -1.0 } else { 1.0 };
        assert_eq!(derived, sign * want[(c & 7) as usize]);
    }
    assert!(E2M1[8].is_sign_negative() && E2M1[8] == 0.0, "0x8 is -0");
}

#[test]
fn ue8m0_values() {
    for e in 0..=254u8 {
        assert_eq!(ue8m0(e) as f64, 2f64.powi(i32::from(e) - 127), "byte {e}");
    }
    assert!(ue8m0(255).is_nan());
    assert_eq!(ue8m0(127), 1.0);
    assert_eq!(ue8m0(128), 2.0);
    assert_eq!(ue8m0(126), 0.5);
    assert_eq!(
        ue8m0(1),
        f32::MIN_POSITIVE,
        "2^-126, the smallest normal f32"
    );
    assert!(
        ue8m0(0).is_subnormal() && ue8m0(0) * 2.0 == f32::MIN_POSITIVE,
        "2^-127"
    );
    assert_eq!(ue8m0(254), 2f32.powi(127));
}

/// Nearest code among `values` (indexed by code, magnitudes of the positive half), ties to
/// the even code, magnitudes beyond `max` saturating to it.
fn brute_nearest(values: &[f64], a: f64) -> usize {
    let mut best = 0;
    for (c, &v) in values.iter().enumerate() {
        let (d, db) = ((v - a).abs(), (values[best] - a).abs());
        if d < db || (d == db && c % 2 == 0) {
            best = c;
        }
    }
    best
}

fn positive_e4m3() -> Vec<f64> {
    (0..0x7Fu8).map(|b| ocp_e4m3(b).expect("finite")).collect()
}

fn check_e4m3_encode(x: f32, pos: &[f64]) {
    let want =
        brute_nearest(pos, (x as f64).abs()) as u8 | if x.is_sign_negative() { 0x80 } else { 0 };
    assert_eq!(
        e4m3_encode(x),
        want,
        "encode({x:e}) = {:#04x}, want {want:#04x}",
        e4m3_encode(x)
    );
}

#[test]
fn e4m3_encode_is_nearest_even_with_saturation() {
    let pos = positive_e4m3();
    // Every midpoint (a tie: goes to the even code) and its two f32 neighbours.
    for c in 0..pos.len() - 1 {
        let mid = ((pos[c] + pos[c + 1]) / 2.0) as f32;
        assert_eq!(
            mid as f64,
            (pos[c] + pos[c + 1]) / 2.0,
            "midpoints are exact in f32"
        );
        let even = if c % 2 == 0 { c } else { c + 1 } as u8;
        assert_eq!(e4m3_encode(mid), even, "tie at {mid:e}");
        assert_eq!(e4m3_encode(-mid), even | 0x80);
        assert_eq!(e4m3_encode(mid.next_down()), c as u8);
        assert_eq!(e4m3_encode(mid.next_up()), c as u8 + 1);
    }
    // A stride through every f32 from 0 to beyond the saturation point.
    let mut bits = 0u32;
    while bits < 0x4500_0000 {
        let x = f32::from_bits(bits);
        check_e4m3_encode(x, &pos);
        check_e4m3_encode(-x, &pos);
        bits += 997;
    }
    // Saturation, never the NaN code.
    for x in [
        448.0,
        449.0,
        463.99,
        464.0,
        479.0,
        480.0,
        1e6,
        f32::MAX,
        f32::INFINITY,
    ] {
        assert_eq!(e4m3_encode(x), 0x7E, "{x}");
        assert_eq!(e4m3_encode(-x), 0xFE, "-{x}");
    }
    assert_eq!(e4m3_encode(f32::NAN) & 0x7F, 0x7F);
    assert_eq!(e4m3_encode(-0.0), 0x80);
    assert_eq!(e4m3_encode(f32::from_bits(1)), 0x00);
}

#[test]
fn e2m1_encode_is_nearest_even_with_saturation() {
    let pos: Vec<f64> = (0..8u8).map(ocp_e2m1).collect();
    for c in 0..pos.len() - 1 {
        let mid = ((pos[c] + pos[c + 1]) / 2.0) as f32;
        let even = if c % 2 == 0 { c } else { c + 1 } as u8;
        assert_eq!(e2m1_encode(mid), even, "tie at {mid}");
        assert_eq!(e2m1_encode(-mid), even | 0x8, "tie at -{mid}");
        assert_eq!(e2m1_encode(mid.next_down()), c as u8, "below {mid}");
        assert_eq!(e2m1_encode(mid.next_up()), c as u8 + 1, "above {mid}");
    }
    let mut bits = 0u32;
    while bits < 0x4200_0000 {
        let x = f32::from_bits(bits);
        let want = brute_nearest(&pos, x as f64) as u8;
        assert_eq!(e2m1_encode(x), want, "encode({x:e})");
        assert_eq!(e2m1_encode(-x), want | 0x8, "encode(-{x:e})");
        bits += 1009;
    }
    for x in [6.0, 7.0, 8.0, 1e30, f32::INFINITY] {
        assert_eq!(e2m1_encode(x), 0x7);
        assert_eq!(e2m1_encode(-x), 0xF);
    }
}
