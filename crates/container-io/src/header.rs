//! The safetensors header: dtypes, and a parser that is total over bytes.
//!
//! Layout: 8-byte little-endian header length N, N bytes of JSON (an object mapping tensor
//! names to `{dtype, shape, data_offsets}` plus an optional `__metadata__` object of string
//! values), then the data section. Offsets are relative to the data section.
//!
//! Every check runs before any tensor byte is sliced, in the style of the `safetensors`
//! crate's own validation: the header length is capped by the file and by [`MAX_HEADER`];
//! names and metadata keys must be unique (serde_json would silently keep the last of a
//! duplicate, so the top-level object is read as a list of raw entries); each entry's dtype
//! x shape byte count is computed with checked arithmetic and must equal its span; and the
//! spans, sorted, must tile the data section exactly: no overlap, no gap, no trailing bytes.

use crate::error::{ContainerError, Result};
use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Header length cap, the `safetensors` crate's own (100 MB).
pub const MAX_HEADER: u64 = 100_000_000;

/// The safetensors dtypes this crate reads (unknown ones are refused by name).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    Bool,
    U8,
    I8,
    F8E5m2,
    F8E4m3,
    F8E8m0,
    I16,
    U16,
    F16,
    Bf16,
    I32,
    U32,
    F32,
    I64,
    U64,
    F64,
}

impl Dtype {
    pub const ALL: [Dtype; 16] = [
        Dtype::Bool,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8E5m2,
        Dtype::F8E4m3,
        Dtype::F8E8m0,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::Bf16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::I64,
        Dtype::U64,
        Dtype::F64,
    ];

    /// The name safetensors writes.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "BOOL",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8E5m2 => "F8_E5M2",
            Dtype::F8E4m3 => "F8_E4M3",
            Dtype::F8E8m0 => "F8_E8M0",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::Bf16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
            Dtype::F64 => "F64",
        }
    }

    /// Bytes of one element.
    pub const fn size(self) -> u64 {
        match self {
            Dtype::Bool | Dtype::U8 | Dtype::I8 | Dtype::F8E5m2 | Dtype::F8E4m3 | Dtype::F8E8m0 => {
                1
            }
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }

    pub fn parse(s: &str) -> Option<Dtype> {
        Dtype::ALL.iter().copied().find(|d| d.name() == s)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One validated tensor entry. `begin..end` is relative to the data section and has been
/// checked to lie inside it.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorEntry {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub begin: u64,
    pub end: u64,
}

impl TensorEntry {
    pub fn nbytes(&self) -> u64 {
        self.end - self.begin
    }
}

/// A validated header.
#[derive(Clone, Debug)]
pub struct Header {
    /// Entries in header order.
    pub entries: Vec<TensorEntry>,
    pub metadata: BTreeMap<String, String>,
    /// Absolute offset of the data section (8 + N).
    pub data_start: u64,
    pub data_len: u64,
    index: HashMap<String, usize>,
}

impl Header {
    pub fn get(&self, name: &str) -> Option<&TensorEntry> {
        self.index.get(name).map(|&k| &self.entries[k])
    }
}

/// The top-level object as an ordered list of raw members, so duplicates stay visible.
struct RawMembers<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for RawMembers<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RawMembers<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = m.next_key::<String>()? {
                    let v: &'a RawValue = m.next_value()?;
                    out.push((k, v));
                }
                Ok(RawMembers(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

fn json_err(file: &str, e: impl fmt::Display) -> ContainerError {
    ContainerError::HeaderJson {
        file: file.to_string(),
        msg: e.to_string(),
    }
}

/// Reads and validates the header of a whole safetensors file held in `bytes`.
/// `file` is the name used in error messages.
pub fn parse(file: &str, bytes: &[u8]) -> Result<Header> {
    let file_len = bytes.len() as u64;
    let prefix: [u8; 8] = match bytes.get(..8).and_then(|b| b.try_into().ok()) {
        Some(p) => p,
        None => {
            return Err(ContainerError::TooShort {
                file: file.to_string(),
                len: file_len,
            });
        }
    };
    let header_len = u64::from_le_bytes(prefix);
    if header_len > MAX_HEADER {
        return Err(ContainerError::HeaderTooLarge {
            file: file.to_string(),
            header_len,
            cap: MAX_HEADER,
        });
    }
    // header_len <= 1e8, so this cannot overflow; checked anyway for the 32-bit case.
    let data_start = header_len.checked_add(8).filter(|&e| e <= file_len).ok_or(
        ContainerError::HeaderPastEnd {
            file: file.to_string(),
            header_len,
            file_len,
        },
    )?;
    let json = &bytes[8..data_start as usize];
    let data_len = file_len - data_start;

    let members: RawMembers<'_> = serde_json::from_slice(json).map_err(|e| json_err(file, e))?;
    let mut entries = Vec::with_capacity(members.0.len());
    let mut index = HashMap::with_capacity(members.0.len());
    let mut metadata = None;
    for (name, raw) in members.0 {
        if name == "__metadata__" {
            if metadata.is_some() {
                return Err(ContainerError::DuplicateTensor {
                    file: file.to_string(),
                    tensor: name,
                });
            }
            metadata = Some(parse_metadata(file, raw)?);
            continue;
        }
        if index.contains_key(&name) {
            return Err(ContainerError::DuplicateTensor {
                file: file.to_string(),
                tensor: name,
            });
        }
        let e: RawEntry =
            serde_json::from_str(raw.get()).map_err(|e| ContainerError::BadEntry {
                file: file.to_string(),
                tensor: name.clone(),
                msg: e.to_string(),
            })?;
        let entry = check_entry(file, name, e, data_len)?;
        index.insert(entry.name.clone(), entries.len());
        entries.push(entry);
    }
    check_tiling(file, &entries, data_len)?;
    Ok(Header {
        entries,
        metadata: metadata.unwrap_or_default(),
        data_start,
        data_len,
        index,
    })
}

fn parse_metadata(file: &str, raw: &RawValue) -> Result<BTreeMap<String, String>> {
    let members: RawMembers<'_> =
        serde_json::from_str(raw.get()).map_err(|e| ContainerError::BadMetadata {
            file: file.to_string(),
            msg: format!("not an object: {e}"),
        })?;
    let mut out = BTreeMap::new();
    for (k, v) in members.0 {
        let s: String = serde_json::from_str(v.get()).map_err(|_| ContainerError::BadMetadata {
            file: file.to_string(),
            msg: format!("value of key {k:?} is not a string"),
        })?;
        if out.insert(k.clone(), s).is_some() {
            return Err(ContainerError::BadMetadata {
                file: file.to_string(),
                msg: format!("key {k:?} appears twice"),
            });
        }
    }
    Ok(out)
}

fn check_entry(file: &str, name: String, e: RawEntry, data_len: u64) -> Result<TensorEntry> {
    let dtype = Dtype::parse(&e.dtype).ok_or_else(|| ContainerError::UnknownDtype {
        file: file.to_string(),
        tensor: name.clone(),
        dtype: e.dtype.clone(),
    })?;
    let expected = e
        .shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| ContainerError::ShapeOverflow {
            file: file.to_string(),
            tensor: name.clone(),
            shape: e.shape.clone(),
            elem: dtype.size(),
        })?;
    let (begin, end) = e.data_offsets;
    if begin > end {
        return Err(ContainerError::OffsetsReversed {
            file: file.to_string(),
            tensor: name,
            begin,
            end,
        });
    }
    if end > data_len {
        return Err(ContainerError::OffsetOutOfRange {
            file: file.to_string(),
            tensor: name,
            end,
            data_len,
        });
    }
    if end - begin != expected {
        return Err(ContainerError::SizeMismatch {
            file: file.to_string(),
            tensor: name,
            dtype: dtype.name().to_string(),
            shape: e.shape,
            expected,
            span: end - begin,
        });
    }
    Ok(TensorEntry {
        name,
        dtype,
        shape: e.shape,
        begin,
        end,
    })
}

/// The spans, sorted, must cover `[0, data_len)` exactly once.
fn check_tiling(file: &str, entries: &[TensorEntry], data_len: u64) -> Result<()> {
    let mut order: Vec<&TensorEntry> = entries.iter().collect();
    order.sort_by_key(|e| (e.begin, e.end));
    let mut cursor = 0u64;
    let mut last: Option<&TensorEntry> = None;
    for e in order {
        if e.begin < cursor {
            let prev = last.map(|p| p.name.clone()).unwrap_or_default();
            return Err(ContainerError::Overlap {
                file: file.to_string(),
                tensor: e.name.clone(),
                begin: e.begin,
                end: e.end,
                other: prev,
                other_end: cursor,
            });
        }
        if e.begin > cursor {
            return Err(ContainerError::Gap {
                file: file.to_string(),
                tensor: e.name.clone(),
                begin: e.begin,
                gap_start: cursor,
            });
        }
        cursor = e.end;
        last = Some(e);
    }
    if cursor != data_len {
        return Err(ContainerError::TrailingBytes {
            file: file.to_string(),
            tensor: last
                .map(|p| p.name.clone())
                .unwrap_or_else(|| "(no tensors)".to_string()),
            trailing: data_len - cursor,
            data_len,
        });
    }
    Ok(())
}

/// The safetensors dtype a tensor of `format` is stored in when the format is a plain float
/// (f32, f16, bf16); `None` for quantized formats, which are stored as U8 bytes. The one
/// place container-io maps formats to dtypes.
pub fn dense_dtype(format: quant_core::Format) -> Option<Dtype> {
    use quant_core::Format as F;
    match format {
        F::F32 => Some(Dtype::F32),
        F::F16 => Some(Dtype::F16),
        F::Bf16 => Some(Dtype::Bf16),
        F::Int8Row
        | F::Int4Row
        | F::Int2Row
        | F::Int4G16
        | F::Int4G32
        | F::Int4G48
        | F::Int4G64
        | F::Int4G96
        | F::Int4G128
        | F::Int4G192
        | F::Int4G256
        | F::Int3G64
        | F::E8Lattice
        | F::Fp8E4m3B128
        | F::Fp8E4m3B128Ue8m0
        | F::Hfq4G256
        | F::Mq4G256
        | F::Mq4G256V2
        | F::Mq4cG256
        | F::Mq4K
        | F::Mxfp4
        | F::Q8_0
        | F::Q4_0
        | F::Q4_1
        | F::Q5_0
        | F::Q5_1
        | F::Q2K
        | F::Q3K
        | F::Q4K
        | F::Q5K
        | F::Q6K
        | F::Iq4Nl
        | F::Iq4Xs
        | F::GgufMxfp4 => None,
    }
}
