//! The unstamped (legacy) resolver: which format a `<name>` U8 + `<name>.qs` pair holds,
//! inferred from O, I, the weight byte count and the scale byte count alone.
//!
//! Candidates are every registry format with a legacy `fmt=` id whose registry byte counts
//! (`weight_bytes`, `scale_bytes`) equal the file's; nothing here computes a size itself.
//! When several formats fit, seed 004's policy decides, in this order:
//!
//! 1. [`RULE_INT4_SINGLE_GROUP`]: an int4-g{gs} candidate with gs >= I has one group per
//!    row, so its bytes decode exactly as int4-row's (same nibbles, one f32 scale a row);
//!    those candidates collapse into int4-row. A test decodes the same bytes both ways.
//! 2. [`RULE_FMT1_FMT7`]: int8-row and fp8-e4m3-b128 (either scale encoding) store O*I
//!    bytes; when O == ceil(O/128)*ceil(I/128) (f32) or 4*O == ceil(O/128)*ceil(I/128)
//!    (UE8M0) the scale counts agree too. GLM-5.2's o_proj [6144, 16384] is in this family.
//!    The incumbent, int8-row, wins; the writer refuses to emit fp8 unstamped there.
//! 3. Every other collision is refused, naming its rule and the candidates:
//!    [`RULE_THREE_WAY`] (int8-row / e8-lattice / fp8 at O = 1, I = 98),
//!    [`RULE_FMT6_FMT7`] (e8-lattice / fp8 at I = 98), [`RULE_INT4_GROUP`] (int4 group
//!    sizes that split I differently but store the same number of scales), and
//!    [`RULE_COLLISION`] for the rest (degenerate I such as 1, 2, 3, 5, 6).

use quant_core::Format;

pub const RULE_INT4_SINGLE_GROUP: &str =
    "int4-g{gs} with gs >= I has one group per row and decodes exactly as int4-row";
pub const RULE_FMT1_FMT7: &str = "fmt=1/fmt=7 collision (O*I bytes and equal scale counts): int8-row is the incumbent (seed 004)";
pub const RULE_THREE_WAY: &str = "three-way fmt=1/fmt=6/fmt=7 collision (O = 1, I = 98)";
pub const RULE_FMT6_FMT7: &str = "fmt=6/fmt=7 collision at I = 98";
pub const RULE_INT4_GROUP: &str =
    "int4 group size ambiguous: several group sizes store this many scales";
pub const RULE_COLLISION: &str = "legacy byte-count collision with no incumbent";
pub const RULE_NO_MATCH: &str = "no legacy format has these byte counts";

/// How an unstamped tensor's format was decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inferred {
    /// Exactly one legacy format fits.
    Unique,
    /// Several fit but decode identically; `over` are the ones folded in.
    Equivalent {
        rule: &'static str,
        over: Vec<Format>,
    },
    /// Several fit and decode differently; the incumbent wins by policy.
    Incumbent {
        rule: &'static str,
        over: Vec<Format>,
    },
}

/// A successful inference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inference {
    pub format: Format,
    pub how: Inferred,
}

/// A refusal: the rule that fired and the formats that fit (empty when none did).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub rule: &'static str,
    pub candidates: Vec<Format>,
}

/// Formats the legacy resolver knows: those with a legacy `fmt=` id, in registry order.
pub fn legacy_formats() -> Vec<Format> {
    Format::all()
        .filter(|f| f.spec().legacy.fmt.is_some())
        .collect()
}

/// Whether `f` is a legacy format (has a `fmt=` id).
pub fn is_legacy(f: Format) -> bool {
    f.spec().legacy.fmt.is_some()
}

/// Registry byte counts of `f` at [rows, cols], or `None` when the shape is not one it holds.
pub fn byte_counts(f: Format, rows: usize, cols: usize) -> Option<(u64, u64)> {
    let s = f.spec();
    s.check_shape(rows, cols).ok()?;
    Some((
        s.weight_bytes(rows, cols).ok()?,
        s.scale_bytes(rows, cols).ok()?,
    ))
}

/// Every legacy format whose registry byte counts at [rows, cols] are exactly these.
pub fn candidates(rows: usize, cols: usize, weight_bytes: u64, scale_bytes: u64) -> Vec<Format> {
    quant_core::FORMATS
        .iter()
        .filter(|s| s.legacy.fmt.is_some())
        // Weight bytes first: most formats drop out there without computing scales.
        .filter(|s| {
            s.check_shape(rows, cols).is_ok()
                && s.weight_bytes(rows, cols).ok() == Some(weight_bytes)
        })
        .filter(|s| s.scale_bytes(rows, cols).ok() == Some(scale_bytes))
        .map(|s| s.format)
        .collect()
}

fn is_fp8(f: Format) -> bool {
    matches!(f, Format::Fp8E4m3B128 | Format::Fp8E4m3B128Ue8m0)
}

/// The int4 group size of `f`, `None` for other formats (int4-row has no groups).
fn int4_group(f: Format) -> Option<u32> {
    match f {
        Format::Int4G16
        | Format::Int4G32
        | Format::Int4G48
        | Format::Int4G64
        | Format::Int4G96
        | Format::Int4G128
        | Format::Int4G192
        | Format::Int4G256 => f.spec().group_size(),
        Format::F32
        | Format::F16
        | Format::Bf16
        | Format::Int8Row
        | Format::Int4Row
        | Format::Int2Row
        | Format::Int3G64
        | Format::E8Lattice
        | Format::Fp8E4m3B128
        | Format::Fp8E4m3B128Ue8m0
        | Format::Hfq4G256
        | Format::Mq4G256
        | Format::Mq4G256V2
        | Format::Mq4cG256
        | Format::Mq4K
        | Format::Mxfp4
        | Format::Q8_0
        | Format::Q4_0
        | Format::Q4_1
        | Format::Q5_0
        | Format::Q5_1
        | Format::Q2K
        | Format::Q3K
        | Format::Q4K
        | Format::Q5K
        | Format::Q6K
        | Format::Iq4Nl
        | Format::Iq4Xs
        | Format::GgufMxfp4 => None,
    }
}

/// Infers the format of an unstamped tensor of logical [rows, cols].
pub fn infer(
    rows: usize,
    cols: usize,
    weight_bytes: u64,
    scale_bytes: u64,
) -> Result<Inference, Refusal> {
    let all = candidates(rows, cols, weight_bytes, scale_bytes);
    decide(all, cols)
}

/// Applies the collision policy to a candidate set.
pub fn decide(all: Vec<Format>, cols: usize) -> Result<Inference, Refusal> {
    match all.as_slice() {
        [] => {
            return Err(Refusal {
                rule: RULE_NO_MATCH,
                candidates: all,
            });
        }
        [f] => {
            return Ok(Inference {
                format: *f,
                how: Inferred::Unique,
            });
        }
        _ => {}
    }
    // Rule 1: single-group int4-g collapses into int4-row (identical decode).
    let single_group = |f: &Format| int4_group(*f).is_some_and(|g| g as usize >= cols);
    let folded: Vec<Format> = if all.contains(&Format::Int4Row) {
        all.iter().copied().filter(single_group).collect()
    } else {
        Vec::new()
    };
    let rest: Vec<Format> = all
        .iter()
        .copied()
        .filter(|f| !folded.contains(f))
        .collect();
    if let [f] = rest.as_slice() {
        return Ok(Inference {
            format: *f,
            how: Inferred::Equivalent {
                rule: RULE_INT4_SINGLE_GROUP,
                over: folded,
            },
        });
    }
    // Rule 2: int8-row against fp8 only: the incumbent wins.
    if rest.contains(&Format::Int8Row) && rest.iter().all(|&f| f == Format::Int8Row || is_fp8(f)) {
        let over = all
            .iter()
            .copied()
            .filter(|&f| f != Format::Int8Row)
            .collect();
        return Ok(Inference {
            format: Format::Int8Row,
            how: Inferred::Incumbent {
                rule: RULE_FMT1_FMT7,
                over,
            },
        });
    }
    // Rule 3: named refusals.
    let has = |f: Format| rest.contains(&f);
    let any_fp8 = rest.iter().any(|&f| is_fp8(f));
    let rule = if has(Format::Int8Row) && has(Format::E8Lattice) && any_fp8 {
        RULE_THREE_WAY
    } else if has(Format::E8Lattice) && any_fp8 {
        RULE_FMT6_FMT7
    } else if rest
        .iter()
        .all(|&f| f == Format::Int4Row || int4_group(f).is_some())
    {
        RULE_INT4_GROUP
    } else {
        RULE_COLLISION
    };
    Err(Refusal {
        rule,
        candidates: all,
    })
}

/// What the unstamped reader would make of `format` written at [rows, cols]; `Ok(())` when
/// it reads back as exactly `format`, else the reason it would not. The writer's
/// `--legacy-unstamped` mode refuses every tensor for which this is an error.
pub fn check_unstamped_round_trip(format: Format, rows: usize, cols: usize) -> Result<(), String> {
    if !is_legacy(format) {
        return Err(format!(
            "{format} has no legacy fmt= id; only a stamp can name it"
        ));
    }
    let (w, s) = byte_counts(format, rows, cols)
        .ok_or_else(|| format!("{format} cannot hold [{rows}, {cols}]"))?;
    match infer(rows, cols, w, s) {
        Ok(Inference { format: got, .. }) if got == format => Ok(()),
        Ok(Inference { format: got, how }) => {
            let rule = match how {
                Inferred::Unique => "unique match",
                Inferred::Equivalent { rule, .. } | Inferred::Incumbent { rule, .. } => rule,
            };
            Err(format!(
                "the unstamped reader would resolve it as {got} ({rule})"
            ))
        }
        Err(r) => Err(format!(
            "the unstamped reader would refuse it ({}; candidates: {})",
            r.rule,
            crate::error::names(&r.candidates)
        )),
    }
}

/// Logical shapes an unstamped 2-D U8 weight [rows, row_bytes] may have: every I at which
/// some legacy format's registry row bytes equal `row_bytes` and whose full byte counts
/// match, with what the resolver makes of [rows, I]; deduplicated. Used when no shape hint
/// is given; the caller refuses unless exactly one I remains and it resolves.
pub fn shapes_from_rows(
    rows: usize,
    row_bytes: u64,
    scale_bytes: u64,
) -> Vec<(usize, Result<Inference, Refusal>)> {
    let mut out: Vec<(usize, Result<Inference, Refusal>)> = Vec::new();
    let Some(weight_bytes) = row_bytes.checked_mul(rows as u64) else {
        return out;
    };
    for f in legacy_formats() {
        let spec = f.spec();
        // row_bytes(I) = ceil(I / bw) * bb, so I lies in ((k-1)*bw, k*bw] with k = row_bytes / bb.
        let (bw, bb) = (spec.block_weights as u64, spec.block_bytes as u64);
        if row_bytes == 0 || !row_bytes.is_multiple_of(bb) {
            continue;
        }
        let k = row_bytes / bb;
        let (Some(lo), Some(hi)) = ((k - 1).checked_mul(bw), k.checked_mul(bw)) else {
            continue;
        };
        for cols in lo + 1..=hi {
            let Ok(cols) = usize::try_from(cols) else {
                break;
            };
            if byte_counts(f, rows, cols) != Some((weight_bytes, scale_bytes)) {
                continue;
            }
            let r = infer(rows, cols, weight_bytes, scale_bytes);
            if !out.iter().any(|(c, x)| *c == cols && *x == r) {
                out.push((cols, r));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(f: Format, o: usize, i: usize) -> (u64, u64) {
        byte_counts(f, o, i).unwrap()
    }

    #[test]
    fn glm_o_proj_is_int8_incumbent() {
        let (w, s) = bytes(Format::Int8Row, 6144, 16384);
        let r = infer(6144, 16384, w, s).unwrap();
        assert_eq!(r.format, Format::Int8Row);
        assert!(matches!(
            r.how,
            Inferred::Incumbent {
                rule: RULE_FMT1_FMT7,
                ..
            }
        ));
        // The same bytes written as fp8 read back as int8-row: the writer must refuse.
        assert_eq!(bytes(Format::Fp8E4m3B128, 6144, 16384), (w, s));
        assert!(check_unstamped_round_trip(Format::Fp8E4m3B128, 6144, 16384).is_err());
        assert!(check_unstamped_round_trip(Format::Int8Row, 6144, 16384).is_ok());
    }

    #[test]
    fn i98_collisions_are_refused_by_name() {
        let (w, s) = bytes(Format::Fp8E4m3B128, 64, 98);
        let r = infer(64, 98, w, s).unwrap_err();
        assert_eq!(r.rule, RULE_FMT6_FMT7);
        assert_eq!(r.candidates, vec![Format::E8Lattice, Format::Fp8E4m3B128]);
        let (w, s) = bytes(Format::Fp8E4m3B128Ue8m0, 400, 98);
        assert_eq!(infer(400, 98, w, s).unwrap_err().rule, RULE_FMT6_FMT7);
        let (w, s) = bytes(Format::Int8Row, 1, 98);
        let r = infer(1, 98, w, s).unwrap_err();
        assert_eq!(r.rule, RULE_THREE_WAY);
        assert_eq!(
            r.candidates,
            vec![Format::Int8Row, Format::E8Lattice, Format::Fp8E4m3B128]
        );
    }

    #[test]
    fn ue8m0_scales_are_recognised() {
        let (w, s) = bytes(Format::Fp8E4m3B128Ue8m0, 7168, 2048);
        let r = infer(7168, 2048, w, s).unwrap();
        assert_eq!(
            r,
            Inference {
                format: Format::Fp8E4m3B128Ue8m0,
                how: Inferred::Unique
            }
        );
    }

    #[test]
    fn int4_group_size_from_scale_bytes() {
        for f in [Format::Int4G32, Format::Int4G64, Format::Int4G128] {
            let (w, s) = bytes(f, 2048, 7168);
            assert_eq!(infer(2048, 7168, w, s).unwrap().format, f);
        }
        // I = 128: g64 and g96 both store two scales a row but split I differently.
        let (w, s) = bytes(Format::Int4G64, 8, 128);
        let r = infer(8, 128, w, s).unwrap_err();
        assert_eq!(r.rule, RULE_INT4_GROUP);
        assert_eq!(r.candidates, vec![Format::Int4G64, Format::Int4G96]);
    }

    #[test]
    fn shapes_from_rows_lists_every_reading() {
        // Per-row formats all store 4*O scale bytes, so without a hint a [16, 300] U8 blob
        // reads as int8 I=300, int4-row I=599/600 or int2-row I=1197..1200: refused upstream.
        let (w, s) = bytes(Format::Int8Row, 16, 300);
        let got = shapes_from_rows(16, w / 16, s);
        let cols: Vec<usize> = got.iter().map(|(c, _)| *c).collect();
        assert_eq!(cols, vec![300, 599, 600, 1197, 1198, 1199, 1200]);
        // A grouped format's scale count pins I down to the odd/even pair.
        let (w, s) = bytes(Format::Int4G64, 16, 300);
        let got = shapes_from_rows(16, w / 16, s);
        let cols: Vec<usize> = got.iter().map(|(c, _)| *c).collect();
        assert_eq!(cols, vec![299, 300]);
    }
}
