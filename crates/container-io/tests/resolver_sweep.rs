//! The resolver sweep: every O and I in 1..=2048, plus the real GLM-5.2, DeepSeek-V3 and
//! Qwen3 shapes, for every format.
//!
//! Unstamped: each legacy format's registry bytes at [O, I] must resolve to that format, to
//! the documented incumbent (int8-row over fp8, seed 004), to a decode-identical format
//! (single-group int4-g as int4-row), or be refused with the format among the candidates —
//! never to anything else. Stamped: the stamp decides for every format, and any byte count
//! other than the registry's is refused. Pure arithmetic; run it in release mode.

use container_io::census::{census, families_from_config};
use container_io::container::{StampCheck, check_stamp};
use container_io::legacy::{self, Inferred, RULE_FMT1_FMT7, RULE_INT4_SINGLE_GROUP};
use container_io::stamp::Stamp;
use quant_core::Format;
use rayon::prelude::*;
use std::collections::BTreeMap;

const MAX: usize = 2048;

#[derive(Default, Clone)]
struct Tally {
    exact: u64,
    equivalent: u64,
    incumbent: u64,
    refused: u64,
}

/// Checks one (format, shape); returns which outcome it had, or a failure message.
fn check(f: Format, o: usize, i: usize) -> Result<Option<&'static str>, String> {
    let Some((w, s)) = legacy::byte_counts(f, o, i) else {
        return Ok(None);
    };
    judge(f, o, i, w, s, &legacy::infer(o, i, w, s)).map(Some)
}

/// Judges the resolver's answer for format `f` written at [o, i].
fn judge(
    f: Format,
    o: usize,
    i: usize,
    w: u64,
    s: u64,
    got: &Result<legacy::Inference, legacy::Refusal>,
) -> Result<&'static str, String> {
    match got {
        Ok(inf) if inf.format == f => Ok("exact"),
        Ok(inf) => match &inf.how {
            Inferred::Equivalent { rule, over }
                if *rule == RULE_INT4_SINGLE_GROUP
                    && inf.format == Format::Int4Row
                    && over.contains(&f)
                    && f.spec().group_size().is_some_and(|g| g as usize >= i) =>
            {
                Ok("equivalent")
            }
            Inferred::Incumbent { rule, over }
                if *rule == RULE_FMT1_FMT7
                    && inf.format == Format::Int8Row
                    && over.contains(&f)
                    && matches!(f, Format::Fp8E4m3B128 | Format::Fp8E4m3B128Ue8m0) =>
            {
                Ok("incumbent")
            }
            how => Err(format!(
                "{f} [{o}, {i}] ({w} + {s} bytes) silently resolved as {} via {how:?}",
                inf.format
            )),
        },
        Err(r) if r.candidates.contains(&f) && r.candidates.len() > 1 => Ok("refused"),
        Err(r) => Err(format!(
            "{f} [{o}, {i}] refused without naming it: {} {:?}",
            r.rule, r.candidates
        )),
    }
}

fn sweep_rows(o: usize) -> Result<BTreeMap<Format, Tally>, String> {
    let formats = legacy::legacy_formats();
    let mut t: BTreeMap<Format, Tally> = BTreeMap::new();
    let mut seen: Vec<((u64, u64), Result<legacy::Inference, legacy::Refusal>)> = Vec::new();
    for i in 1..=MAX {
        // The resolver is asked once per distinct byte signature at this shape; every
        // format that writes that signature is judged against the same answer.
        seen.clear();
        for &f in &formats {
            let Some((w, s)) = legacy::byte_counts(f, o, i) else {
                continue;
            };
            let k = match seen.iter().position(|(b, _)| *b == (w, s)) {
                Some(k) => k,
                None => {
                    seen.push(((w, s), legacy::infer(o, i, w, s)));
                    seen.len() - 1
                }
            };
            let e = t.entry(f).or_default();
            match judge(f, o, i, w, s, &seen[k].1)? {
                "exact" => e.exact += 1,
                "equivalent" => e.equivalent += 1,
                "incumbent" => e.incumbent += 1,
                _ => e.refused += 1,
            }
        }
    }
    Ok(t)
}

#[test]
fn unstamped_sweep_every_o_and_i_up_to_2048() {
    let start = std::time::Instant::now();
    let parts: Vec<BTreeMap<Format, Tally>> = (1..=MAX)
        .into_par_iter()
        .map(sweep_rows)
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut total: BTreeMap<Format, Tally> = BTreeMap::new();
    for p in parts {
        for (f, t) in p {
            let e = total.entry(f).or_default();
            e.exact += t.exact;
            e.equivalent += t.equivalent;
            e.incumbent += t.incumbent;
            e.refused += t.refused;
        }
    }
    println!(
        "unstamped sweep, O and I in 1..={MAX} ({:.1?}):",
        start.elapsed()
    );
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>10}",
        "format", "exact", "equivalent", "incumbent", "refused"
    );
    for (f, t) in &total {
        println!(
            "{:<22} {:>10} {:>10} {:>10} {:>10}",
            f.name(),
            t.exact,
            t.equivalent,
            t.incumbent,
            t.refused
        );
    }
    // Every legacy format is covered, and the sweep saw each outcome the policy documents.
    assert_eq!(total.len(), legacy::legacy_formats().len());
    assert!(total[&Format::Fp8E4m3B128].incumbent > 0);
    assert!(total[&Format::Fp8E4m3B128Ue8m0].incumbent > 0);
    assert!(total[&Format::Int4G256].equivalent > 0);
    assert!(total[&Format::E8Lattice].refused > 0);
    assert_eq!(
        total[&Format::Int8Row].incumbent + total[&Format::Int8Row].equivalent,
        0
    );
}

/// Named collision shapes from seed 004.
#[test]
fn seed_004_named_shapes() {
    // GLM-5.2's o_proj: int8-row wins; fp8 written there reads back as int8-row.
    assert_eq!(check(Format::Int8Row, 6144, 16384).unwrap(), Some("exact"));
    assert_eq!(
        check(Format::Fp8E4m3B128, 6144, 16384).unwrap(),
        Some("incumbent")
    );
    // The previously-refused int8-row shapes of the seed's test now resolve to int8-row.
    for o in [128, 256, 384] {
        assert_eq!(
            check(Format::Int8Row, o, 16384).unwrap(),
            Some("exact"),
            "[{o}, 16384]"
        );
    }
    // fmt=6 / fmt=7 at I = 98 (both scale encodings) and the three-way O = 1 case.
    assert_eq!(check(Format::Fp8E4m3B128, 64, 98).unwrap(), Some("refused"));
    assert_eq!(check(Format::E8Lattice, 64, 98).unwrap(), Some("refused"));
    assert_eq!(
        check(Format::Fp8E4m3B128Ue8m0, 400, 98).unwrap(),
        Some("refused")
    );
    assert_eq!(check(Format::Int8Row, 1, 98).unwrap(), Some("refused"));
    // Boundary neighbours of the I = 98 collision are unambiguous.
    assert_eq!(check(Format::E8Lattice, 64, 97).unwrap(), Some("exact"));
    assert_eq!(check(Format::Fp8E4m3B128, 64, 99).unwrap(), Some("exact"));
}

fn config(name: &str) -> serde_json::Value {
    let path = format!(
        "{}/../../fixtures/configs/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn real_model_shapes() {
    let mut shapes: Vec<(String, usize, usize)> = vec![("glm-5.2 o_proj".into(), 6144, 16384)];
    for cfg in [
        "deepseek-v3.json",
        "qwen3-30b-a3b.json",
        "qwen3-235b-a22b.json",
    ] {
        for f in families_from_config(&config(cfg)).unwrap() {
            shapes.push((format!("{cfg} {}", f.family), f.rows, f.cols));
        }
    }
    for (what, o, i) in &shapes {
        for f in Format::all() {
            // Stamped: always exact.
            if let Some((w, s)) = legacy::byte_counts(f, *o, *i) {
                let st = Stamp::new(f, *o, *i, 42);
                let side = (s > 0).then_some(s);
                assert_eq!(check_stamp(&st, w, side), Ok(()), "{what} {f}");
            }
            if legacy::is_legacy(f) {
                check(f, *o, *i).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
    // The census of DeepSeek-V3 finds o_proj only; Qwen3's shapes have no collision.
    let ds = census(&families_from_config(&config("deepseek-v3.json")).unwrap());
    assert_eq!(ds.len(), 1);
    assert_eq!((ds[0].family.rows, ds[0].family.cols), (7168, 16384));
    for q in ["qwen3-30b-a3b.json", "qwen3-235b-a22b.json"] {
        assert!(
            census(&families_from_config(&config(q)).unwrap()).is_empty(),
            "{q}"
        );
    }
}

#[test]
fn stamped_sweep_every_format() {
    // Every format at every O and I in 1..=2048 on a stride (all I, every 7th O), and the
    // stamp always decides: registry bytes accepted, one byte more or less refused.
    let fails: Vec<String> = (1..=MAX)
        .into_par_iter()
        .filter(|o| o % 7 == 1 || *o <= 130)
        .flat_map_iter(|o| {
            let mut out = Vec::new();
            for i in 1..=MAX {
                for f in Format::all() {
                    let Some((w, s)) = legacy::byte_counts(f, o, i) else {
                        continue;
                    };
                    let st = Stamp::new(f, o, i, 42);
                    let side = (s > 0).then_some(s);
                    if check_stamp(&st, w, side) != Ok(()) {
                        out.push(format!("{f} [{o}, {i}] rejected its own bytes"));
                    }
                    if !matches!(
                        check_stamp(&st, w + 1, side),
                        Err(StampCheck::Mismatch { .. })
                    ) {
                        out.push(format!("{f} [{o}, {i}] accepted a weight byte too many"));
                    }
                    if let Some(s) = side
                        && !matches!(
                            check_stamp(&st, w, Some(s - 1)),
                            Err(StampCheck::Mismatch { .. })
                        )
                    {
                        out.push(format!("{f} [{o}, {i}] accepted a scale byte too few"));
                    }
                }
            }
            out
        })
        .collect();
    assert!(
        fails.is_empty(),
        "{} failures, first: {:?}",
        fails.len(),
        &fails[..fails.len().min(5)]
    );
}
