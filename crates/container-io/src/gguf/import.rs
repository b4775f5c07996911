//! The GGUF pipelines.
//!
//! - [`dequantize`]: every tensor decoded to f32 (or f16/bf16) into a plain safetensors
//!   file, under its GGUF name and its logical [rows, row_length] shape, streamed row block
//!   by row block so memory stays proportional to one block.
//! - [`import`]: a stamped tessera container (`model.safetensors`), every tensor's bytes
//!   copied as they are (GGUF block types are registry formats), renamed to Hugging Face
//!   names ([`super::names`]), plus `config.json` from the metadata and the whole metadata
//!   as `gguf_metadata.json`.

use super::error::{GgufError, Result};
use super::names::{Target, head_counts, hf_config, hf_target, unpermute_row};
use super::parse::{Gguf, TensorInfo};
use super::{format_of, qtensor};
use crate::roles::{Role, classify};
use crate::writer::{Plan, Writer};
use quant_core::registry::DEFAULT_ROTATION_SEED;
use quant_core::{Format, decode_rows};
use rayon::prelude::*;
use std::path::Path;

/// Called with the number of input bytes just processed.
pub type Progress<'p> = &'p (dyn Fn(u64) + Sync);

/// The bytes of one dense element of `f`.
fn dense_elem(f: Format) -> Option<usize> {
    crate::header::dense_dtype(f).map(|d| d.size() as usize)
}

fn to_usize(g: &Gguf<'_>, t: &TensorInfo<'_>, v: u64) -> Result<usize> {
    usize::try_from(v).map_err(|_| GgufError::Metadata {
        file: g.file.clone(),
        msg: format!(
            "tensor {:?}: dimension {v} does not fit this machine",
            t.name
        ),
    })
}

/// Writes `f32` values as `dtype` bytes.
fn encode_dense(dtype: Format, v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for &x in v {
        match dtype {
            Format::F16 => out.extend_from_slice(&half::f16::from_f32(x).to_le_bytes()),
            Format::Bf16 => out.extend_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
            _ => out.extend_from_slice(&x.to_le_bytes()),
        }
    }
    out
}

/// Decodes every tensor of `g` into a plain safetensors file at `output` in `dtype`
/// (f32, f16 or bf16), keeping GGUF names and logical [rows, row_length] shapes. Returns
/// the number of tensors written.
pub fn dequantize(
    g: &Gguf<'_>,
    output: &Path,
    dtype: Format,
    progress: Progress<'_>,
) -> Result<usize> {
    let out_name = output.display().to_string();
    if dense_elem(dtype).is_none() {
        return Err(GgufError::Metadata {
            file: out_name,
            msg: format!("dequantize writes f32, f16 or bf16, not {dtype}"),
        });
    }
    let mut plan = Plan::new(&out_name, false);
    plan.metadata.insert("gguf_source".into(), g.file.clone());
    let mut jobs = Vec::with_capacity(g.tensors.len());
    for t in &g.tensors {
        let q = qtensor(g, t)?;
        plan.add_dense(t.name, dtype, &[q.rows() as u64, q.cols() as u64])?;
        jobs.push((t, q));
    }
    let writer = plan.create(output)?;
    jobs.par_iter().try_for_each(|(t, q)| -> Result<()> {
        let cols = q.cols();
        let step = (1 << 20) / cols.max(1);
        let step = step.max(1);
        let elem = dense_elem(dtype).unwrap_or(4) as u64;
        let mut buf = vec![0f32; step.min(q.rows()) * cols];
        let mut row0 = 0;
        while row0 < q.rows() {
            let n = step.min(q.rows() - row0);
            let out = &mut buf[..n * cols];
            decode_rows(q, row0, out).map_err(|source| GgufError::Quant {
                file: g.file.clone(),
                tensor: t.name.to_string(),
                source,
            })?;
            writer.write_at(
                t.name,
                (row0 * cols) as u64 * elem,
                &encode_dense(dtype, out),
            )?;
            progress((n * q.row_bytes()) as u64);
            row0 += n;
        }
        Ok(())
    })?;
    writer.finish()?;
    Ok(jobs.len())
}

/// What [`import`] did.
#[derive(Debug, Default)]
pub struct ImportReport {
    /// Tensors written to the container.
    pub written: usize,
    /// GGUF tensors with no Hugging Face name, kept under their GGUF name.
    pub kept: Vec<String>,
    /// Things the user should know (unmapped layouts, missing config).
    pub warnings: Vec<String>,
    /// Whether `config.json` was written.
    pub config: bool,
}

/// How one output tensor's bytes come from the file.
enum Source<'t> {
    /// All of a tensor's bytes, or a contiguous slice of them (one expert).
    Slice {
        t: &'t TensorInfo<'t>,
        start: usize,
        len: usize,
    },
    /// The rows of a tensor in a new order: output row r is stored row `order[r]`.
    Rows {
        t: &'t TensorInfo<'t>,
        row_bytes: usize,
        order: Vec<usize>,
    },
}

/// Imports `g` into the folder `out_dir`: `model.safetensors` (stamped, blocks copied byte
/// for byte, Hugging Face names), `config.json` (llama, qwen3, deepseek2) and
/// `gguf_metadata.json`.
pub fn import(g: &Gguf<'_>, out_dir: &Path, progress: Progress<'_>) -> Result<ImportReport> {
    let io = |op, source| GgufError::Io {
        file: out_dir.display().to_string(),
        op,
        source,
    };
    std::fs::create_dir_all(out_dir).map_err(|e| io("create", e))?;
    let st_path = out_dir.join("model.safetensors");
    let st_name = st_path.display().to_string();
    let arch = g.architecture().unwrap_or("").to_string();
    let (heads, heads_kv) = head_counts(g);
    let mut report = ImportReport::default();
    let mut plan = Plan::new(&st_name, false);
    plan.metadata.insert("gguf_source".into(), g.file.clone());
    plan.metadata
        .insert("gguf_architecture".into(), arch.clone());
    let mut jobs: Vec<(String, Source<'_>)> = Vec::new();
    for t in &g.tensors {
        let format = format_of(g, t)?;
        let spec = format.spec();
        let (rows, cols) = t.logical_shape();
        let (rows, cols) = (to_usize(g, t, rows)?, to_usize(g, t, cols)?);
        let nbytes = to_usize(g, t, t.nbytes)?;
        let target = hf_target(&arch, t.name, heads, heads_kv).unwrap_or_else(|| {
            report.kept.push(t.name.to_string());
            Target::One(t.name.to_string())
        });
        let dense = dense_elem(format).is_some();
        let add = |plan: &mut Plan, name: &str, dims: &[u64], rows: usize| -> Result<()> {
            if dense {
                plan.add_dense(name, format, dims)?;
            } else {
                plan.add_quantized(name, format, rows, cols, DEFAULT_ROTATION_SEED)?;
            }
            Ok(())
        };
        match target {
            Target::One(name) => {
                add(&mut plan, &name, &t.torch_shape(), rows)?;
                jobs.push((
                    name,
                    Source::Slice {
                        t,
                        start: 0,
                        len: nbytes,
                    },
                ));
            }
            Target::Experts(template) => {
                let n_expert = if t.dims.len() == 3 {
                    to_usize(g, t, t.dims[2])?
                } else {
                    0
                };
                if n_expert == 0 || !rows.is_multiple_of(n_expert) {
                    return Err(GgufError::Metadata {
                        file: g.file.clone(),
                        msg: format!(
                            "tensor {:?}: stacked experts need 3 dimensions, got {:?}",
                            t.name, t.dims
                        ),
                    });
                }
                let per_rows = rows / n_expert;
                let per_bytes = nbytes / n_expert;
                let dims = [per_rows as u64, cols as u64];
                for e in 0..n_expert {
                    let name = template.replace("{e}", &e.to_string());
                    add(&mut plan, &name, &dims, per_rows)?;
                    jobs.push((
                        name,
                        Source::Slice {
                            t,
                            start: e * per_bytes,
                            len: per_bytes,
                        },
                    ));
                }
            }
            Target::Unpermute { name, heads } => {
                // A 1-D tensor (a bias) is permuted element by element: one "row" per value,
                // possible only for dense types.
                let (units, unit_bytes) = if t.dims.len() == 1 {
                    match dense_elem(format) {
                        Some(e) => (cols, e),
                        None => {
                            return Err(GgufError::Metadata {
                                file: g.file.clone(),
                                msg: format!(
                                    "tensor {:?}: a {format} vector cannot be un-permuted element by element",
                                    t.name
                                ),
                            });
                        }
                    }
                } else {
                    let rb = spec.row_bytes(cols).map_err(|source| GgufError::Quant {
                        file: g.file.clone(),
                        tensor: t.name.to_string(),
                        source,
                    })?;
                    (rows, to_usize(g, t, rb)?)
                };
                let order = (0..units)
                    .map(|r| unpermute_row(r, units, heads))
                    .collect::<Option<Vec<usize>>>()
                    .ok_or_else(|| GgufError::Metadata {
                        file: g.file.clone(),
                        msg: format!(
                            "tensor {:?}: {units} rows do not split into {heads} heads of even size, so its RoPE row order cannot be restored",
                            t.name
                        ),
                    })?;
                add(&mut plan, &name, &t.torch_shape(), rows)?;
                jobs.push((
                    name,
                    Source::Rows {
                        t,
                        row_bytes: unit_bytes,
                        order,
                    },
                ));
            }
        }
    }
    if g.tensors
        .iter()
        .any(|t| t.name.ends_with("attn_k_b.weight"))
    {
        report.warnings.push(
            "this deepseek2 file stores MLA's kv_b_proj split and transposed (attn_k_b, attn_v_b); \
             they are imported as self_attn.k_b_proj / self_attn.v_b_proj in llama.cpp's absorbed layout, \
             since a transpose cannot be done block for block"
                .to_string(),
        );
    }
    if !report.kept.is_empty() {
        report.warnings.push(format!(
            "{} tensor(s) have no Hugging Face name and keep their GGUF name: {}",
            report.kept.len(),
            report.kept.join(", ")
        ));
    }
    let writer: Writer = plan.create(&st_path)?;
    jobs.par_iter().try_for_each(|(name, src)| -> Result<()> {
        match src {
            Source::Slice { t, start, len } => {
                let data = g.tensor_data(t);
                writer.write_at(name, 0, &data[*start..*start + *len])?;
                progress(*len as u64);
            }
            Source::Rows {
                t,
                row_bytes,
                order,
            } => {
                let data = g.tensor_data(t);
                let mut buf = Vec::with_capacity(data.len());
                for &r in order {
                    buf.extend_from_slice(&data[r * row_bytes..(r + 1) * row_bytes]);
                }
                writer.write_at(name, 0, &buf)?;
                progress(buf.len() as u64);
            }
        }
        Ok(())
    })?;
    writer.finish()?;
    report.written = jobs.len();

    let write_json = |name: &str, v: &serde_json::Value| -> Result<()> {
        let p = out_dir.join(name);
        let text = serde_json::to_string_pretty(v).unwrap_or_default();
        std::fs::write(&p, text + "\n").map_err(|source| GgufError::Io {
            file: p.display().to_string(),
            op: "write",
            source,
        })
    };
    match hf_config(g) {
        Ok(c) => {
            write_json("config.json", &c)?;
            report.config = true;
        }
        Err(e) => report.warnings.push(format!("no config.json written: {e}")),
    }
    let meta: serde_json::Map<String, serde_json::Value> = g
        .metadata
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_json(None)))
        .collect();
    write_json("gguf_metadata.json", &serde_json::Value::Object(meta))?;
    Ok(report)
}

/// The Hugging Face name and role a GGUF tensor gets on import (its own name and the role
/// of that name when it has no Hugging Face counterpart). Stacked experts report the first
/// expert's name.
pub fn hf_name_and_role(g: &Gguf<'_>, t: &TensorInfo<'_>) -> (String, Role) {
    let arch = g.architecture().unwrap_or("");
    let (heads, kv) = head_counts(g);
    let name = match hf_target(arch, t.name, heads, kv) {
        Some(Target::One(n)) | Some(Target::Unpermute { name: n, .. }) => n,
        Some(Target::Experts(tpl)) => tpl.replace("{e}", "0"),
        None => t.name.to_string(),
    };
    let role = classify(&name);
    (name, role)
}
