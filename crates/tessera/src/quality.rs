//! `tessera quality FILE`: encodes every 2-D float weight of a safetensors file with each
//! requested format, decodes it, and prints bits per weight, MSE, tail-1% MSE, max rel error
//! and the deltas against a baseline format (issue 9, seed 001 § 5). The metrics and their
//! exact definitions live in `quant_core::quality`; docs/QUALITY.md records measured tables.
//!
//! - `--rotate` measures in the FWHT-256 domain: every tensor is forward-rotated with
//!   `--seed`, un-rotated formats encode those rotated weights, rotated formats encode the
//!   tensor as usual (their own rotation with the same seed gives the same rotated weights),
//!   and every reconstruction is compared to the rotated weights in that domain. Without it,
//!   everything is compared in the logical domain.
//! - `--flatten` views a tensor whose element count is a multiple of 256 as
//!   [numel / 256, 256] (blocks then cross row boundaries), as the numpy measurement quoted
//!   by issue 9 did. It is a codec statistic only, not a layout a GEMV could use.
//! - A format name with `+ea` selects its error-aware encoder (same bytes, same decoder).

use crate::{Fail, R, emit};
use container_io::container::{Container, How, Item, ShapeHints};
use container_io::roles::{Role, classify};
use quant_core::quality::{
    CHUNK, ErrorStats, TAIL_QUANTILE, abs_quantile, histogram_svg, rotate_for_measurement,
    round_trip,
};
use quant_core::{EncodeOptions, EncoderEffort, Format, QTensor};
use std::path::PathBuf;

/// The formats measured when `--formats` is not given: seed 001's comparison set.
pub const DEFAULT_FORMATS: &str = "mq4-g256,mq4c-g256,mq4-g256-v2,mq4-g256-v2+ea,mq4-k,mq4-k+ea";

/// Seed 001's comparisons, printed when both formats were measured: (format, against).
const SEED_PAIRS: [(&str, &str); 4] = [
    ("mq4-g256-v2", "mq4-g256"),
    ("mq4c-g256", "mq4-g256"),
    ("mq4-k", "mq4-g256-v2"),
    ("mq4-k", "mq4-g256"),
];

pub struct Args {
    pub file: PathBuf,
    pub formats: Option<String>,
    pub baseline: Option<String>,
    pub rotate: bool,
    pub flatten: bool,
    pub svg: Option<PathBuf>,
    pub seed: u64,
}

/// One measured column: a format and its encoder.
struct Spec {
    format: Format,
    error_aware: bool,
    label: String,
    stats: ErrorStats,
    /// Tensors this format could not encode (I not a whole number of its blocks), and the
    /// first refusal's reason.
    skipped: Vec<String>,
    why: Option<String>,
    encode_s: f64,
}

fn parse_specs(list: &str) -> R<Vec<Spec>> {
    let mut out: Vec<Spec> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, error_aware) = match item.strip_suffix("+ea") {
            Some(n) => (n, true),
            None => (item, false),
        };
        let format = name
            .parse::<Format>()
            .map_err(|e| Fail(format!("--formats: {e}")))?;
        let label = item.to_string();
        if out.iter().any(|s| s.label == label) {
            return Err(Fail(format!("--formats: {label} is listed twice")));
        }
        out.push(Spec {
            format,
            error_aware,
            label,
            stats: ErrorStats::default(),
            skipped: Vec::new(),
            why: None,
            encode_s: 0.0,
        });
    }
    if out.is_empty() {
        return Err(Fail("--formats: no format given".into()));
    }
    Ok(out)
}

/// A tensor to measure, in the shape it is measured at.
struct Job {
    name: String,
    resolved: container_io::container::Resolved,
    rows: usize,
    cols: usize,
}

/// Embedding tables are not measured: the role classifier's `embed`, plus BERT-style
/// `position_embeddings` / `token_type_embeddings` and GPT-2's `wpe`, which it leaves as
/// other roles.
fn is_embedding(name: &str) -> bool {
    classify(name) == Role::Embed
        || name
            .split('.')
            .any(|seg| seg.to_ascii_lowercase().contains("embedding") || seg == "wpe")
}

fn load(c: &Container, j: &Job) -> R<Vec<f32>> {
    let t: QTensor<'_> = c.qtensor(&j.resolved)?;
    let w = quant_core::decode(&t).map_err(|e| Fail(format!("{}: {}: {e}", c.path, j.name)))?;
    if let Some(k) = w.iter().position(|v| !v.is_finite()) {
        return Err(Fail(format!(
            "{}: {}: non-finite weight at element {k}; refusing to measure",
            c.path, j.name
        )));
    }
    Ok(w)
}

/// The tensor in the measurement domain: rotated when `seed` is given.
fn measured(w: &[f32], cols: usize, seed: Option<u64>) -> Option<Vec<f32>> {
    seed.and_then(|s| rotate_for_measurement(w, cols, s))
}

fn options(seed: u64, error_aware: bool) -> EncodeOptions {
    EncodeOptions {
        rotation_seed: seed,
        effort: if error_aware {
            EncoderEffort::ErrorAware
        } else {
            EncoderEffort::MinMax
        },
    }
}

fn pct(a: f64, b: f64) -> String {
    if b == 0.0 {
        "-".into()
    } else {
        format!("{:+.1}%", (a / b - 1.0) * 100.0)
    }
}

fn sci(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.4e}"))
}

fn short_list(v: &[String]) -> String {
    const SHOW: usize = 4;
    let mut s = v.iter().take(SHOW).cloned().collect::<Vec<_>>().join(", ");
    if v.len() > SHOW {
        s.push_str(&format!(", ... ({} more)", v.len() - SHOW));
    }
    s
}

pub fn run(a: Args) -> R {
    let mut specs = parse_specs(a.formats.as_deref().unwrap_or(DEFAULT_FORMATS))?;
    let base = match &a.baseline {
        Some(b) => specs
            .iter()
            .position(|s| &s.label == b)
            .ok_or_else(|| Fail(format!("--baseline {b} is not one of --formats")))?,
        None => 0,
    };
    let c = Container::open(&a.file)?;
    let (mut jobs, mut embeds, mut other, mut unrotatable) = (vec![], vec![], 0usize, vec![]);
    for (name, item) in c.resolve_all(&ShapeHints::new()) {
        let r = match item {
            Ok(Item::Tensor(r)) => r,
            Ok(Item::Raw(_)) | Err(_) => {
                other += 1;
                continue;
            }
        };
        let float = matches!(r.format, Format::F32 | Format::F16 | Format::Bf16);
        if r.how != How::Dense || !float || r.dims.len() != 2 {
            other += 1;
            continue;
        }
        if is_embedding(&name) {
            embeds.push(name);
            continue;
        }
        let (mut rows, mut cols) = (r.rows, r.cols);
        if a.flatten && (rows * cols) % CHUNK == 0 {
            (rows, cols) = (rows * cols / CHUNK, CHUNK);
        }
        if a.rotate && cols % CHUNK != 0 {
            unrotatable.push(format!("{name} [I={cols}]"));
            continue;
        }
        jobs.push(Job {
            name,
            resolved: r,
            rows,
            cols,
        });
    }
    if jobs.is_empty() {
        return Err(Fail(format!(
            "{}: no 2-D float weight to measure ({} embeddings skipped, {} other tensors)",
            a.file.display(),
            embeds.len(),
            other
        )));
    }
    let seed = a.rotate.then_some(a.seed);

    // Pass 1 (two sweeps): the tail threshold over every weight measured.
    let mut failure = None;
    let tail = abs_quantile(TAIL_QUANTILE, |feed| {
        for j in &jobs {
            match load(&c, j) {
                Ok(w) => match measured(&w, j.cols, seed) {
                    Some(r) => feed(&r),
                    None => feed(&w),
                },
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let tail = tail.ok_or_else(|| Fail("no weights to measure".into()))?;

    // Pass 2: every format on every tensor.
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (mut weights, mut chunks) = (0u64, 0u64);
    for (n, j) in jobs.iter().enumerate() {
        if progress {
            eprint!("\rtessera quality: {}/{} {:<60}", n + 1, jobs.len(), j.name);
        }
        let w = load(&c, j)?;
        let rot = measured(&w, j.cols, seed);
        let reference = rot.as_deref().unwrap_or(&w);
        weights += w.len() as u64;
        chunks += (j.rows * j.cols.div_ceil(CHUNK)) as u64;
        for s in specs.iter_mut() {
            if let Err(e) = s.format.spec().check_shape(j.rows, j.cols) {
                s.skipped
                    .push(format!("{} [{}, {}]", j.name, j.rows, j.cols));
                s.why.get_or_insert_with(|| e.to_string());
                continue;
            }
            let opts = options(a.seed, s.error_aware);
            let t0 = std::time::Instant::now();
            let (_, rec) = round_trip(s.format, j.rows, j.cols, &w, rot.as_deref(), &opts)
                .map_err(|e| Fail(format!("{}: {}: {}: {e}", c.path, j.name, s.label)))?;
            s.encode_s += t0.elapsed().as_secs_f64();
            let mut st = ErrorStats::measure(j.cols, reference, &rec, tail);
            st.add_stored(s.format, j.rows, j.cols)?;
            s.stats.merge(&st);
        }
    }
    if progress {
        eprint!("\r{:<90}\r", "");
    }

    out!("tessera quality: {}", c.path);
    match seed {
        Some(s) => out!(
            "domain: FWHT-256, seed {s} (un-rotated formats encode the rotated weights; every format is compared on the same post-FWHT values)"
        ),
        None => out!("domain: logical (rotated formats are decoded and un-rotated)"),
    }
    out!(
        "measured: {} tensors, {} weights, {} chunks of <= 256{}",
        jobs.len(),
        weights,
        chunks,
        if a.flatten {
            " (--flatten: tensors viewed as [numel/256, 256])"
        } else {
            ""
        }
    );
    if !embeds.is_empty() {
        out!("skipped, embeddings: {}", short_list(&embeds));
    }
    if !unrotatable.is_empty() {
        out!(
            "skipped, I not a multiple of 256 so not rotatable (all formats): {} tensors: {}",
            unrotatable.len(),
            short_list(&unrotatable)
        );
    }
    if other > 0 {
        out!("ignored: {other} tensors that are not 2-D float weights");
    }
    out!(
        "tail threshold: |w| > {tail:.6e} (nearest-rank {}th percentile of |w| over all weights measured)",
        TAIL_QUANTILE * 100.0
    );
    let b = &specs[base].stats;
    let (bm, bt) = (b.mse().unwrap_or(0.0), b.tail_mse().unwrap_or(0.0));
    out!("");
    out!(
        "{:<20} {:>7} {:>11} {:>11} {:>11} {:>9} {:>8} {:>8} {:>8}",
        "format",
        "bits/w",
        "weights",
        "MSE",
        "tail-1% MSE",
        "max rel",
        "dMSE",
        "dtail",
        "enc s"
    );
    for s in &specs {
        let st = &s.stats;
        let (dm, dt) = if st.weights == 0 {
            ("-".into(), "-".into())
        } else {
            (
                pct(st.mse().unwrap_or(0.0), bm),
                pct(st.tail_mse().unwrap_or(0.0), bt),
            )
        };
        out!(
            "{:<20} {:>7} {:>11} {:>11} {:>11} {:>9} {:>8} {:>8} {:>8.2}",
            s.label,
            st.bits_per_weight()
                .map_or("-".into(), |v| format!("{v:.4}")),
            st.weights,
            sci(st.mse()),
            sci(st.tail_mse()),
            if st.chunks == 0 {
                "-".into()
            } else {
                format!("{:.3}%", st.max_rel * 100.0)
            },
            dm,
            dt,
            s.encode_s
        );
    }
    out!(
        "(deltas against {}; enc s: wall seconds of encode + decode, all cores)",
        specs[base].label
    );
    if specs.iter().any(|s| s.stats.weights != weights) {
        out!(
            "note: not every format measured every tensor (weights column); compare deltas of equal coverage only"
        );
    }
    for s in &specs {
        if !s.skipped.is_empty() {
            out!(
                "{}: skipped {} tensors ({}): {}",
                s.label,
                s.skipped.len(),
                s.why.as_deref().unwrap_or("-"),
                short_list(&s.skipped)
            );
        }
    }
    let find = |l: &str| specs.iter().find(|s| s.label == l && s.stats.weights > 0);
    let mut pairs: Vec<(&Spec, &Spec)> = SEED_PAIRS
        .iter()
        .filter_map(|(x, y)| Some((find(x)?, find(y)?)))
        .collect();
    // The same comparisons between the error-aware encoders.
    pairs.extend(
        SEED_PAIRS
            .iter()
            .filter_map(|(x, y)| Some((find(&format!("{x}+ea"))?, find(&format!("{y}+ea"))?))),
    );
    for s in &specs {
        if s.error_aware
            && let Some(m) = find(s.format.name())
        {
            pairs.push((s, m));
        }
    }
    if !pairs.is_empty() {
        out!("");
        out!("comparisons:");
    }
    for (x, y) in pairs {
        let note = if x.stats.weights == y.stats.weights {
            ""
        } else {
            "  (different coverage)"
        };
        out!(
            "  {:<16} vs {:<16} MSE {:>7}  tail {:>7}  bytes {:>7}{note}",
            x.label,
            y.label,
            pct(x.stats.mse().unwrap_or(0.0), y.stats.mse().unwrap_or(0.0)),
            pct(
                x.stats.tail_mse().unwrap_or(0.0),
                y.stats.tail_mse().unwrap_or(0.0)
            ),
            pct(x.stats.stored_bytes as f64, y.stats.stored_bytes as f64),
        );
    }
    if let Some(p) = &a.svg {
        let series: Vec<(String, &quant_core::quality::Histogram)> = specs
            .iter()
            .filter(|s| s.stats.weights > 0)
            .map(|s| (s.label.clone(), &s.stats.hist))
            .collect();
        let title = format!(
            "error histogram: {} ({})",
            a.file
                .file_name()
                .map_or(c.path.clone(), |f| f.to_string_lossy().into_owned()),
            if a.rotate {
                "FWHT-256 domain"
            } else {
                "logical domain"
            }
        );
        std::fs::write(p, histogram_svg(&title, &series))
            .map_err(|e| Fail(format!("{}: cannot write: {e}", p.display())))?;
        out!("");
        out!("histogram: {}", p.display());
    }
    Ok(())
}
