//! The GGUF side of the CLI: `inspect MODEL.gguf [--json]`, `dequantize MODEL.gguf -o
//! OUT.safetensors` and `import-gguf MODEL.gguf -o OUT` (see `container_io::gguf`).

use super::{Fail, R, emit, progress};
use container_io::gguf::{GgufFile, Value, import};
use quant_core::Format;
use serde_json::json;
use std::path::Path;

/// Arrays longer than this are listed by their first elements and their length.
const TEXT_ARRAY_HEAD: usize = 8;
const JSON_ARRAY_HEAD: usize = 64;

fn short_value(v: &Value<'_>) -> String {
    match v {
        Value::String(b) => {
            let s = String::from_utf8_lossy(b);
            if s.chars().count() > 80 {
                format!("{:?}...", s.chars().take(80).collect::<String>())
            } else {
                format!("{s:?}")
            }
        }
        Value::Array(a) => {
            let head: Vec<String> = a
                .iter()
                .take(TEXT_ARRAY_HEAD)
                .map(|e| short_value(&e))
                .collect();
            let more = if a.len > TEXT_ARRAY_HEAD as u64 {
                ", ..."
            } else {
                ""
            };
            format!(
                "[{}{more}] ({} x {})",
                head.join(", "),
                a.len,
                a.elem.name()
            )
        }
        other => other.to_json(None).to_string(),
    }
}

/// Lists a GGUF file's metadata and tensors.
pub fn inspect(file: &Path, json_out: bool) -> R {
    let f = GgufFile::open(file)?;
    let g = f.parse()?;
    let tensors: Vec<serde_json::Value> = g
        .tensors
        .iter()
        .map(|t| {
            let (rows, cols) = t.logical_shape();
            let (hf, role) = import::hf_name_and_role(&g, t);
            json!({
                "name": t.name,
                "ggml_type": t.ty.name,
                "format": t.ty.format().map(Format::name),
                "shape": [rows, cols],
                "ne": t.dims,
                "bytes": t.nbytes,
                "offset": g.data_start + t.offset,
                "hf_name": hf,
                "role": role.name(),
            })
        })
        .collect();
    if json_out {
        let metadata: serde_json::Map<String, serde_json::Value> = g
            .metadata
            .iter()
            .map(|kv| {
                (
                    kv.key.to_string(),
                    json!({ "type": kv.value.value_type().name(), "value": kv.value.to_json(Some(JSON_ARRAY_HEAD)) }),
                )
            })
            .collect();
        let doc = json!({
            "file": g.file,
            "container": "gguf",
            "version": g.version,
            "alignment": g.alignment,
            "data_start": g.data_start,
            "metadata": metadata,
            "tensors": tensors,
        });
        out!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    out!(
        "{}: GGUF v{}, {} metadata entries, {} tensors, alignment {}, data at byte {}",
        g.file,
        g.version,
        g.metadata.len(),
        g.tensors.len(),
        g.alignment,
        g.data_start
    );
    out!("metadata:");
    for kv in &g.metadata {
        out!(
            "  {:<44} {:<8} {}",
            kv.key,
            kv.value.value_type().name(),
            short_value(&kv.value)
        );
    }
    out!(
        "{:<34} {:<8} {:<11} {:>16} {:>10}  {:<52} role",
        "tensor",
        "type",
        "format",
        "shape [O, I]",
        "bytes",
        "hugging face name"
    );
    let mut unsupported = 0;
    for (t, j) in g.tensors.iter().zip(&tensors) {
        let (rows, cols) = t.logical_shape();
        let fmt = t.ty.format().map_or_else(
            || {
                unsupported += 1;
                "unsupported".to_string()
            },
            |f| f.name().to_string(),
        );
        out!(
            "{:<34} {:<8} {:<11} {:>16} {:>10}  {:<52} {}",
            t.name,
            t.ty.name,
            fmt,
            format!("[{rows}, {cols}]"),
            t.nbytes,
            j["hf_name"].as_str().unwrap_or("-"),
            j["role"].as_str().unwrap_or("-")
        );
    }
    if unsupported > 0 {
        eprintln!(
            "tessera: note: {unsupported} tensor(s) have GGML types tessera has no format for; dequantize and import-gguf will refuse them"
        );
    }
    Ok(())
}

/// Decodes every tensor of a GGUF file into a plain safetensors file.
pub fn dequantize(input: &Path, output: &Path, dtype: Format) -> R {
    let f = GgufFile::open(input)?;
    let g = f.parse()?;
    let total: u64 = g.tensors.iter().map(|t| t.nbytes).sum();
    let pb = progress(total, "dequantize");
    let t0 = std::time::Instant::now();
    let n = import::dequantize(&g, output, dtype, &|b| pb.inc(b))?;
    pb.finish_and_clear();
    out!(
        "{}: wrote {n} tensors ({dtype}) from {total} GGUF bytes in {:.2?}",
        output.display(),
        t0.elapsed()
    );
    Ok(())
}

/// Imports a GGUF file into a stamped container folder.
pub fn import(input: &Path, output: &Path) -> R {
    let f = GgufFile::open(input)?;
    let g = f.parse()?;
    let total: u64 = g.tensors.iter().map(|t| t.nbytes).sum();
    let pb = progress(total, "import-gguf");
    let t0 = std::time::Instant::now();
    let report = import::import(&g, output, &|b| pb.inc(b)).map_err(|e| Fail(e.to_string()))?;
    pb.finish_and_clear();
    for w in &report.warnings {
        eprintln!("tessera: warning: {w}");
    }
    out!(
        "{}: wrote {} tensors ({} GGUF bytes, copied as stored) in {:.2?}{}",
        output.join("model.safetensors").display(),
        report.written,
        total,
        t0.elapsed(),
        if report.config {
            "; config.json written"
        } else {
            ""
        }
    );
    Ok(())
}
