//! Opening containers: one safetensors file or a sharded set, memory-mapped, validated, and
//! resolved tensor by tensor into (format, logical [O, I], bytes).
//!
//! Opening reads only headers: the data sections are mapped, never touched, until a caller
//! asks for a tensor's bytes. Resolution is pure arithmetic over the header (stamp or
//! legacy inference), so opening and resolving a large container costs no tensor I/O.

use crate::error::{ContainerError, Result, names};
use crate::header::{self, Dtype, Header, TensorEntry};
use crate::legacy::{self, Inferred};
use crate::stamp::{SIDECAR_SUFFIX, STAMP_PREFIX, Stamp, sidecar_name};
use memmap2::Mmap;
use quant_core::registry::DEFAULT_ROTATION_SEED;
use quant_core::{Format, QTensor};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// The bytes of one file: a read-only map, or an owned buffer (tests, fuzzing).
pub enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// One safetensors file of a container.
pub struct Shard {
    /// The name used in messages (the path as given).
    pub file: String,
    pub bytes: Bytes,
    pub header: Header,
}

impl Shard {
    /// Maps and validates one file.
    pub fn open(path: &Path) -> Result<Shard> {
        let file = path.display().to_string();
        let f = std::fs::File::open(path).map_err(|e| ContainerError::io(&file, "open", e))?;
        let len = f
            .metadata()
            .map_err(|e| ContainerError::io(&file, "stat", e))?
            .len();
        if len < 8 {
            // Mapping an empty file fails on some platforms; the parser names the problem.
            return Err(ContainerError::TooShort { file, len });
        }
        // SAFETY: the map is read-only and private to this process. Another process that
        // truncates or rewrites the file while it is mapped can change the bytes under us
        // (or fault the reads); that is the documented contract of memmap2 and of every
        // mmap-based safetensors reader. All offsets are validated against the mapped
        // length before slicing, so a concurrent change can corrupt values, never index
        // out of bounds in safe code.
        let map = unsafe { Mmap::map(&f) }.map_err(|e| ContainerError::io(&file, "mmap", e))?;
        Shard::from_bytes(file, Bytes::Mapped(map))
    }

    /// Validates a file already in memory.
    pub fn from_bytes(file: String, bytes: Bytes) -> Result<Shard> {
        let header = header::parse(&file, &bytes)?;
        Ok(Shard {
            file,
            bytes,
            header,
        })
    }

    /// The bytes of a validated entry.
    pub fn data(&self, e: &TensorEntry) -> &[u8] {
        // Offsets were checked against data_len in `header::parse`, which also bounds
        // data_start + data_len by the file length.
        let start = (self.header.data_start + e.begin) as usize;
        let end = (self.header.data_start + e.end) as usize;
        &self.bytes[start..end]
    }
}

/// Where a tensor lives: shard index and entry index.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TensorId {
    pub shard: usize,
    pub entry: usize,
}

/// How a tensor's format was decided (the `inspect` column).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum How {
    /// A stamp named it and the byte counts agree.
    Stamp,
    /// A plain float tensor (F32/F16/BF16 dtype), as Hugging Face checkpoints hold.
    Dense,
    /// Unstamped legacy tensor, one format fits.
    Inferred,
    /// Unstamped legacy tensor, several decode-identical formats fit.
    Equivalent(&'static str),
    /// Unstamped legacy tensor, the incumbent won a collision.
    Incumbent(&'static str),
}

impl How {
    pub fn label(&self) -> &'static str {
        match self {
            How::Stamp => "stamp",
            How::Dense => "dense",
            How::Inferred => "inferred",
            How::Equivalent(_) => "equivalent",
            How::Incumbent(_) => "incumbent",
        }
    }
    pub fn rule(&self) -> Option<&'static str> {
        match self {
            How::Stamp | How::Dense | How::Inferred => None,
            How::Equivalent(r) | How::Incumbent(r) => Some(r),
        }
    }
}

/// A tensor whose format and logical shape are known and whose byte counts agree.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub name: String,
    pub format: Format,
    pub rows: usize,
    pub cols: usize,
    /// The stored shape of the weight tensor (for dense tensors, the original N-D shape).
    pub dims: Vec<u64>,
    pub seed: u64,
    pub how: How,
    pub weights: TensorId,
    pub scales: Option<TensorId>,
    pub weight_bytes: u64,
    pub scale_bytes: u64,
}

/// A non-float, unstamped tensor that is not a legacy quantized weight either (e.g. an
/// HF FP8 checkpoint's F8_E4M3 weight or its scale_inv): readable as raw bytes only.
#[derive(Clone, Debug)]
pub struct RawTensor {
    pub name: String,
    pub dtype: Dtype,
    pub dims: Vec<u64>,
    pub id: TensorId,
}

/// What a container entry resolves to.
#[derive(Clone, Debug)]
pub enum Item {
    Tensor(Resolved),
    Raw(RawTensor),
}

/// Logical shapes for unstamped tensors, e.g. from a model config: name -> [O, I].
pub type ShapeHints = HashMap<String, (usize, usize)>;

/// An opened container: one or more validated shards and a name index over them.
pub struct Container {
    /// The path as given (a file, an index JSON or a folder).
    pub path: String,
    pub shards: Vec<Shard>,
    index: HashMap<String, TensorId>,
    /// Tensor names in container order (shard order, then header order).
    order: Vec<String>,
    /// Per-tensor stamps (validated JSON text kept; parsed on resolve).
    stamps: HashMap<String, (usize, String)>,
}

#[derive(Deserialize)]
struct IndexFile {
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_json::Value>,
    weight_map: BTreeMap<String, String>,
}

/// The index file of a sharded Hugging Face checkpoint.
pub const INDEX_NAME: &str = "model.safetensors.index.json";

impl Container {
    /// Opens a `.safetensors` file, a `*.index.json`, or a folder holding either
    /// (`model.safetensors.index.json` first, then `model.safetensors`).
    pub fn open(path: impl AsRef<Path>) -> Result<Container> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        if path.is_dir() {
            let idx = path.join(INDEX_NAME);
            if idx.is_file() {
                return Container::open_index(&idx);
            }
            let single = path.join("model.safetensors");
            if single.is_file() {
                return Container::from_shards(shown, vec![Shard::open(&single)?]);
            }
            return Err(ContainerError::io(
                &shown,
                "find a container in",
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("no {INDEX_NAME} or model.safetensors"),
                ),
            ));
        }
        if path.to_string_lossy().ends_with(".json") {
            return Container::open_index(path);
        }
        Container::from_shards(shown, vec![Shard::open(path)?])
    }

    /// Opens a sharded set through its index. Shard names must be plain file names in the
    /// index's folder; every mapped tensor must be in the shard named, and no tensor may be
    /// held by two shards.
    pub fn open_index(index_path: &Path) -> Result<Container> {
        let file = index_path.display().to_string();
        let text = std::fs::read(index_path).map_err(|e| ContainerError::io(&file, "read", e))?;
        let idx: IndexFile =
            serde_json::from_slice(&text).map_err(|e| ContainerError::IndexJson {
                file: file.clone(),
                msg: e.to_string(),
            })?;
        let dir = index_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let mut shard_names: Vec<&String> = Vec::new();
        for (tensor, shard) in &idx.weight_map {
            let plain = Path::new(shard)
                .file_name()
                .is_some_and(|n| n == shard.as_str())
                && shard != ".."
                && shard != ".";
            if !plain {
                return Err(ContainerError::ShardPath {
                    file,
                    tensor: tensor.clone(),
                    shard: shard.clone(),
                });
            }
            if !shard_names.contains(&shard) {
                shard_names.push(shard);
            }
        }
        shard_names.sort();
        let shards = shard_names
            .iter()
            .map(|s| Shard::open(&dir.join(s)))
            .collect::<Result<Vec<_>>>()?;
        let c = Container::from_shards(file.clone(), shards)?;
        for (tensor, shard) in &idx.weight_map {
            let held = c
                .index
                .get(tensor)
                .map(|id| Path::new(&c.shards[id.shard].file).file_name());
            let ok = held.flatten().is_some_and(|n| n == shard.as_str());
            if !ok {
                return Err(ContainerError::IndexTensorMissing {
                    file,
                    tensor: tensor.clone(),
                    shard: shard.clone(),
                });
            }
        }
        Ok(c)
    }

    /// Builds a container from validated shards (a single file is a one-shard set).
    pub fn from_shards(path: String, shards: Vec<Shard>) -> Result<Container> {
        let mut index = HashMap::new();
        let mut order = Vec::new();
        let mut stamps = HashMap::new();
        for (s, shard) in shards.iter().enumerate() {
            for (k, e) in shard.header.entries.iter().enumerate() {
                if let Some(prev) = index.insert(e.name.clone(), TensorId { shard: s, entry: k }) {
                    return Err(ContainerError::DuplicateAcrossShards {
                        file: path,
                        tensor: e.name.clone(),
                        shard_a: shards[prev.shard].file.clone(),
                        shard_b: shard.file.clone(),
                    });
                }
                order.push(e.name.clone());
            }
        }
        for (s, shard) in shards.iter().enumerate() {
            for (key, value) in &shard.header.metadata {
                let Some(tensor) = key.strip_prefix(STAMP_PREFIX) else {
                    continue;
                };
                if shard.header.get(tensor).is_none() {
                    return Err(ContainerError::StampWithoutTensor {
                        file: shard.file.clone(),
                        key: key.clone(),
                        tensor: tensor.to_string(),
                    });
                }
                stamps.insert(tensor.to_string(), (s, value.clone()));
            }
        }
        Ok(Container {
            path,
            shards,
            index,
            order,
            stamps,
        })
    }

    /// Opens one file already in memory (tests, fuzzing).
    pub fn from_bytes(file: &str, bytes: Vec<u8>) -> Result<Container> {
        let shard = Shard::from_bytes(file.to_string(), Bytes::Owned(bytes))?;
        Container::from_shards(file.to_string(), vec![shard])
    }

    /// Every stored tensor name, sidecars included, in container order.
    pub fn names(&self) -> &[String] {
        &self.order
    }

    pub fn entry(&self, id: TensorId) -> &TensorEntry {
        &self.shards[id.shard].header.entries[id.entry]
    }

    pub fn file_of(&self, id: TensorId) -> &str {
        &self.shards[id.shard].file
    }

    pub fn id(&self, name: &str) -> Option<TensorId> {
        self.index.get(name).copied()
    }

    /// The stored bytes of a tensor.
    pub fn data(&self, id: TensorId) -> &[u8] {
        let shard = &self.shards[id.shard];
        shard.data(&shard.header.entries[id.entry])
    }

    /// The stamp text of `tensor`, if it has one.
    pub fn stamp_text(&self, tensor: &str) -> Option<&str> {
        self.stamps.get(tensor).map(|(_, s)| s.as_str())
    }

    /// Whether `name` is the scale sidecar of another tensor in this container.
    pub fn is_sidecar(&self, name: &str) -> bool {
        name.strip_suffix(SIDECAR_SUFFIX)
            .is_some_and(|base| self.index.contains_key(base))
    }

    /// Names of the primary tensors (everything but sidecars), in container order.
    pub fn primary_names(&self) -> impl Iterator<Item = &str> {
        self.order
            .iter()
            .map(String::as_str)
            .filter(|n| !self.is_sidecar(n))
    }

    /// Resolves every primary tensor; each result stands alone, so one bad tensor does
    /// not hide the rest.
    pub fn resolve_all(&self, hints: &ShapeHints) -> Vec<(String, Result<Item>)> {
        self.primary_names()
            .map(|n| (n.to_string(), self.resolve(n, hints)))
            .collect()
    }

    /// Resolves one primary tensor.
    pub fn resolve(&self, name: &str, hints: &ShapeHints) -> Result<Item> {
        let id = self.id(name).ok_or_else(|| ContainerError::MissingTensor {
            file: self.path.clone(),
            tensor: name.to_string(),
        })?;
        let file = self.file_of(id).to_string();
        let entry = self.entry(id);
        let side_name = sidecar_name(name);
        let side = self.id(&side_name);
        let side_bytes = side.map_or(0, |s| self.entry(s).nbytes());
        if let Some(text) = self.stamp_text(name) {
            let stamp = Stamp::parse(&file, name, text)?;
            return self
                .resolve_stamped(name, id, stamp, side)
                .map(Item::Tensor);
        }
        // Unstamped: float dtypes are dense tensors; U8 is the legacy layout.
        let dense = match entry.dtype {
            Dtype::F32 => Some(Format::F32),
            Dtype::F16 => Some(Format::F16),
            Dtype::Bf16 => Some(Format::Bf16),
            Dtype::U8 => None,
            Dtype::Bool
            | Dtype::I8
            | Dtype::F8E5m2
            | Dtype::F8E4m3
            | Dtype::F8E8m0
            | Dtype::I16
            | Dtype::U16
            | Dtype::I32
            | Dtype::U32
            | Dtype::I64
            | Dtype::U64
            | Dtype::F64 => {
                return Ok(Item::Raw(RawTensor {
                    name: name.to_string(),
                    dtype: entry.dtype,
                    dims: entry.shape.clone(),
                    id,
                }));
            }
        };
        if let Some(format) = dense {
            let (rows, cols) = dense_shape(&entry.shape);
            if rows == 0 || cols == 0 || side.is_some() {
                // Empty tensors and float tensors with a sidecar are not dense weights.
                return Ok(Item::Raw(RawTensor {
                    name: name.to_string(),
                    dtype: entry.dtype,
                    dims: entry.shape.clone(),
                    id,
                }));
            }
            return Ok(Item::Tensor(Resolved {
                name: name.to_string(),
                format,
                rows,
                cols,
                dims: entry.shape.clone(),
                seed: DEFAULT_ROTATION_SEED,
                how: How::Dense,
                weights: id,
                scales: None,
                weight_bytes: entry.nbytes(),
                scale_bytes: 0,
            }));
        }
        self.resolve_legacy(name, id, side, side_bytes, hints)
    }

    fn resolve_stamped(
        &self,
        name: &str,
        id: TensorId,
        stamp: Stamp,
        side: Option<TensorId>,
    ) -> Result<Resolved> {
        let file = self.file_of(id).to_string();
        let entry = self.entry(id);
        let q = |source| ContainerError::Quant {
            file: file.clone(),
            tensor: name.to_string(),
            source,
        };
        let expected_dtype = header::dense_dtype(stamp.format).unwrap_or(Dtype::U8);
        if entry.dtype != expected_dtype {
            return Err(ContainerError::WrongDtype {
                file,
                tensor: name.to_string(),
                format: stamp.format,
                expected: expected_dtype.name(),
                got: entry.dtype.name().to_string(),
            });
        }
        let got_w = entry.nbytes();
        let got_s = side.map_or(0, |s| self.entry(s).nbytes());
        match check_stamp(&stamp, got_w, side.map(|s| self.entry(s).nbytes())) {
            Ok(()) => {}
            Err(StampCheck::Quant(source)) => return Err(q(source)),
            Err(StampCheck::MissingSidecar { expected }) => {
                return Err(ContainerError::MissingSidecar {
                    file,
                    tensor: name.to_string(),
                    sidecar: sidecar_name(name),
                    format: stamp.format,
                    expected,
                });
            }
            Err(StampCheck::UnexpectedSidecar) => {
                return Err(ContainerError::UnexpectedSidecar {
                    file,
                    tensor: name.to_string(),
                    sidecar: sidecar_name(name),
                    format: stamp.format,
                });
            }
            Err(StampCheck::Mismatch { want_w, want_s }) => {
                return Err(ContainerError::StampMismatch {
                    file,
                    tensor: name.to_string(),
                    format: stamp.format,
                    rows: stamp.rows,
                    cols: stamp.cols,
                    want_w,
                    want_s,
                    got_w,
                    got_s,
                });
            }
        }
        Ok(Resolved {
            name: name.to_string(),
            format: stamp.format,
            rows: stamp.rows,
            cols: stamp.cols,
            dims: entry.shape.clone(),
            seed: stamp.seed,
            how: How::Stamp,
            weights: id,
            scales: side,
            weight_bytes: got_w,
            scale_bytes: got_s,
        })
    }

    fn resolve_legacy(
        &self,
        name: &str,
        id: TensorId,
        side: Option<TensorId>,
        side_bytes: u64,
        hints: &ShapeHints,
    ) -> Result<Item> {
        let file = self.file_of(id).to_string();
        let entry = self.entry(id);
        let wb = entry.nbytes();
        let (rows, cols, inf) = if let Some(&(rows, cols)) = hints.get(name) {
            match legacy::infer(rows, cols, wb, side_bytes) {
                Ok(inf) => (rows, cols, inf),
                Err(r) => return Err(refusal(&file, name, rows, cols, wb, side_bytes, r)),
            }
        } else if let [o, rb] = entry.shape.as_slice() {
            let rows = usize::try_from(*o).unwrap_or(usize::MAX);
            let mut found = legacy::shapes_from_rows(rows, *rb, side_bytes);
            match found.len() {
                1 => match found.remove(0) {
                    (cols, Ok(inf)) => (rows, cols, inf),
                    (cols, Err(r)) => {
                        return Err(refusal(&file, name, rows, cols, wb, side_bytes, r));
                    }
                },
                0 => {
                    if side.is_none() {
                        // A U8 tensor without sidecar that fits no legacy format: raw bytes.
                        return Ok(Item::Raw(RawTensor {
                            name: name.to_string(),
                            dtype: entry.dtype,
                            dims: entry.shape.clone(),
                            id,
                        }));
                    }
                    return Err(ContainerError::NoShape {
                        file,
                        tensor: name.to_string(),
                        dtype: entry.dtype.name().to_string(),
                        shape: entry.shape.clone(),
                    });
                }
                _ => {
                    let list = found
                        .iter()
                        .map(|(c, r)| match r {
                            Ok(i) => format!("{} [{rows}, {c}]", i.format),
                            Err(r) => format!(
                                "[{rows}, {c}] refused ({}: {})",
                                r.rule,
                                names(&r.candidates)
                            ),
                        })
                        .collect::<Vec<_>>()
                        .join("; ");
                    return Err(ContainerError::AmbiguousShape {
                        file,
                        tensor: name.to_string(),
                        shape: entry.shape.clone(),
                        candidates: list,
                    });
                }
            }
        } else {
            if side.is_none() {
                return Ok(Item::Raw(RawTensor {
                    name: name.to_string(),
                    dtype: entry.dtype,
                    dims: entry.shape.clone(),
                    id,
                }));
            }
            return Err(ContainerError::NoShape {
                file,
                tensor: name.to_string(),
                dtype: entry.dtype.name().to_string(),
                shape: entry.shape.clone(),
            });
        };
        let how = match inf.how {
            Inferred::Unique => How::Inferred,
            Inferred::Equivalent { rule, .. } => How::Equivalent(rule),
            Inferred::Incumbent { rule, .. } => How::Incumbent(rule),
        };
        Ok(Item::Tensor(Resolved {
            name: name.to_string(),
            format: inf.format,
            rows,
            cols,
            dims: entry.shape.clone(),
            seed: DEFAULT_ROTATION_SEED,
            how,
            weights: id,
            scales: side,
            weight_bytes: wb,
            scale_bytes: side_bytes,
        }))
    }

    /// A borrowed quantized view of a resolved tensor, straight from the map.
    pub fn qtensor(&self, r: &Resolved) -> Result<QTensor<'_>> {
        let w = self.data(r.weights);
        let s = r.scales.map_or(&[][..], |id| self.data(id));
        QTensor::new(r.format, r.rows, r.cols, w, s, r.seed).map_err(|source| {
            ContainerError::Quant {
                file: self.file_of(r.weights).to_string(),
                tensor: r.name.clone(),
                source,
            }
        })
    }
}

/// Why stored bytes disagree with a stamp.
#[derive(Clone, Debug, PartialEq)]
pub enum StampCheck {
    Quant(quant_core::QuantError),
    MissingSidecar { expected: u64 },
    UnexpectedSidecar,
    Mismatch { want_w: u64, want_s: u64 },
}

/// Cross-checks a stamp against the stored weight bytes and the sidecar's bytes (`None`
/// when there is no sidecar), through the registry's byte counts only. The stamped half of
/// the resolver: the stamp decides the format, the bytes must agree.
pub fn check_stamp(stamp: &Stamp, got_w: u64, got_s: Option<u64>) -> Result<(), StampCheck> {
    let spec = stamp.format.spec();
    let want_w = spec
        .weight_bytes(stamp.rows, stamp.cols)
        .map_err(StampCheck::Quant)?;
    let want_s = spec
        .scale_bytes(stamp.rows, stamp.cols)
        .map_err(StampCheck::Quant)?;
    match got_s {
        None if want_s > 0 => return Err(StampCheck::MissingSidecar { expected: want_s }),
        Some(_) if want_s == 0 => return Err(StampCheck::UnexpectedSidecar),
        None | Some(_) => {}
    }
    if got_w != want_w || got_s.unwrap_or(0) != want_s {
        return Err(StampCheck::Mismatch { want_w, want_s });
    }
    Ok(())
}

/// Logical [O, I] of a dense tensor: the last dimension is I, the rest fold into O
/// (a 1-D tensor is one row; a scalar is [1, 1]).
pub fn dense_shape(dims: &[u64]) -> (usize, usize) {
    let cols = dims.last().copied().unwrap_or(1);
    let rows = dims[..dims.len().saturating_sub(1)]
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d));
    // The header check bounded dims' product by the file size, so these fit.
    (
        rows.and_then(|r| usize::try_from(r).ok()).unwrap_or(0),
        usize::try_from(cols).unwrap_or(0),
    )
}

fn refusal(
    file: &str,
    tensor: &str,
    rows: usize,
    cols: usize,
    wb: u64,
    sb: u64,
    r: legacy::Refusal,
) -> ContainerError {
    if r.candidates.is_empty() {
        return ContainerError::NoLegacyMatch {
            file: file.to_string(),
            tensor: tensor.to_string(),
            rows,
            cols,
            weight_bytes: wb,
            scale_bytes: sb,
        };
    }
    ContainerError::Ambiguous {
        file: file.to_string(),
        tensor: tensor.to_string(),
        rule: r.rule,
        rows,
        cols,
        weight_bytes: wb,
        scale_bytes: sb,
        candidates: r.candidates,
    }
}

/// Formats a resolution for messages: `int8-row (incumbent: <rule>)`.
pub fn describe(r: &Resolved) -> String {
    match r.how.rule() {
        Some(rule) => format!("{} ({}: {rule})", r.format, r.how.label()),
        None => format!("{} ({})", r.format, r.how.label()),
    }
}
