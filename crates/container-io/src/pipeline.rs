//! The pipelines behind the CLI: quantize, repack-fp8, dequantize and verify.
//!
//! All of them stream: an output file is planned (header first, from registry byte counts),
//! then tensors are filled in parallel by positional writes, each tensor row block by row
//! block. A task holds one block of input rows as f32 plus its encoded bytes, so peak memory
//! is about (threads x block) on top of the maps, far under twice the largest tensor.

use crate::container::{Container, Item, Resolved, ShapeHints, dense_shape};
use crate::error::{ContainerError, Result};
use crate::header::Dtype;
use crate::legacy;
use crate::roles::{GpuTable, Role, classify, fused_path_warning};
use crate::writer::{Plan, Writer};
use quant_core::oracle::{WorstError, reference_gemm, worst_error};
use quant_core::registry::DEFAULT_ROTATION_SEED;
use quant_core::{EncodeOptions, Format, QTensor, decode_rows, encode_rows};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::Path;

/// Input f32 values a streaming task converts at once (4 MiB of f32).
const BLOCK_VALUES: usize = 1 << 20;

/// Rows of a streaming block for `format` at `cols`: a multiple of the format's row block.
fn block_rows(format: Format, cols: usize) -> usize {
    format.spec().stream_rows(cols, BLOCK_VALUES)
}

/// What one output tensor is made from.
#[derive(Clone, Debug)]
pub enum Target {
    /// Encode [rows, cols] to a quantized format.
    Quantize {
        format: Format,
        rows: usize,
        cols: usize,
    },
    /// Keep dense in a float format (f32/f16/bf16), original dims.
    Dense { format: Format, dims: Vec<u64> },
    /// Copy the stored bytes verbatim (fp8 passthrough), sidecar included.
    Copy {
        format: Format,
        rows: usize,
        cols: usize,
        scales_from: Option<String>,
    },
}

/// One planned output tensor and where it comes from.
#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    pub role: Role,
    pub source: Resolved,
    pub target: Target,
}

impl Job {
    /// Input bytes this job reads (for progress).
    pub fn input_bytes(&self) -> u64 {
        self.source.weight_bytes + self.source.scale_bytes
    }
}

/// The plan of a pipeline run: the output file's plan, the jobs, and convert-time notes.
pub struct Planned {
    pub plan: Plan,
    pub jobs: Vec<Job>,
    /// Seed 003-style warnings and other notes, one line each, deduplicated.
    pub warnings: Vec<String>,
    /// Input tensors left out, with why.
    pub skipped: Vec<(String, String)>,
}

/// Options of `tessera quantize`.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    pub format: Format,
    /// Per-role overrides (`--role ROLE=FORMAT`).
    pub roles: HashMap<Role, Format>,
    pub legacy_unstamped: bool,
    pub seed: u64,
    /// Capability tables of the GPU backends the caller has compiled in: a tensor whose
    /// format one of them lacks gets a convert-time warning (seed 003).
    pub gpu_tables: Vec<GpuTable>,
}

fn input_err(file: &str, tensor: &str, msg: String) -> ContainerError {
    ContainerError::Input {
        file: file.to_string(),
        tensor: tensor.to_string(),
        msg,
    }
}

fn resolve_input(input: &Container, name: &str) -> Result<Item> {
    input.resolve(name, &ShapeHints::new())
}

/// Plans a quantize run: each input tensor's role decides its target format.
pub fn plan_quantize(input: &Container, out_file: &str, opts: &QuantizeOptions) -> Result<Planned> {
    let mut plan = Plan::new(out_file, opts.legacy_unstamped);
    let mut jobs = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut skipped = Vec::new();
    let mut warn_counts: HashMap<String, usize> = HashMap::new();
    for name in input.primary_names() {
        let role = classify(name);
        let file = input
            .file_of(
                input
                    .id(name)
                    .ok_or_else(|| input_err(&input.path, name, "vanished".into()))?,
            )
            .to_string();
        let r = match resolve_input(input, name)? {
            Item::Tensor(r) => r,
            Item::Raw(raw) => {
                return Err(input_err(
                    &file,
                    name,
                    format!(
                        "{} is not a float tensor and has no stamp; quantize reads f32/f16/bf16 or tessera containers (for FP8 checkpoints use `tessera repack-fp8`)",
                        raw.dtype
                    ),
                ));
            }
        };
        let target = if role.stays_f32() || r.dims.len() != 2 && r.how == crate::How::Dense {
            if r.dims.len() != 2 && !role.stays_f32() {
                *warn_counts
                    .entry(format!(
                        "{}-D {role} tensors kept dense f32 (only 2-D weights are quantized)",
                        r.dims.len()
                    ))
                    .or_default() += 1;
            }
            let dims = if r.how == crate::How::Dense {
                r.dims.clone()
            } else {
                vec![r.rows as u64, r.cols as u64]
            };
            Target::Dense {
                format: Format::F32,
                dims,
            }
        } else {
            let format = opts.roles.get(&role).copied().unwrap_or(opts.format);
            if crate::header::dense_dtype(format).is_some() {
                let dims = if r.how == crate::How::Dense {
                    r.dims.clone()
                } else {
                    vec![r.rows as u64, r.cols as u64]
                };
                Target::Dense { format, dims }
            } else {
                if let Err(e) = format.spec().check_shape(r.rows, r.cols) {
                    return Err(input_err(
                        &file,
                        name,
                        format!(
                            "{e}; choose another format for role {role} with --role {role}=FORMAT"
                        ),
                    ));
                }
                if let Some(w) = fused_path_warning(role, format, &opts.gpu_tables) {
                    *warn_counts.entry(w).or_default() += 1;
                }
                Target::Quantize {
                    format,
                    rows: r.rows,
                    cols: r.cols,
                }
            }
        };
        match &target {
            Target::Quantize { format, rows, cols } => {
                plan.add_quantized(name, *format, *rows, *cols, opts.seed)?
            }
            Target::Dense { format, dims } => plan.add_dense(name, *format, dims)?,
            Target::Copy { .. } => {}
        }
        jobs.push(Job {
            name: name.to_string(),
            role,
            source: r,
            target,
        });
    }
    let mut ws: Vec<(String, usize)> = warn_counts.into_iter().collect();
    ws.sort();
    warnings.extend(ws.into_iter().map(|(w, n)| format!("{w} ({n} tensors)")));
    if jobs.is_empty() {
        skipped.push(("(all)".to_string(), "input has no tensors".to_string()));
    }
    Ok(Planned {
        plan,
        jobs,
        warnings,
        skipped,
    })
}

/// Fills every job's output, in parallel across tensors (largest first), each streamed in
/// row blocks. `progress` is called with input bytes done.
pub fn run_jobs(
    input: &Container,
    jobs: &[Job],
    out: &Writer,
    seed: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<()> {
    let mut order: Vec<&Job> = jobs.iter().collect();
    order.sort_by_key(|j| std::cmp::Reverse(j.input_bytes()));
    order.par_iter().try_for_each(|job| {
        run_job(input, job, out, seed)?;
        progress(job.input_bytes());
        Ok(())
    })
}

fn run_job(input: &Container, job: &Job, out: &Writer, seed: u64) -> Result<()> {
    let src = input.qtensor(&job.source)?;
    let file = input.file_of(job.source.weights).to_string();
    let q = |source| ContainerError::Quant {
        file: file.clone(),
        tensor: job.name.clone(),
        source,
    };
    match &job.target {
        Target::Quantize { format, rows, cols } => {
            let spec = format.spec();
            let step = block_rows(*format, *cols);
            let opts = EncodeOptions {
                rotation_seed: seed,
                ..Default::default()
            };
            let side = crate::stamp::sidecar_name(&job.name);
            let mut buf = Vec::new();
            let mut row0 = 0;
            while row0 < *rows {
                let n = step.min(rows - row0);
                buf.resize(n * cols, 0f32);
                decode_rows(&src, row0, &mut buf).map_err(q)?;
                let wr = spec.weight_range(row0, n, *cols).map_err(q)?;
                let sr = spec.scale_range(row0, n, *rows, *cols).map_err(q)?;
                let mut w = vec![0u8; wr.len()];
                let mut s = vec![0u8; sr.len()];
                encode_rows(*format, *rows, *cols, row0, &buf, &mut w, &mut s, &opts).map_err(q)?;
                out.write_at(&job.name, wr.start as u64, &w)?;
                if !s.is_empty() {
                    out.write_at(&side, sr.start as u64, &s)?;
                }
                row0 += n;
            }
            Ok(())
        }
        Target::Dense { format, .. } => {
            let (rows, cols) = (src.rows(), src.cols());
            let spec = format.spec();
            let step = block_rows(*format, cols);
            let mut buf = Vec::new();
            let mut row0 = 0;
            while row0 < rows {
                let n = step.min(rows - row0);
                buf.resize(n * cols, 0f32);
                decode_rows(&src, row0, &mut buf).map_err(q)?;
                let wr = spec.weight_range(row0, n, cols).map_err(q)?;
                let mut w = vec![0u8; wr.len()];
                // Float "encoding" is a plain conversion; the float codecs do it.
                encode_rows(
                    *format,
                    rows,
                    cols,
                    row0,
                    &buf,
                    &mut w,
                    &mut [],
                    &EncodeOptions::default(),
                )
                .map_err(q)?;
                out.write_at(&job.name, wr.start as u64, &w)?;
                row0 += n;
            }
            Ok(())
        }
        Target::Copy { scales_from, .. } => {
            out.write_at(&job.name, 0, input.data(job.source.weights))?;
            if let Some(sname) = scales_from {
                let id = input
                    .id(sname)
                    .ok_or_else(|| input_err(&file, sname, "scale tensor vanished".into()))?;
                out.write_at(&crate::stamp::sidecar_name(&job.name), 0, input.data(id))?;
            }
            Ok(())
        }
    }
}

/// Options of `tessera repack-fp8`.
#[derive(Clone, Debug, Default)]
pub struct RepackOptions {
    /// Repack every FP8 tensor, not only seed 004's resident roles.
    pub all_roles: bool,
    pub legacy_unstamped: bool,
}

/// Plans an FP8 passthrough: F8_E4M3 weights + `weight_scale_inv` (F32 or F8_E8M0/U8,
/// [ceil(O/128), ceil(I/128)]) become fp8-e4m3-b128[-ue8m0] tensors with their bytes copied
/// verbatim; other float tensors are copied as dense stamped tensors.
pub fn plan_repack_fp8(input: &Container, out_file: &str, opts: &RepackOptions) -> Result<Planned> {
    let mut plan = Plan::new(out_file, opts.legacy_unstamped);
    let mut jobs = Vec::new();
    let mut skipped = Vec::new();
    let mut consumed_scales = std::collections::HashSet::new();
    let mut repacked = 0usize;
    for name in input.primary_names() {
        let id = input
            .id(name)
            .ok_or_else(|| input_err(&input.path, name, "vanished".into()))?;
        let file = input.file_of(id).to_string();
        let entry = input.entry(id);
        let role = classify(name);
        if entry.dtype != Dtype::F8E4m3 {
            continue;
        }
        let scale_name = format!("{name}_scale_inv");
        let Some(sid) = input.id(&scale_name) else {
            return Err(input_err(
                &file,
                name,
                format!("F8_E4M3 weight without its block scales {scale_name:?}"),
            ));
        };
        consumed_scales.insert(scale_name.clone());
        let [o, i] = entry.shape.as_slice() else {
            return Err(input_err(
                &file,
                name,
                format!("F8_E4M3 weight of shape {:?} is not 2-D", entry.shape),
            ));
        };
        let (rows, cols) = (
            usize::try_from(*o).unwrap_or(usize::MAX),
            usize::try_from(*i).unwrap_or(usize::MAX),
        );
        let sentry = input.entry(sid);
        let format = match sentry.dtype {
            Dtype::F32 => Format::Fp8E4m3B128,
            Dtype::F8E8m0 | Dtype::U8 => Format::Fp8E4m3B128Ue8m0,
            other => {
                return Err(input_err(
                    &file,
                    &scale_name,
                    format!("block scales of dtype {other}; expected F32 or F8_E8M0"),
                ));
            }
        };
        let spec = format.spec();
        let q = |source| ContainerError::Quant {
            file: file.clone(),
            tensor: name.to_string(),
            source,
        };
        let want_s = spec.scale_bytes(rows, cols).map_err(q)?;
        let tiles = spec.tile_grid(rows, cols).unwrap_or([0, 0]);
        if sentry.nbytes() != want_s || sentry.shape.as_slice() != tiles {
            return Err(input_err(
                &file,
                &scale_name,
                format!(
                    "block scales {:?} ({} bytes) do not match {format} at [{rows}, {cols}]: expected {tiles:?} ({want_s} bytes)",
                    sentry.shape,
                    sentry.nbytes()
                ),
            ));
        }
        if !(opts.all_roles || role.fp8_passthrough()) {
            skipped.push((
                name.to_string(),
                format!(
                    "role {role} is not repacked to fp8 (seed 004); pass --all-roles to include it"
                ),
            ));
            continue;
        }
        plan.add_quantized(name, format, rows, cols, DEFAULT_ROTATION_SEED)?;
        let source = Resolved {
            name: name.to_string(),
            format,
            rows,
            cols,
            dims: entry.shape.clone(),
            seed: DEFAULT_ROTATION_SEED,
            how: crate::How::Inferred,
            weights: id,
            scales: Some(sid),
            weight_bytes: entry.nbytes(),
            scale_bytes: sentry.nbytes(),
        };
        jobs.push(Job {
            name: name.to_string(),
            role,
            source,
            target: Target::Copy {
                format,
                rows,
                cols,
                scales_from: Some(scale_name),
            },
        });
        repacked += 1;
    }
    if repacked == 0 {
        return Err(input_err(
            &input.path,
            "(all)",
            "no F8_E4M3 tensor of a repacked role: nothing to repack".into(),
        ));
    }
    // Everything else: dense float tensors copied as stamped dense tensors.
    for name in input.primary_names() {
        if consumed_scales.contains(name) || jobs.iter().any(|j| j.name == name) {
            continue;
        }
        let id = input
            .id(name)
            .ok_or_else(|| input_err(&input.path, name, "vanished".into()))?;
        let entry = input.entry(id);
        if entry.dtype == Dtype::F8E4m3 {
            continue; // skipped above, with its reason
        }
        match resolve_input(input, name)? {
            Item::Tensor(r) if r.how == crate::How::Dense => {
                plan.add_dense(name, r.format, &r.dims)?;
                let (rows, cols) = (r.rows, r.cols);
                jobs.push(Job {
                    name: name.to_string(),
                    role: classify(name),
                    source: r.clone(),
                    target: Target::Copy {
                        format: r.format,
                        rows,
                        cols,
                        scales_from: None,
                    },
                });
            }
            Item::Tensor(_) | Item::Raw(_) => {
                skipped.push((
                    name.to_string(),
                    format!("{} tensor is neither FP8 nor dense float", entry.dtype),
                ));
            }
        }
    }
    Ok(Planned {
        plan,
        jobs,
        warnings: Vec::new(),
        skipped,
    })
}

/// Plans `tessera dequantize`: every resolved tensor decoded to f32 or bf16 (unstamped,
/// plain checkpoint-style output).
pub fn plan_dequantize(
    input: &Container,
    out_file: &str,
    hints: &ShapeHints,
    dtype: Format,
) -> Result<Planned> {
    let mut plan = Plan::new(out_file, true);
    let mut jobs = Vec::new();
    let mut skipped = Vec::new();
    let out_dtype = match dtype {
        Format::Bf16 => Dtype::Bf16,
        Format::F16 => Dtype::F16,
        _ => Dtype::F32,
    };
    for (name, item) in input.resolve_all(hints) {
        match item? {
            Item::Tensor(r) => {
                let dims = if r.how == crate::How::Dense {
                    r.dims.clone()
                } else {
                    vec![r.rows as u64, r.cols as u64]
                };
                plan.add_raw(&name, out_dtype, &dims)?;
                jobs.push(Job {
                    name: name.clone(),
                    role: classify(&name),
                    source: r,
                    target: Target::Dense {
                        format: dtype,
                        dims,
                    },
                });
            }
            Item::Raw(raw) => skipped.push((
                name.clone(),
                format!("{} tensor copied nowhere: not a weight format", raw.dtype),
            )),
        }
    }
    Ok(Planned {
        plan,
        jobs,
        warnings: Vec::new(),
        skipped,
    })
}

/// Runs a planned pipeline to `out`: creates the file, fills it, syncs it.
pub fn execute(
    input: &Container,
    planned: Planned,
    out: &Path,
    seed: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<Job>> {
    let writer = planned.plan.create(out)?;
    run_jobs(input, &planned.jobs, &writer, seed, progress)?;
    writer.finish()?;
    Ok(planned.jobs)
}

/// The worst magnitude-relative error of `quant_core::gemm` against the f64 oracle for one
/// resolved tensor, on `s` random activation rows drawn from `seed`.
pub fn verify_tensor(c: &Container, r: &Resolved, s: usize, seed: u64) -> Result<WorstError> {
    let t: QTensor<'_> = c.qtensor(r)?;
    let mut rng = quant_core::testdata::Rng::new(seed);
    let x = quant_core::testdata::activations(&mut rng, s, t.cols());
    let mut y = vec![quant_core::oracle::POISON; s * t.rows()];
    quant_core::gemm(&t, &x, s, &mut y).map_err(|source| ContainerError::Quant {
        file: c.file_of(r.weights).to_string(),
        tensor: r.name.clone(),
        source,
    })?;
    let reference = reference_gemm(&t, &x, s);
    Ok(worst_error(&y, &reference))
}

/// Legacy-mode pre-check used by `census`: what the unstamped reader makes of `format` at
/// [rows, cols], as a short status.
pub fn legacy_status(format: Format, rows: usize, cols: usize) -> Option<String> {
    legacy::check_unstamped_round_trip(format, rows, cols).err()
}

/// Logical shape of a dense tensor's dims (re-exported for the CLI).
pub fn logical(dims: &[u64]) -> (usize, usize) {
    dense_shape(dims)
}
