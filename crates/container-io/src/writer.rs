//! Writing containers: plan every tensor first (names, dtypes, shapes, byte counts from the
//! registry), write the header, then fill the data section by positional writes, so tensors
//! can be encoded in parallel and streamed row block by row block without ever holding a
//! whole output tensor in memory.
//!
//! Every quantized or dense tensor planned through [`Plan::add_quantized`] /
//! [`Plan::add_dense`] is stamped. In legacy-unstamped mode the stamp is left out, and a
//! tensor is refused unless the unstamped reader would resolve it to exactly the format
//! written (`legacy::check_unstamped_round_trip`).

use crate::error::{ContainerError, Result};
use crate::header::Dtype;
use crate::legacy;
use crate::stamp::{Stamp, sidecar_name, stamp_key};
use quant_core::Format;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::Path;

/// Metadata key holding the container version (outside the per-tensor stamp namespace).
pub const VERSION_KEY: &str = "tessera_container_version";

/// Each planned tensor's absolute (offset, length) in the file.
pub type Offsets = HashMap<String, (u64, u64)>;

/// Where a written container's data section starts: a multiple of this from the file's
/// start (a mapping starts on a page). The CPU kernels read weights with 32- and 64-byte
/// loads, and a stream that starts 8 or 16 bytes into a line splits half or all of them
/// across two lines: one thread over [2048 x 4096] int4-row in cache, 113 against 121 us
/// with the weights 16 bytes into a line (`incache`, `TESSERA_INCACHE_OFFSET`, 2026-12-07).
pub const DATA_ALIGN: usize = 64;

/// One tensor of a plan.
#[derive(Clone, Debug)]
pub struct PlannedTensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub nbytes: u64,
}

/// The tensors and metadata of a file to be written.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The output name used in messages.
    pub file: String,
    pub tensors: Vec<PlannedTensor>,
    pub metadata: BTreeMap<String, String>,
    pub legacy_unstamped: bool,
    index: HashMap<String, usize>,
}

impl Plan {
    pub fn new(file: &str, legacy_unstamped: bool) -> Plan {
        let mut metadata = BTreeMap::new();
        if !legacy_unstamped {
            metadata.insert(
                VERSION_KEY.to_string(),
                crate::stamp::CONTAINER_VERSION.to_string(),
            );
        }
        Plan {
            file: file.to_string(),
            tensors: Vec::new(),
            metadata,
            legacy_unstamped,
            index: HashMap::new(),
        }
    }

    fn err(&self, tensor: &str, msg: String) -> ContainerError {
        ContainerError::Plan {
            file: self.file.clone(),
            tensor: tensor.to_string(),
            msg,
        }
    }

    fn push(&mut self, name: &str, dtype: Dtype, shape: Vec<u64>) -> Result<()> {
        if self.index.contains_key(name) {
            return Err(self.err(
                name,
                "planned twice (a tensor name collides with another or with a sidecar)".into(),
            ));
        }
        let nbytes = shape
            .iter()
            .try_fold(dtype.size(), |a, &d| a.checked_mul(d))
            .ok_or_else(|| {
                self.err(name, format!("byte count of {dtype} x {shape:?} overflows"))
            })?;
        self.index.insert(name.to_string(), self.tensors.len());
        self.tensors.push(PlannedTensor {
            name: name.to_string(),
            dtype,
            shape,
            nbytes,
        });
        Ok(())
    }

    /// Plans a quantized tensor: `<name>` U8 `[rows, row_bytes]` and, when the format keeps
    /// scales apart, `<name>.qs` U8 `[scale_bytes]`; stamped unless legacy-unstamped.
    pub fn add_quantized(
        &mut self,
        name: &str,
        format: Format,
        rows: usize,
        cols: usize,
        seed: u64,
    ) -> Result<()> {
        let spec = format.spec();
        let q = |source| ContainerError::Quant {
            file: self.file.clone(),
            tensor: name.to_string(),
            source,
        };
        spec.check_shape(rows, cols).map_err(q)?;
        let row_bytes = spec.row_bytes(cols).map_err(q)?;
        let scale_bytes = spec.scale_bytes(rows, cols).map_err(q)?;
        spec.weight_bytes(rows, cols).map_err(q)?;
        if matches!(format, Format::F32 | Format::F16 | Format::Bf16) {
            return self.add_dense(name, format, &[rows as u64, cols as u64]);
        }
        if self.legacy_unstamped {
            legacy::check_unstamped_round_trip(format, rows, cols).map_err(|why| {
                ContainerError::LegacyWouldMisresolve {
                    file: self.file.clone(),
                    tensor: name.to_string(),
                    format,
                    rows,
                    cols,
                    why,
                }
            })?;
        }
        self.push(name, Dtype::U8, vec![rows as u64, row_bytes])?;
        if scale_bytes > 0 {
            self.push(&sidecar_name(name), Dtype::U8, vec![scale_bytes])?;
        }
        if !self.legacy_unstamped {
            self.metadata.insert(
                stamp_key(name),
                Stamp::new(format, rows, cols, seed).to_json(),
            );
        }
        Ok(())
    }

    /// Plans a dense float tensor in its own dtype and original shape, stamped with its
    /// logical [O, I] (leading dimensions folded into O).
    pub fn add_dense(&mut self, name: &str, format: Format, dims: &[u64]) -> Result<()> {
        let dtype = match crate::header::dense_dtype(format) {
            Some(d) => d,
            None => {
                return Err(self.err(name, format!("{format} is not a dense float format")));
            }
        };
        let (rows, cols) = crate::container::dense_shape(dims);
        if rows == 0 || cols == 0 {
            return Err(self.err(name, format!("empty shape {dims:?}")));
        }
        self.push(name, dtype, dims.to_vec())?;
        if !self.legacy_unstamped {
            self.metadata.insert(
                stamp_key(name),
                Stamp::new(
                    format,
                    rows,
                    cols,
                    quant_core::registry::DEFAULT_ROTATION_SEED,
                )
                .to_json(),
            );
        }
        Ok(())
    }

    /// Plans an unstamped tensor of any dtype (checkpoint-style inputs: fixtures and tests).
    pub fn add_raw(&mut self, name: &str, dtype: Dtype, dims: &[u64]) -> Result<()> {
        self.push(name, dtype, dims.to_vec())
    }

    /// Total bytes of the data section.
    pub fn data_len(&self) -> Result<u64> {
        self.tensors
            .iter()
            .try_fold(0u64, |a, t| a.checked_add(t.nbytes))
            .ok_or_else(|| self.err("(all)", "data section size overflows".into()))
    }

    /// The header bytes (length prefix included) and each tensor's absolute offset.
    pub fn header(&self) -> Result<(Vec<u8>, Offsets)> {
        let mut obj = serde_json::Map::new();
        if !self.metadata.is_empty() {
            let meta: serde_json::Map<String, serde_json::Value> = self
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect();
            obj.insert("__metadata__".into(), serde_json::Value::Object(meta));
        }
        let mut rel = Vec::with_capacity(self.tensors.len());
        let mut cursor = 0u64;
        for t in &self.tensors {
            let end = cursor + t.nbytes; // bounded by data_len(), checked below
            obj.insert(
                t.name.clone(),
                serde_json::json!({ "dtype": t.dtype.name(), "shape": t.shape, "data_offsets": [cursor, end] }),
            );
            rel.push((t.name.clone(), cursor, t.nbytes));
            cursor = end;
        }
        self.data_len()?;
        let mut json = serde_json::to_vec(&serde_json::Value::Object(obj))
            .map_err(|e| self.err("(header)", e.to_string()))?;
        // safetensors pads the header with spaces (to 8 bytes); we pad to DATA_ALIGN, so a
        // mapped file's first tensor starts on a cache line (and every tensor after whole
        // lines of tensors before it).
        while (8 + json.len()) % DATA_ALIGN != 0 {
            json.push(b' ');
        }
        let mut out = Vec::with_capacity(8 + json.len());
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        let start = out.len() as u64;
        let offsets = rel
            .into_iter()
            .map(|(n, b, len)| (n, (start + b, len)))
            .collect();
        Ok((out, offsets))
    }

    /// Creates the file: header written, data section sized (sparse until filled).
    pub fn create(self, path: &Path) -> Result<Writer> {
        let file_name = path.display().to_string();
        let (header, offsets) = self.header()?;
        let total = (header.len() as u64)
            .checked_add(self.data_len()?)
            .ok_or_else(|| self.err("(all)", "file size overflows".into()))?;
        let f = File::create(path).map_err(|e| ContainerError::io(&file_name, "create", e))?;
        f.set_len(total)
            .map_err(|e| ContainerError::io(&file_name, "size", e))?;
        let w = Writer {
            file_name,
            file: f,
            offsets,
        };
        w.pwrite(0, &header)?;
        Ok(w)
    }

    /// Builds the whole file in memory; `fill` gives each tensor's bytes (tests, fixtures).
    pub fn to_bytes(&self, mut fill: impl FnMut(&PlannedTensor) -> Vec<u8>) -> Result<Vec<u8>> {
        let (mut out, _) = self.header()?;
        for t in &self.tensors {
            let b = fill(t);
            if b.len() as u64 != t.nbytes {
                return Err(self.err(
                    &t.name,
                    format!("filled with {} bytes, planned {}", b.len(), t.nbytes),
                ));
            }
            out.extend_from_slice(&b);
        }
        Ok(out)
    }
}

/// An output file whose header is written; tensors are filled by [`Writer::write_at`],
/// which may be called from many threads at once.
pub struct Writer {
    file_name: String,
    file: File,
    offsets: Offsets,
}

impl Writer {
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// Writes `bytes` at byte `offset` within tensor `name`.
    pub fn write_at(&self, name: &str, offset: u64, bytes: &[u8]) -> Result<()> {
        let &(start, len) = self.offsets.get(name).ok_or_else(|| ContainerError::Plan {
            file: self.file_name.clone(),
            tensor: name.to_string(),
            msg: "not in the plan".into(),
        })?;
        let end = offset.checked_add(bytes.len() as u64);
        if end.is_none_or(|e| e > len) {
            return Err(ContainerError::Plan {
                file: self.file_name.clone(),
                tensor: name.to_string(),
                msg: format!(
                    "write of {} bytes at {offset} runs past its {len} bytes",
                    bytes.len()
                ),
            });
        }
        self.pwrite(start + offset, bytes)
    }

    fn pwrite(&self, at: u64, bytes: &[u8]) -> Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file
                .write_all_at(bytes, at)
                .map_err(|e| ContainerError::io(&self.file_name, "write", e))
        }
        #[cfg(windows)]
        {
            use std::os::windows::fs::FileExt;
            let mut done = 0usize;
            while done < bytes.len() {
                let n = self
                    .file
                    .seek_write(&bytes[done..], at + done as u64)
                    .map_err(|e| ContainerError::io(&self.file_name, "write", e))?;
                if n == 0 {
                    return Err(ContainerError::io(
                        &self.file_name,
                        "write",
                        std::io::ErrorKind::WriteZero.into(),
                    ));
                }
                done += n;
            }
            Ok(())
        }
    }

    /// Flushes the file to disk.
    pub fn finish(self) -> Result<()> {
        self.file
            .sync_all()
            .map_err(|e| ContainerError::io(&self.file_name, "sync", e))
    }
}

/// Writes a sharded index (`model.safetensors.index.json`) for files already written.
pub fn write_index(
    path: &Path,
    weight_map: &BTreeMap<String, String>,
    total_size: u64,
) -> Result<()> {
    let file = path.display().to_string();
    let v =
        serde_json::json!({ "metadata": { "total_size": total_size }, "weight_map": weight_map });
    let text = serde_json::to_string_pretty(&v).map_err(|e| ContainerError::IndexJson {
        file: file.clone(),
        msg: e.to_string(),
    })?;
    std::fs::write(path, text).map_err(|e| ContainerError::io(&file, "write", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_section_starts_on_a_cache_line_for_any_header_length() {
        // Names of every length from 1 to 80 move the JSON's length through all residues.
        for n in 1..=80 {
            let mut plan = Plan::new("aligned.safetensors", false);
            plan.add_raw(&"w".repeat(n), Dtype::U8, &[3, 64]).unwrap();
            plan.add_raw("b", Dtype::F32, &[5]).unwrap();
            let (header, offsets) = plan.header().unwrap();
            assert_eq!(header.len() % DATA_ALIGN, 0, "name length {n}");
            assert_eq!(offsets[&"w".repeat(n)].0 as usize, header.len());
            let len = u64::from_le_bytes(header[..8].try_into().unwrap()) as usize;
            assert_eq!(8 + len, header.len());
            assert!(header[8..].iter().rev().take_while(|&&b| b == b' ').count() < DATA_ALIGN);
        }
    }
}
