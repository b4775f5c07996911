//! The load-time notice (seed 003): one line per tensor kind whose format keeps layers off
//! the fused path on the chosen backend, at most [`MAX_LINES`] lines, silent on clean
//! containers. Built only from [`crate::gate::miss_mask`], the predicate the layer-path
//! choice uses, so the notice cannot describe a condition the gate does not act on.
//!
//! Each line names the kind, the offending format(s), how many of the layers holding that
//! kind are affected (experts count over MoE layers only, the dense MLP over dense layers
//! only), what happens to them, and the remedy: the `tessera quantize --role` override with
//! the covered format nearest in bits per weight.

use crate::gate::{Kind, LayerFormats, covers, miss_mask};
use quant_core::Format;
use quant_core::capability::Capability;
use std::collections::BTreeMap;

/// The notice never prints more lines than this, however many kinds miss.
pub const MAX_LINES: usize = 8;

/// The notice lines for `layers` on `backend` with capability `table` (empty when every
/// format is covered).
pub fn notice_lines(backend: &str, layers: &[LayerFormats], table: &[Capability]) -> Vec<String> {
    // kind -> (layers affected, layers holding the kind, missed formats in order seen)
    let mut per_kind: BTreeMap<Kind, (usize, usize, Vec<Format>)> = BTreeMap::new();
    for layer in layers {
        let miss = miss_mask(layer, table);
        for k in layer.present().kinds() {
            let e = per_kind.entry(k).or_default();
            e.1 += 1;
            if miss.contains(k) {
                e.0 += 1;
                for (kind, f) in &layer.tensors {
                    // The same predicate, asked about one tensor: which formats missed.
                    let one = LayerFormats {
                        tensors: vec![(*kind, *f)],
                    };
                    if *kind == k && miss_mask(&one, table).contains(k) && !e.2.contains(f) {
                        e.2.push(*f);
                    }
                }
            }
        }
    }
    let offending: Vec<(Kind, usize, usize, Vec<Format>)> = per_kind
        .into_iter()
        .filter(|(_, (hit, _, _))| *hit > 0)
        .map(|(k, (hit, of, fs))| (k, hit, of, fs))
        .collect();
    let mut lines = Vec::new();
    let room = if offending.len() > MAX_LINES {
        MAX_LINES - 1
    } else {
        MAX_LINES
    };
    for (k, hit, of, formats) in offending.iter().take(room) {
        lines.push(line(backend, *k, *hit, *of, formats, table));
    }
    if offending.len() > room {
        let rest: Vec<String> = offending[room..]
            .iter()
            .map(|(k, hit, of, fs)| format!("{} ({} in {hit}/{of} layers)", k.name(), names(fs)))
            .collect();
        lines.push(format!(
            "[{backend}] {} more kinds also miss {backend}'s capability table: {}",
            rest.len(),
            rest.join(", ")
        ));
    }
    lines
}

/// The notice for a backend whose fused path has its own, narrower table (CUDA's resident
/// path: no rotated formats): one line per kind with a format that `table` covers but
/// `fused` does not, so those layers run op by op rather than fused. Built from
/// [`miss_mask`] like [`notice_lines`]; formats `table` misses are left to that notice.
pub fn fused_notice_lines(
    backend: &str,
    layers: &[LayerFormats],
    fused: &[Capability],
    table: &[Capability],
) -> Vec<String> {
    let mut per_kind: BTreeMap<Kind, (usize, usize, Vec<Format>)> = BTreeMap::new();
    for layer in layers {
        let miss = miss_mask(layer, fused);
        for k in layer.present().kinds() {
            let e = per_kind.entry(k).or_default();
            e.1 += 1;
            if !miss.contains(k) {
                continue;
            }
            let mut hit = false;
            for (kind, f) in &layer.tensors {
                let one = LayerFormats {
                    tensors: vec![(*kind, *f)],
                };
                if *kind == k
                    && miss_mask(&one, fused).contains(k)
                    && miss_mask(&one, table).is_empty()
                {
                    hit = true;
                    if !e.2.contains(f) {
                        e.2.push(*f);
                    }
                }
            }
            if hit {
                e.0 += 1;
            }
        }
    }
    per_kind
        .into_iter()
        .filter(|(_, (hit, _, _))| *hit > 0)
        .map(|(k, (hit, of, formats))| {
            let remedy = match formats.first().and_then(|f| nearest_covered(*f, fused)) {
                Some(g) => format!(
                    "requantize with `tessera quantize --role {}={}` ({:.2} bits/weight, in the \
                     fused path's table)",
                    k.role().name(),
                    g.name(),
                    g.spec().bits_per_weight()
                ),
                None => format!("{backend}'s fused path covers no format to requantize to"),
            };
            format!(
                "[{backend}] {}: {} in {hit} of {of} layers is not in {backend}'s fused-path table \
                 (rotated formats need the activation FWHT on the device, which that path does \
                 not do); the model runs op by op (the resident path takes every layer or none). \
                 Remedy: {remedy}",
                k.name(),
                names(&formats)
            )
        })
        .collect()
}

fn names(fs: &[Format]) -> String {
    fs.iter().map(|f| f.name()).collect::<Vec<_>>().join("/")
}

fn line(
    backend: &str,
    k: Kind,
    hit: usize,
    of: usize,
    formats: &[Format],
    table: &[Capability],
) -> String {
    let role = k.role();
    let remedy = if role.stays_f32() {
        format!(
            "{} tensors stay f32 by design, so only a backend with an f32 GEMV runs them",
            role.name()
        )
    } else {
        match formats.first().and_then(|f| nearest_covered(*f, table)) {
            Some(g) => format!(
                "requantize with `tessera quantize --role {}={}` ({:.2} bits/weight, in {backend}'s table)",
                role.name(),
                g.name(),
                g.spec().bits_per_weight()
            ),
            None => format!("{backend}'s table covers no quantized format to requantize to"),
        }
    };
    format!(
        "[{backend}] {}: {} in {hit} of {of} layers has no GEMV row in {backend}'s capability \
         table; those layers cannot take the fused path and run {} on the CPU. Remedy: {remedy}",
        k.name(),
        names(formats),
        k.name()
    )
}

/// The covered, non-float format closest in bits per weight to `f` (registry order breaks
/// ties), or a covered float format when `f` is itself a float format.
fn nearest_covered(f: Format, table: &[Capability]) -> Option<Format> {
    let float = |g: Format| matches!(g, Format::F32 | Format::F16 | Format::Bf16);
    let want = f.spec().bits_per_weight();
    let mut best: Option<(f64, Format)> = None;
    for g in Format::all().filter(|g| covers(table, *g) && float(*g) == float(f)) {
        let d = (g.spec().bits_per_weight() - want).abs();
        if best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, g));
        }
    }
    best.map(|(_, g)| g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quant_core::capability::{Constraint, Op};

    static TABLE: [Capability; 3] = [
        Capability {
            op: Op::Gemv,
            format: Format::Int4G64,
            constraint: Constraint::batch(1, 16),
        },
        Capability {
            op: Op::Gemv,
            format: Format::Int8Row,
            constraint: Constraint::batch(1, 16),
        },
        Capability {
            op: Op::Gemv,
            format: Format::F32,
            constraint: Constraint::batch(1, 16),
        },
    ];

    fn dense(f_o: Format) -> LayerFormats {
        LayerFormats {
            tensors: vec![
                (Kind::QA, Format::Int4G64),
                (Kind::O, f_o),
                (Kind::MlpGate, Format::Int4G64),
            ],
        }
    }

    fn moe(f_exp: Format) -> LayerFormats {
        let mut t = vec![
            (Kind::QA, Format::Int4G64),
            (Kind::O, Format::Int4G64),
            (Kind::Router, Format::F32),
            (Kind::ShGate, f_exp),
        ];
        for _ in 0..4 {
            t.push((Kind::ExpGate, Format::Int4G64));
        }
        t.push((Kind::ExpGate, f_exp));
        LayerFormats { tensors: t }
    }

    #[test]
    fn clean_container_is_silent() {
        let layers = vec![
            dense(Format::Int4G64),
            moe(Format::Int4G64),
            moe(Format::Int8Row),
        ];
        assert!(notice_lines("cuda", &layers, &TABLE).is_empty());
        // The CPU table covers everything: silent whatever the formats.
        let odd = vec![dense(Format::Q4K), moe(Format::Iq4Xs)];
        assert!(notice_lines("cpu", &odd, quant_core::cpu_backend::CAPABILITIES).is_empty());
    }

    #[test]
    fn one_line_per_kind_with_format_count_and_remedy() {
        let layers = vec![dense(Format::Q4K), moe(Format::Int4G64), moe(Format::Q6K)];
        let lines = notice_lines("cuda", &layers, &TABLE);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        // o_proj misses in the one dense layer, out of 3 layers holding o_proj.
        assert!(
            lines[0].starts_with("[cuda] o_proj: q4_k in 1 of 3 layers"),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("--role o=int4-g64"), "{}", lines[0]);
        // Shared and routed experts count over the 2 MoE layers only.
        assert!(
            lines[1].starts_with("[cuda] shared.gate_proj: q6_k in 1 of 2 layers"),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains("--role shared_expert="), "{}", lines[1]);
        assert!(
            lines[2].starts_with("[cuda] experts.gate_proj: q6_k in 1 of 2 layers"),
            "{}",
            lines[2]
        );
        assert!(lines[2].contains("--role expert="), "{}", lines[2]);
    }

    #[test]
    fn many_kinds_stay_within_eight_lines() {
        let layer = LayerFormats {
            tensors: Kind::ALL.iter().map(|k| (*k, Format::Q4K)).collect(),
        };
        let layers = vec![layer; 61];
        let lines = notice_lines("cuda", &layers, &TABLE);
        assert_eq!(lines.len(), MAX_LINES);
        assert!(lines[7].contains("11 more kinds"), "{}", lines[7]);
        for k in Kind::ALL {
            let named = lines
                .iter()
                .filter(|l| {
                    l.contains(&format!("{} ", k.name())) || l.contains(&format!("{}:", k.name()))
                })
                .count();
            assert!(named >= 1, "{k:?} not named");
        }
    }

    /// A format the op-by-op table covers but the fused table does not gets a fused-path
    /// line; one both miss is left to `notice_lines`; a clean layer is silent.
    #[test]
    fn fused_notice_names_what_only_the_fused_table_misses() {
        let fused = &TABLE[..1]; // int4-g64 only
        let layers = vec![
            dense(Format::Int8Row),
            dense(Format::Q4K),
            dense(Format::Int4G64),
        ];
        let lines = fused_notice_lines("cuda", &layers, fused, &TABLE);
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].starts_with(
                "[cuda] o_proj: int8-row in 1 of 3 layers is not in cuda's fused-path table"
            ),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("--role o=int4-g64"), "{}", lines[0]);
        assert!(fused_notice_lines("cuda", &layers[2..], fused, &TABLE).is_empty());
    }

    #[test]
    fn several_formats_of_one_kind_are_all_named() {
        let layers = vec![
            dense(Format::Q4K),
            dense(Format::Q5K),
            dense(Format::Int4G64),
        ];
        let lines = notice_lines("cuda", &layers, &TABLE);
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].contains("q4_k/q5_k in 2 of 3 layers"),
            "{}",
            lines[0]
        );
    }
}
