//! The exact decode tables of the small float formats (E4M3-FN, E2M1, UE8M0) and their
//! round-to-nearest-even encoders.
//!
//! The tables are literal statics, not computed at first use: kernels read them from many
//! threads at once and a lazily initialised global would be one more thing to race (seed
//! 004's `E4M3_LUT` made the same choice). `tests/fp8_tables.rs` re-derives every entry from
//! the OCP formulas, written independently, and checks them bit for bit.
//!
//! - E4M3-FN (OCP 8-bit floating point, "FN" = finite + NaN): sign, 4 exponent bits with
//!   bias 7, 3 mantissa bits. Exponent 0 is subnormal (`m/8 * 2^-6`). There are no
//!   infinities; the only NaNs are `0x7F` and `0xFF` (exponent 0xF with mantissa 7), so the
//!   largest finite magnitude is 448 (`0x7E`).
//! - E2M1 (OCP MX FP4): sign, 2 exponent bits with bias 1, 1 mantissa bit: 0, 0.5, 1, 1.5,
//!   2, 3, 4, 6. No NaN, no infinity.
//! - UE8M0 (OCP MX scale): an unsigned biased exponent, value `2^(e-127)`; 0xFF is NaN.

/// Value of every E4M3-FN byte. `0x7F` is NaN and `0xFF` is NaN with the sign bit set;
/// `0x80` is -0.0.
#[rustfmt::skip]
pub static E4M3_FN: [f32; 256] = [
    0.0, 0.001953125, 0.00390625, 0.005859375, 0.0078125, 0.009765625, 0.01171875, 0.013671875, // 0x00..=0x07
    0.015625, 0.017578125, 0.01953125, 0.021484375, 0.0234375, 0.025390625, 0.02734375, 0.029296875, // 0x08..=0x0F
    0.03125, 0.03515625, 0.0390625, 0.04296875, 0.046875, 0.05078125, 0.0546875, 0.05859375, // 0x10..=0x17
    0.0625, 0.0703125, 0.078125, 0.0859375, 0.09375, 0.1015625, 0.109375, 0.1171875, // 0x18..=0x1F
    0.125, 0.140625, 0.15625, 0.171875, 0.1875, 0.203125, 0.21875, 0.234375, // 0x20..=0x27
    0.25, 0.28125, 0.3125, 0.34375, 0.375, 0.40625, 0.4375, 0.46875, // 0x28..=0x2F
    0.5, 0.5625, 0.625, 0.6875, 0.75, 0.8125, 0.875, 0.9375, // 0x30..=0x37
    1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875, // 0x38..=0x3F
    2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75, // 0x40..=0x47
    4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, // 0x48..=0x4F
    8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, // 0x50..=0x57
    16.0, 18.0, 20.0, 22.0, 24.0, 26.0, 28.0, 30.0, // 0x58..=0x5F
    32.0, 36.0, 40.0, 44.0, 48.0, 52.0, 56.0, 60.0, // 0x60..=0x67
    64.0, 72.0, 80.0, 88.0, 96.0, 104.0, 112.0, 120.0, // 0x68..=0x6F
    128.0, 144.0, 160.0, 176.0, 192.0, 208.0, 224.0, 240.0, // 0x70..=0x77
    256.0, 288.0, 320.0, 352.0, 384.0, 416.0, 448.0, f32::NAN, // 0x78..=0x7F
    -0.0, -0.001953125, -0.00390625, -0.005859375, -0.0078125, -0.009765625, -0.01171875, -0.013671875, // 0x80..=0x87
    -0.015625, -0.017578125, -0.01953125, -0.021484375, -0.0234375, -0.025390625, -0.02734375, -0.029296875, // 0x88..=0x8F
    -0.03125, -0.03515625, -0.0390625, -0.04296875, -0.046875, -0.05078125, -0.0546875, -0.05859375, // 0x90..=0x97
    -0.0625, -0.0703125, -0.078125, -0.0859375, -0.09375, -0.1015625, -0.109375, -0.1171875, // 0x98..=0x9F
    -0.125, -0.140625, -0.15625, -0.171875, -0.1875, -0.203125, -0.21875, -0.234375, // 0xA0..=0xA7
    -0.25, -0.28125, -0.3125, -0.34375, -0.375, -0.40625, -0.4375, -0.46875, // 0xA8..=0xAF
    -0.5, -0.5625, -0.625, -0.6875, -0.75, -0.8125, -0.875, -0.9375, // 0xB0..=0xB7
    -1.0, -1.125, -1.25, -1.375, -1.5, -1.625, -1.75, -1.875, // 0xB8..=0xBF
    -2.0, -2.25, -2.5, -2.75, -3.0, -3.25, -3.5, -3.75, // 0xC0..=0xC7
    -4.0, -4.5, -5.0, -5.5, -6.0, -6.5, -7.0, -7.5, // 0xC8..=0xCF
    -8.0, -9.0, -10.0, -11.0, -12.0, -13.0, -14.0, -15.0, // 0xD0..=0xD7
    -16.0, -18.0, -20.0, -22.0, -24.0, -26.0, -28.0, -30.0, // 0xD8..=0xDF
    -32.0, -36.0, -40.0, -44.0, -48.0, -52.0, -56.0, -60.0, // 0xE0..=0xE7
    -64.0, -72.0, -80.0, -88.0, -96.0, -104.0, -112.0, -120.0, // 0xE8..=0xEF
    -128.0, -144.0, -160.0, -176.0, -192.0, -208.0, -224.0, -240.0, // 0xF0..=0xF7
    -256.0, -288.0, -320.0, -352.0, -384.0, -416.0, -448.0, -f32::NAN, // 0xF8..=0xFF
];

/// Value of every E2M1 nibble (bit 3 is the sign; `0x8` is -0.0).
#[rustfmt::skip]
pub static E2M1: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
    -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// The largest finite E4M3-FN magnitude.
pub const E4M3_MAX: f32 = 448.0;
/// The largest E2M1 magnitude.
pub const E2M1_MAX: f32 = 6.0;
/// The UE8M0 exponent bias: byte `e` means `2^(e - UE8M0_BIAS)`.
pub const UE8M0_BIAS: i32 = 127;
/// The UE8M0 NaN byte.
pub const UE8M0_NAN: u8 = 0xFF;

/// Whether an E4M3-FN byte is one of its two NaN codes (`0x7F`, `0xFF`: every magnitude
/// bit set).
#[inline]
pub const fn e4m3_is_nan(b: u8) -> bool {
    b & 0x7F == 0x7F
}

/// Value of a UE8M0 byte: `2^(e - 127)`, NaN for 0xFF. Exact for every byte: 2^-127 is an
/// f32 subnormal but representable.
#[inline(always)]
pub const fn ue8m0(e: u8) -> f32 {
    match e {
        UE8M0_NAN => f32::NAN,
        // 2^-127 has no biased exponent field; it is the subnormal with mantissa bit 22.
        0 => f32::from_bits(0x0040_0000),
        _ => f32::from_bits((e as u32) << 23),
    }
}

/// Nearest E4M3-FN byte to `x`, ties to even, saturating to ±448 (`0x7E` / `0xFE`) instead
/// of overflowing into the NaN code. The sign is kept, so tiny negative values give `0x80`
/// (-0). A NaN input gives the NaN code of its sign.
#[inline(always)]
pub fn e4m3_encode(x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let a = f32::from_bits(bits & 0x7FFF_FFFF);
    if a.is_nan() {
        return sign | 0x7F;
    }
    if a >= E4M3_MAX {
        return sign | 0x7E;
    }
    if a < E4M3_MIN_NORMAL {
        // Subnormals are integer multiples of 2^-9; a*512 is exact, and q = 8 carries into
        // the first normal code 0x08, which is exactly 2^-6.
        return sign | (a * 512.0).round_ties_even() as u8;
    }
    // Normal: round the f32 mantissa to 3 bits, ties to even, letting a carry bump the
    // exponent; then rebias 127 -> 7. `a` is in [2^-6, 448), so the result is 0x08..=0x7E.
    let ab = a.to_bits();
    let rounded = ab + 0x7_FFFF + ((ab >> 20) & 1);
    sign | ((rounded >> 20) - ((127 - 7) << 3)) as u8
}

/// The smallest normal E4M3-FN magnitude, 2^-6.
const E4M3_MIN_NORMAL: f32 = 0.015625;

/// Nearest E2M1 nibble to `x`, ties to even (to the code with mantissa bit 0), saturating
/// to ±6. The sign is kept (`0x8` is -0). E2M1 has no NaN: a NaN input gives a signed zero,
/// and callers refuse non-finite input before they get here.
#[inline(always)]
pub fn e2m1_encode(x: f32) -> u8 {
    let sign = ((x.to_bits() >> 28) & 0x8) as u8;
    let a = x.abs();
    // Each comparison is one midpoint between neighbouring codes; `>` where the lower code
    // is even (a tie stays down), `>=` where the upper one is (a tie goes up).
    let code = u8::from(a > 0.25)
        + u8::from(a >= 0.75)
        + u8::from(a > 1.25)
        + u8::from(a >= 1.75)
        + u8::from(a > 2.5)
        + u8::from(a >= 3.5)
        + u8::from(a > 5.0);
    sign | code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_finite_code_encodes_to_itself() {
        for c in 0..=255u8 {
            let v = E4M3_FN[c as usize];
            if !v.is_nan() {
                assert_eq!(e4m3_encode(v), c, "code {c:#04x} = {v}");
            }
        }
        for c in 0..16u8 {
            assert_eq!(e2m1_encode(E2M1[c as usize]), c);
        }
    }

    #[test]
    fn ue8m0_edges() {
        assert_eq!(ue8m0(127), 1.0);
        assert_eq!(ue8m0(0) as f64, 2f64.powi(-127));
        assert_eq!(ue8m0(254) as f64, 2f64.powi(127));
        assert!(ue8m0(255).is_nan());
    }
}
