//! The `tessera` command-line program: the format registry, container inspection, the
//! collision census, and the quantize / repack-fp8 / dequantize / verify pipelines.
//!
//! Every failure prints one message naming the file, the tensor and the condition, and
//! exits with status 2.

use clap::{Parser, Subcommand};
use container_io::census::{census, families_from_config, families_from_container};
use container_io::container::{Container, How, Item, ShapeHints, describe};
use container_io::pipeline::{self, Planned, QuantizeOptions, RepackOptions};
use container_io::roles::{Role, classify};
use indicatif::{ProgressBar, ProgressStyle};
use quant_core::registry::DEFAULT_ROTATION_SEED;
use quant_core::{FORMATS, Format};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "Quantized LLM weights: formats, containers, pipelines"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The format registry as a table.
    Formats,
    /// One row per tensor: name, role, format, logical shape, bytes, how it was resolved.
    Inspect {
        file: PathBuf,
        #[arg(long)]
        json: bool,
        /// JSON object {tensor: [O, I]} of logical shapes for unstamped legacy tensors.
        #[arg(long)]
        shapes: Option<PathBuf>,
        /// The model's config.json: logical shapes for unstamped legacy tensors.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Shape families the unstamped (legacy) reader cannot tell apart.
    Census {
        /// A container, or a Hugging Face config.json.
        input: PathBuf,
        #[arg(long)]
        shapes: Option<PathBuf>,
    },
    /// Quantize a Hugging Face safetensors model (f32/f16/bf16, single or sharded).
    Quantize {
        input: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        /// Target format of quantizable 2-D weights (see `tessera formats`).
        #[arg(long)]
        format: String,
        /// Group size for int4 formats: int4 + N gives int4-gN; 0 gives int4-row.
        #[arg(long)]
        group_size: Option<u32>,
        /// Per-role override, e.g. --role kv_b=int4-row --role expert=mq4-g256-v2.
        #[arg(long = "role", value_name = "ROLE=FORMAT")]
        roles: Vec<String>,
        /// Write no stamps; refuse every tensor the unstamped reader would resolve otherwise.
        #[arg(long)]
        legacy_unstamped: bool,
        /// FWHT seed of rotated formats.
        #[arg(long, default_value_t = DEFAULT_ROTATION_SEED)]
        seed: u64,
    },
    /// Repack a Hugging Face FP8 checkpoint (F8_E4M3 + weight_scale_inv) byte for byte.
    RepackFp8 {
        input: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        /// Repack every FP8 tensor, not only seed 004's resident roles.
        #[arg(long)]
        all_roles: bool,
        #[arg(long)]
        legacy_unstamped: bool,
    },
    /// Decode every tensor back to dense f32 (or bf16/f16) in a plain safetensors file.
    Dequantize {
        input: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        #[arg(long, default_value = "f32")]
        dtype: String,
        #[arg(long)]
        shapes: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Codec quality on real weights: bits/weight, MSE, tail-1% MSE, max rel error per
    /// format, with deltas against a baseline (definitions: docs/QUALITY.md).
    Quality {
        file: PathBuf,
        /// Comma-separated formats; NAME+ea selects the error-aware encoder.
        #[arg(long, default_value = quality::DEFAULT_FORMATS)]
        formats: String,
        /// The format the deltas are against (default: the first of --formats).
        #[arg(long)]
        baseline: Option<String>,
        /// Measure in the FWHT-256 domain: un-rotated formats encode rotated weights too.
        #[arg(long)]
        rotate: bool,
        /// View each tensor of numel % 256 == 0 as [numel/256, 256] (codec statistics only).
        #[arg(long)]
        flatten: bool,
        /// Write the error histogram of every format as an SVG chart.
        #[arg(long, value_name = "OUT.svg")]
        svg: Option<PathBuf>,
        /// FWHT seed of rotated formats and of --rotate.
        #[arg(long, default_value_t = DEFAULT_ROTATION_SEED)]
        seed: u64,
    },
    /// Import a llama.cpp GGUF file into a stamped container folder, blocks copied byte for
    /// byte, Hugging Face names, config.json from the metadata.
    ImportGguf {
        input: PathBuf,
        /// Output folder (model.safetensors, config.json, gguf_metadata.json).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Greedy decoding with the engine: token ids, tokens/s, fallback summary.
    Run(run_cmd::RunArgs),
    /// Run quant_core::gemm against the f64 oracle on a random activation, per tensor.
    Verify {
        file: PathBuf,
        /// Activation rows.
        #[arg(long, default_value_t = 2)]
        s: usize,
        /// Fail when any tensor's worst error exceeds this.
        #[arg(long, default_value_t = 1e-4)]
        tolerance: f64,
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long)]
        shapes: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// A CLI failure: the message is already complete.
struct Fail(String);

impl<E: std::fmt::Display> From<E> for Fail {
    fn from(e: E) -> Self {
        Fail(e.to_string())
    }
}

type R<T = ()> = Result<T, Fail>;

const BROKEN_PIPE: &str = "\u{0}broken pipe";

/// Writes one line to stdout; a closed pipe ends the program quietly instead of panicking.
fn emit(line: std::fmt::Arguments<'_>) -> R {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_fmt(format_args!("{line}\n")) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Fail(BROKEN_PIPE.to_string())),
        Err(e) => Err(Fail(format!("stdout: {e}"))),
    }
}

macro_rules! out {
    ($($t:tt)*) => { emit(format_args!($($t)*))? };
}

mod gguf_cmd;
mod quality;
mod run_cmd;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Formats => formats(),
        Cmd::Inspect {
            file,
            json,
            shapes,
            config,
        } => inspect(&file, json, shapes.as_deref(), config.as_deref()),
        Cmd::Census { input, shapes } => census_cmd(&input, shapes.as_deref()),
        Cmd::Quantize {
            input,
            output,
            format,
            group_size,
            roles,
            legacy_unstamped,
            seed,
        } => quantize(
            &input,
            &output,
            &format,
            group_size,
            &roles,
            legacy_unstamped,
            seed,
        ),
        Cmd::RepackFp8 {
            input,
            output,
            all_roles,
            legacy_unstamped,
        } => repack(
            &input,
            &output,
            RepackOptions {
                all_roles,
                legacy_unstamped,
            },
        ),
        Cmd::Dequantize {
            input,
            output,
            dtype,
            shapes,
            config,
        } => dequantize(
            &input,
            &output,
            &dtype,
            shapes.as_deref(),
            config.as_deref(),
        ),
        Cmd::Quality {
            file,
            formats,
            baseline,
            rotate,
            flatten,
            svg,
            seed,
        } => quality::run(quality::Args {
            file,
            formats: Some(formats),
            baseline,
            rotate,
            flatten,
            svg,
            seed,
        }),
        Cmd::ImportGguf { input, output } => gguf_cmd::import(&input, &output),
        Cmd::Run(args) => run_cmd::run(args),
        Cmd::Verify {
            file,
            s,
            tolerance,
            seed,
            shapes,
            config,
        } => verify(
            &file,
            s,
            tolerance,
            seed,
            shapes.as_deref(),
            config.as_deref(),
        ),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`tessera inspect ... | head`) is not an error.
        Err(Fail(m)) if m == BROKEN_PIPE => ExitCode::SUCCESS,
        Err(Fail(m)) => {
            eprintln!("tessera: error: {m}");
            ExitCode::from(2)
        }
    }
}

fn formats() -> R {
    out!(
        "{:<20} {:>6} {:>4} {:>5} {:>8} {:>6} {:<8} {:<8}  summary",
        "name",
        "fmt=",
        "qt=",
        "ggml",
        "bits/w",
        "block",
        "scales",
        "rotation"
    );
    for s in FORMATS {
        let id = |v: Option<u8>| v.map_or("-".to_string(), |v| v.to_string());
        let scales = match s.scale_encoding() {
            Some(e) => e.name(),
            None => match s.scales {
                quant_core::ScaleLayout::Inline => "inline",
                _ => "-",
            },
        };
        out!(
            "{:<20} {:>6} {:>4} {:>5} {:>8.4} {:>6} {:<8} {:<8}  {}",
            s.name,
            id(s.legacy.fmt),
            id(s.legacy.qt),
            id(s.legacy.ggml),
            s.bits_per_weight(),
            format!("{}/{}", s.block_weights, s.block_bytes),
            scales,
            s.rotation.name(),
            s.summary
        );
    }
    Ok(())
}

/// Shape hints from `--shapes` and `--config`, for unstamped legacy tensors.
fn hints_for(c: &Container, shapes: Option<&Path>, config: Option<&Path>) -> R<ShapeHints> {
    let mut hints = load_hints(shapes)?;
    if let Some(p) = config {
        let text = std::fs::read_to_string(p)
            .map_err(|e| Fail(format!("{}: cannot read: {e}", p.display())))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Fail(format!("{}: not JSON: {e}", p.display())))?;
        let from_cfg =
            container_io::census::hints_from_config(&v, c.names().iter().map(String::as_str))
                .map_err(|e| Fail(format!("{}: {e}", p.display())))?;
        for (k, v) in from_cfg {
            hints.entry(k).or_insert(v);
        }
    }
    Ok(hints)
}

fn load_hints(path: Option<&Path>) -> R<ShapeHints> {
    let Some(p) = path else {
        return Ok(ShapeHints::new());
    };
    let text = std::fs::read_to_string(p)
        .map_err(|e| Fail(format!("{}: cannot read: {e}", p.display())))?;
    let m: HashMap<String, (usize, usize)> = serde_json::from_str(&text).map_err(|e| {
        Fail(format!(
            "{}: shape hints are not {{name: [O, I]}}: {e}",
            p.display()
        ))
    })?;
    Ok(m)
}

fn inspect(file: &Path, json: bool, shapes: Option<&Path>, config: Option<&Path>) -> R {
    if container_io::gguf::is_gguf(file) {
        return gguf_cmd::inspect(file, json);
    }
    let c = Container::open(file)?;
    let hints = hints_for(&c, shapes, config)?;
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for (name, item) in c.resolve_all(&hints) {
        let role = classify(&name);
        match item {
            Ok(Item::Tensor(r)) => rows.push(serde_json::json!({
                "name": name,
                "role": role.name(),
                "format": r.format.name(),
                "shape": [r.rows, r.cols],
                "stored_shape": r.dims,
                "weight_bytes": r.weight_bytes,
                "scale_bytes": r.scale_bytes,
                "resolved": r.how.label(),
                "rule": r.how.rule(),
                "seed": matches!(r.format.spec().rotation, quant_core::Rotation::Fwht256).then_some(r.seed),
            })),
            Ok(Item::Raw(raw)) => rows.push(serde_json::json!({
                "name": name,
                "role": role.name(),
                "format": null,
                "dtype": raw.dtype.name(),
                "stored_shape": raw.dims,
                "weight_bytes": c.entry(raw.id).nbytes(),
                "scale_bytes": 0,
                "resolved": "raw",
            })),
            Err(e) => {
                rows.push(serde_json::json!({ "name": name, "role": role.name(), "resolved": "refused", "error": e.to_string() }));
                errors.push(e.to_string());
            }
        }
    }
    if json {
        out!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        out!(
            "{}: {} tensors in {} file(s)",
            c.path,
            rows.len(),
            c.shards.len()
        );
        out!(
            "{:<56} {:<13} {:<20} {:>16} {:>12} {:>10}  resolved",
            "name",
            "role",
            "format",
            "shape [O, I]",
            "bytes",
            "scales"
        );
        for r in &rows {
            let s = |k: &str| r.get(k).and_then(|v| v.as_str()).unwrap_or("-").to_string();
            let shape = match r.get("shape") {
                Some(v) => format!("[{}, {}]", v[0], v[1]),
                None => r.get("stored_shape").map_or("-".into(), |v| v.to_string()),
            };
            let fmt = r
                .get("format")
                .and_then(|v| v.as_str())
                .map(str::to_string)
                .unwrap_or_else(|| format!("raw {}", s("dtype")));
            let how = match (
                s("resolved").as_str(),
                r.get("rule").and_then(|v| v.as_str()),
            ) {
                ("refused", _) => format!("REFUSED: {}", s("error")),
                (h, Some(rule)) => format!("{h}: {rule}"),
                (h, None) => h.to_string(),
            };
            out!(
                "{:<56} {:<13} {:<20} {:>16} {:>12} {:>10}  {}",
                s("name"),
                s("role"),
                fmt,
                shape,
                r.get("weight_bytes").map_or("-".into(), |v| v.to_string()),
                r.get("scale_bytes").map_or("-".into(), |v| v.to_string()),
                how
            );
        }
    }
    if !errors.is_empty() {
        return Err(Fail(format!(
            "{} tensor(s) refused; first: {}",
            errors.len(),
            errors[0]
        )));
    }
    Ok(())
}

fn census_cmd(input: &Path, shapes: Option<&Path>) -> R {
    let is_config = input.extension().is_some_and(|e| e == "json")
        && !input.to_string_lossy().ends_with(".index.json");
    let fams = if is_config {
        let text = std::fs::read_to_string(input)
            .map_err(|e| Fail(format!("{}: cannot read: {e}", input.display())))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Fail(format!("{}: not JSON: {e}", input.display())))?;
        families_from_config(&v).map_err(|e| Fail(format!("{}: {e}", input.display())))?
    } else {
        let c = Container::open(input)?;
        families_from_container(&c, &load_hints(shapes)?)
    };
    let total: usize = fams.iter().map(|f| f.count).sum();
    out!(
        "{}: {} shape families, {} tensors",
        input.display(),
        fams.len(),
        total
    );
    let found = census(&fams);
    if found.is_empty() {
        out!(
            "no ambiguous shape families: every legacy format round-trips unstamped at every shape"
        );
        return Ok(());
    }
    out!(
        "ambiguous shape families (an unstamped write of these formats would not read back as written):"
    );
    for f in &found {
        out!(
            "  {} [{}, {}] x{} (role {})",
            f.family.family,
            f.family.rows,
            f.family.cols,
            f.family.count,
            f.family.role
        );
        for (fmt, why) in &f.problems {
            out!("      {fmt}: {why}");
        }
    }
    Ok(())
}

fn parse_format(s: &str) -> R<Format> {
    s.parse::<Format>().map_err(|e| Fail(e.to_string()))
}

fn with_group(format: &str, group: Option<u32>) -> R<Format> {
    match group {
        None => parse_format(format),
        Some(g) => {
            let family = format.split("-g").next().unwrap_or(format);
            let family = family.strip_suffix("-row").unwrap_or(family);
            if family != "int4" {
                return Err(Fail(format!(
                    "--group-size applies to int4 formats only, not {format:?}"
                )));
            }
            if g == 0 {
                Ok(Format::Int4Row)
            } else {
                parse_format(&format!("int4-g{g}"))
            }
        }
    }
}

fn progress(total: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

fn run_planned(input: &Container, planned: Planned, output: &Path, seed: u64, what: &str) -> R {
    for w in &planned.warnings {
        eprintln!("tessera: warning: {w}");
    }
    for (name, why) in &planned.skipped {
        eprintln!("tessera: skipped {name}: {why}");
    }
    let total: u64 = planned.jobs.iter().map(|j| j.input_bytes()).sum();
    let n = planned.jobs.len();
    let pb = progress(total, what);
    let t0 = std::time::Instant::now();
    pipeline::execute(input, planned, output, seed, &|b| pb.inc(b))?;
    pb.finish_and_clear();
    out!(
        "{}: wrote {n} tensors from {} input bytes in {:.2?}",
        output.display(),
        total,
        t0.elapsed()
    );
    Ok(())
}

fn quantize(
    input: &Path,
    output: &Path,
    format: &str,
    group: Option<u32>,
    roles: &[String],
    legacy: bool,
    seed: u64,
) -> R {
    let format = with_group(format, group)?;
    let mut role_map = HashMap::new();
    for r in roles {
        let (role, f) = r
            .split_once('=')
            .ok_or_else(|| Fail(format!("--role {r:?} is not ROLE=FORMAT")))?;
        let role = Role::parse(role).ok_or_else(|| {
            let all: Vec<&str> = Role::ALL.iter().map(|r| r.name()).collect();
            Fail(format!(
                "--role {r:?}: unknown role {role:?}; roles: {}",
                all.join(", ")
            ))
        })?;
        role_map.insert(role, with_group(f, None)?);
    }
    let c = Container::open(input)?;
    let opts = QuantizeOptions {
        format,
        roles: role_map,
        legacy_unstamped: legacy,
        seed,
        gpu_tables: vec![container_io::roles::GpuTable {
            backend: "cuda",
            table: kernels_cuda::backend::capability_table(),
        }],
    };
    let planned = pipeline::plan_quantize(&c, &output.display().to_string(), &opts)?;
    run_planned(&c, planned, output, seed, "quantize")
}

fn repack(input: &Path, output: &Path, opts: RepackOptions) -> R {
    let c = Container::open(input)?;
    let planned = pipeline::plan_repack_fp8(&c, &output.display().to_string(), &opts)?;
    run_planned(&c, planned, output, DEFAULT_ROTATION_SEED, "repack-fp8")
}

fn dequantize(
    input: &Path,
    output: &Path,
    dtype: &str,
    shapes: Option<&Path>,
    config: Option<&Path>,
) -> R {
    let f = match dtype {
        "f32" => Format::F32,
        "bf16" => Format::Bf16,
        "f16" => Format::F16,
        other => {
            return Err(Fail(format!(
                "--dtype {other:?}: expected f32, bf16 or f16"
            )));
        }
    };
    if container_io::gguf::is_gguf(input) {
        return gguf_cmd::dequantize(input, output, f);
    }
    let c = Container::open(input)?;
    let hints = hints_for(&c, shapes, config)?;
    let planned = pipeline::plan_dequantize(&c, &output.display().to_string(), &hints, f)?;
    run_planned(&c, planned, output, DEFAULT_ROTATION_SEED, "dequantize")
}

fn verify(
    file: &Path,
    s: usize,
    tolerance: f64,
    seed: Option<u64>,
    shapes: Option<&Path>,
    config: Option<&Path>,
) -> R {
    let c = Container::open(file)?;
    let hints = hints_for(&c, shapes, config)?;
    let seed = seed.unwrap_or_else(quant_core::testdata::fresh_seed);
    out!(
        "{}: gemm vs f64 oracle, S={s}, activation seed {seed}",
        c.path
    );
    out!(
        "{:<56} {:<20} {:>16} {:>12}  resolved",
        "name",
        "format",
        "shape [O, I]",
        "worst err"
    );
    let mut worst = 0f64;
    let mut bad = Vec::new();
    let mut n = 0usize;
    for (name, item) in c.resolve_all(&hints) {
        let r = match item? {
            Item::Tensor(r) => r,
            Item::Raw(_) => continue,
        };
        let e = pipeline::verify_tensor(&c, &r, s.max(1), seed ^ n as u64)?;
        n += 1;
        out!(
            "{:<56} {:<20} {:>16} {:>12.3e}  {}",
            name,
            r.format.name(),
            format!("[{}, {}]", r.rows, r.cols),
            e.error,
            describe(&r)
        );
        if e.error.is_nan() || e.error > tolerance {
            bad.push(format!(
                "{name}: worst error {:.3e} at output {} exceeds {tolerance:e}",
                e.error, e.index
            ));
        }
        if e.error > worst || e.error.is_nan() {
            worst = e.error;
        }
        if r.how != How::Stamp && r.how != How::Dense {
            eprintln!(
                "tessera: note: {name} resolved without a stamp: {}",
                describe(&r)
            );
        }
    }
    out!("{n} tensors checked, worst error {worst:.3e} (tolerance {tolerance:e})");
    if !bad.is_empty() {
        return Err(Fail(format!(
            "{}: {} tensor(s) over tolerance; first: {}",
            file.display(),
            bad.len(),
            bad[0]
        )));
    }
    Ok(())
}
