//! The GGUF parser: total over bytes, borrowing from the (memory-mapped) file, copying
//! nothing.
//!
//! Every count, length, dimension and size is checked before it is used to index, to
//! reserve memory or to compute another size: counts and lengths against the bytes left in
//! the file (a count of N entries whose smallest encoding is k bytes needs N*k bytes), sizes
//! with checked arithmetic. Memory held is O(entries), and every entry consumed at least
//! one byte of the file, so a file cannot make the parser allocate more than a small
//! multiple of its own size. Array nesting is capped at [`MAX_DEPTH`], so recursion is
//! bounded too.

use super::error::{GgufError, Result};
use super::types::GgmlType;
use std::collections::HashMap;

/// `"GGUF"` at byte 0.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The alignment a file without `general.alignment` has.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The largest `general.alignment` accepted (llama.cpp only demands a power of two; 64 KiB
/// covers every page size in use, and a larger value only wastes the file's space).
pub const MAX_ALIGNMENT: u64 = 1 << 16;
/// Array nesting levels accepted (the spec allows nesting; no writer nests at all).
pub const MAX_DEPTH: usize = 8;
/// GGML's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;
/// The spec's tensor name limit.
pub const MAX_TENSOR_NAME: u64 = 64;
/// The spec's key length limit.
pub const MAX_KEY: u64 = 65_535;
/// Smallest encoding of a metadata entry: key length, an empty key, type, a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Smallest encoding of a tensor info: name length, empty name, n_dims, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// A metadata value type (`gguf_metadata_value_type`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// gguf-py's name of the type.
    pub const fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "uint8",
            ValueType::I8 => "int8",
            ValueType::U16 => "uint16",
            ValueType::I16 => "int16",
            ValueType::U32 => "uint32",
            ValueType::I32 => "int32",
            ValueType::F32 => "float32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "uint64",
            ValueType::I64 => "int64",
            ValueType::F64 => "float64",
        }
    }

    /// Bytes of a fixed-size value; `None` for strings and arrays.
    const fn fixed_size(self) -> Option<u64> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// The fewest bytes one value of this type occupies (a string's length prefix, an
    /// array's type and count).
    const fn min_size(self) -> u64 {
        match self.fixed_size() {
            Some(n) => n,
            None => match self {
                ValueType::String => 8,
                _ => 12,
            },
        }
    }
}

/// One metadata value, borrowing strings and arrays from the file.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// The string's bytes (UTF-8 by the spec; shown lossily, never trusted).
    String(&'a [u8]),
    Array(Array<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value<'_> {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// An integer value of any width, if it is one and fits u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            Value::F32(_) | Value::F64(_) | Value::Bool(_) | Value::String(_) | Value::Array(_) => {
                None
            }
        }
    }

    /// A float value (or an integer, widened).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v as f64),
            Value::U8(_) | Value::U16(_) | Value::U32(_) | Value::U64(_) => {
                self.as_u64().map(|v| v as f64)
            }
            Value::Bool(_) | Value::String(_) | Value::Array(_) => None,
        }
    }

    /// The string, if it is one and valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

/// A validated array: its element type, count and the bytes of its elements.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Array<'a> {
    pub elem: ValueType,
    pub len: u64,
    bytes: &'a [u8],
    depth: usize,
}

impl<'a> Array<'a> {
    /// The elements, decoded one at a time (the array was validated when parsed).
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter {
            cur: Cursor {
                file: "",
                b: self.bytes,
                pos: 0,
            },
            elem: self.elem,
            left: self.len,
            depth: self.depth,
        }
    }
}

/// Iterator over an [`Array`]'s elements.
pub struct ArrayIter<'a> {
    cur: Cursor<'a, 'static>,
    elem: ValueType,
    left: u64,
    depth: usize,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;
    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Validated at parse time, so this cannot fail; a failure ends the iteration.
        self.cur.value(self.elem, "", self.depth).ok()
    }
}

/// One metadata entry.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Kv<'a> {
    pub key: &'a str,
    pub value: Value<'a>,
}

/// One validated tensor info. `offset..offset + nbytes` lies inside the data section.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo<'a> {
    pub name: &'a str,
    /// GGML's `ne`: `dims[0]` is the row length (the fastest-varying dimension).
    pub dims: Vec<u64>,
    pub ty: &'static GgmlType,
    /// Relative to the data section.
    pub offset: u64,
    pub nbytes: u64,
}

impl TensorInfo<'_> {
    /// Number of elements (checked not to overflow when parsed).
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The logical [rows, row_length]: `ne[0]` is the row, the other dimensions fold into
    /// the rows. A 0-dimensional tensor is one row of one value.
    pub fn logical_shape(&self) -> (u64, u64) {
        let cols = self.dims.first().copied().unwrap_or(1);
        let rows = self.dims.iter().skip(1).product();
        (rows, cols)
    }

    /// The shape as PyTorch / safetensors order it (`ne` reversed).
    pub fn torch_shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }
}

/// A parsed GGUF file, borrowing from its bytes.
#[derive(Debug)]
pub struct Gguf<'a> {
    pub file: String,
    pub version: u32,
    pub alignment: u64,
    /// Entries in file order.
    pub metadata: Vec<Kv<'a>>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo<'a>>,
    /// Absolute offset of the data section.
    pub data_start: u64,
    /// The data section (empty if the file ends before it).
    pub data: &'a [u8],
    keys: HashMap<&'a str, usize>,
    names: HashMap<&'a str, usize>,
}

impl<'a> Gguf<'a> {
    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        self.keys.get(key).map(|&k| &self.metadata[k].value)
    }

    /// The tensor info named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        self.names.get(name).map(|&k| &self.tensors[k])
    }

    /// A tensor's bytes (bounds checked when parsed).
    pub fn tensor_data(&self, t: &TensorInfo<'_>) -> &'a [u8] {
        // offset + nbytes <= data.len() was checked in `parse`, which also keeps both in
        // usize range (they index a slice of this process's memory).
        &self.data[t.offset as usize..(t.offset + t.nbytes) as usize]
    }

    /// `general.architecture`, if present and a string.
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(Value::as_str)
    }
}

/// A bounds-checked little-endian reader. `'f` is the file name's lifetime.
struct Cursor<'a, 'f> {
    file: &'f str,
    b: &'a [u8],
    pos: usize,
}

impl<'a, 'f> Cursor<'a, 'f> {
    fn left(&self) -> u64 {
        (self.b.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(GgufError::Truncated {
                file: self.file.to_string(),
                what: what(),
                at: self.pos as u64,
                need: n,
                len: self.b.len() as u64,
            });
        }
        // n <= left, so it fits usize and pos + n <= len.
        let s = &self.b[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array::<8>(what).map(u64::from_le_bytes)
    }

    /// A length-prefixed string; the length is checked against the bytes left first.
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(&|| format!("the length of {}", what()))?;
        if len > self.left() {
            return Err(GgufError::StringPastEnd {
                file: self.file.to_string(),
                what: what(),
                len,
                left: self.left(),
            });
        }
        self.take(len, what)
    }

    /// One value of type `ty` (already known); `key` names it in errors; `depth` is the
    /// array nesting level of the value.
    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value<'a>> {
        let what = || format!("the value of metadata key {key:?}");
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(&what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => match self.array::<1>(&what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                byte => {
                    return Err(GgufError::BadBool {
                        file: self.file.to_string(),
                        key: key.to_string(),
                        byte,
                    });
                }
            },
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => Value::Array(self.array_value(key, depth)?),
        })
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<Array<'a>> {
        if depth >= MAX_DEPTH {
            return Err(GgufError::NestingTooDeep {
                file: self.file.to_string(),
                key: key.to_string(),
                max: MAX_DEPTH,
            });
        }
        let what = || format!("the array header of metadata key {key:?}");
        let type_id = self.u32(&what)?;
        let elem = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            file: self.file.to_string(),
            key: key.to_string(),
            type_id,
        })?;
        let len = self.u64(&what)?;
        let need = u128::from(len) * u128::from(elem.min_size());
        if need > u128::from(self.left()) {
            return Err(GgufError::ArrayPastEnd {
                file: self.file.to_string(),
                key: key.to_string(),
                elem: elem.name(),
                count: len,
                need,
                left: self.left(),
            });
        }
        let start = self.pos;
        match elem.fixed_size() {
            // need <= left: the product fits.
            Some(size) if elem != ValueType::Bool => {
                self.take(len * size, &what)?;
            }
            // Bools and variable-size elements are walked (and so validated) one by one;
            // each consumes at least one byte, so the walk is bounded by the file.
            Some(_) | None => {
                for _ in 0..len {
                    self.value(elem, key, depth + 1)?;
                }
            }
        }
        Ok(Array {
            elem,
            len,
            bytes: &self.b[start..self.pos],
            depth: depth + 1,
        })
    }
}

/// Parses and validates a whole GGUF file held in `bytes`; `file` names it in errors.
pub fn parse<'a>(file: &str, bytes: &'a [u8]) -> Result<Gguf<'a>> {
    let mut c = Cursor {
        file,
        b: bytes,
        pos: 0,
    };
    let magic = c
        .array::<4>(&|| "the magic".to_string())
        .map_err(|_| GgufError::NotGguf {
            file: file.to_string(),
            found: bytes.to_vec(),
        })?;
    if magic != MAGIC {
        return Err(GgufError::NotGguf {
            file: file.to_string(),
            found: magic.to_vec(),
        });
    }
    let raw = c.u32(&|| "the version".to_string())?;
    match raw {
        2 | 3 => {}
        _ if raw.swap_bytes() == 2 || raw.swap_bytes() == 3 => {
            return Err(GgufError::BigEndian {
                file: file.to_string(),
                raw,
                version: raw.swap_bytes(),
            });
        }
        version => {
            return Err(GgufError::UnsupportedVersion {
                file: file.to_string(),
                version,
            });
        }
    }
    let n_tensors = c.u64(&|| "the tensor count".to_string())?;
    let n_kv = c.u64(&|| "the metadata count".to_string())?;
    let check_tensors = |left: u64| -> Result<()> {
        let max = left / MIN_TENSOR_INFO_BYTES;
        if n_tensors > max {
            return Err(GgufError::TooManyTensors {
                file: file.to_string(),
                n_tensors,
                left,
                max,
            });
        }
        Ok(())
    };
    check_tensors(c.left())?;
    let max_kv = c.left() / MIN_KV_BYTES;
    if n_kv > max_kv {
        return Err(GgufError::TooManyKv {
            file: file.to_string(),
            n_kv,
            left: c.left(),
            max: max_kv,
        });
    }

    // Both counts are now at most the file length / 13, so they fit usize.
    let mut metadata = Vec::with_capacity(n_kv as usize);
    let mut keys = HashMap::with_capacity(n_kv as usize);
    for k in 0..n_kv {
        let at = c.pos as u64;
        let key_bytes = c.string(&|| format!("metadata key #{k}"))?;
        if key_bytes.len() as u64 > MAX_KEY {
            return Err(GgufError::BadKey {
                file: file.to_string(),
                at,
                why: format!(
                    "{} bytes long, over the {MAX_KEY}-byte limit",
                    key_bytes.len()
                ),
            });
        }
        let key = std::str::from_utf8(key_bytes)
            .ok()
            .filter(|k| k.is_ascii())
            .ok_or_else(|| GgufError::BadKey {
                file: file.to_string(),
                at,
                why: format!("not ASCII: {:?}", String::from_utf8_lossy(key_bytes)),
            })?;
        let type_id = c.u32(&|| format!("the type of metadata key {key:?}"))?;
        let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            file: file.to_string(),
            key: key.to_string(),
            type_id,
        })?;
        let value = c.value(ty, key, 0)?;
        if keys.insert(key, metadata.len()).is_some() {
            return Err(GgufError::DuplicateKey {
                file: file.to_string(),
                key: key.to_string(),
            });
        }
        metadata.push(Kv { key, value });
    }

    let alignment = match keys.get("general.alignment").map(|&k| metadata[k].value) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) => {
            let a = u64::from(a);
            if !a.is_power_of_two() || a > MAX_ALIGNMENT {
                return Err(GgufError::BadAlignment {
                    file: file.to_string(),
                    alignment: a,
                    max: MAX_ALIGNMENT,
                });
            }
            a
        }
        Some(other) => {
            return Err(GgufError::BadAlignmentType {
                file: file.to_string(),
                found: other.value_type().name(),
            });
        }
    };

    check_tensors(c.left())?;
    let mut tensors: Vec<TensorInfo<'a>> = Vec::with_capacity(n_tensors as usize);
    let mut names = HashMap::with_capacity(n_tensors as usize);
    for k in 0..n_tensors {
        let at = c.pos as u64;
        let name_bytes = c.string(&|| format!("the name of tensor #{k}"))?;
        if name_bytes.len() as u64 > MAX_TENSOR_NAME {
            return Err(GgufError::TensorNameTooLong {
                file: file.to_string(),
                at,
                len: name_bytes.len() as u64,
                max: MAX_TENSOR_NAME,
            });
        }
        let name = std::str::from_utf8(name_bytes).map_err(|_| GgufError::NotUtf8 {
            file: file.to_string(),
            what: "tensor name",
            at,
        })?;
        let n_dims = c.u32(&|| format!("the dimension count of tensor {name:?}"))?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::TooManyDims {
                file: file.to_string(),
                tensor: name.to_string(),
                n_dims,
                max: MAX_DIMS,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64(&|| format!("the dimensions of tensor {name:?}"))?);
        }
        // Both the row count (ne[1..]) and the element count must fit: with a zero ne[0]
        // the element count is 0 however large the other dimensions are.
        let fits = |v: &[u64]| {
            v.iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .filter(|&n| n <= i64::MAX as u64)
        };
        let elements = fits(dims.get(1..).unwrap_or(&[]))
            .and_then(|_| fits(&dims))
            .filter(|_| dims.iter().all(|&d| d <= i64::MAX as u64));
        let Some(elements) = elements else {
            return Err(GgufError::ElementOverflow {
                file: file.to_string(),
                tensor: name.to_string(),
                dims,
            });
        };
        let type_id = c.u32(&|| format!("the type of tensor {name:?}"))?;
        let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            file: file.to_string(),
            tensor: name.to_string(),
            type_id,
        })?;
        let ne0 = dims.first().copied().unwrap_or(1);
        if ne0 % u64::from(ty.block) != 0 {
            return Err(GgufError::PartialBlock {
                file: file.to_string(),
                tensor: name.to_string(),
                ty: ty.name,
                ne0,
                block: ty.block,
            });
        }
        // ne[0] is whole blocks, so the block count is exact.
        let blocks = elements / u64::from(ty.block);
        let nbytes = blocks.checked_mul(u64::from(ty.type_size)).ok_or_else(|| {
            GgufError::ByteSizeOverflow {
                file: file.to_string(),
                tensor: name.to_string(),
                ty: ty.name,
                blocks,
                type_size: ty.type_size,
            }
        })?;
        let offset = c.u64(&|| format!("the offset of tensor {name:?}"))?;
        if offset % alignment != 0 {
            return Err(GgufError::MisalignedOffset {
                file: file.to_string(),
                tensor: name.to_string(),
                offset,
                alignment,
            });
        }
        if names.insert(name, tensors.len()).is_some() {
            return Err(GgufError::DuplicateTensor {
                file: file.to_string(),
                tensor: name.to_string(),
            });
        }
        tensors.push(TensorInfo {
            name,
            dims,
            ty,
            offset,
            nbytes,
        });
    }

    // The data section starts at the next multiple of the alignment (which is at most
    // 2^16, so this cannot overflow a position inside the file).
    let end_of_infos = c.pos as u64;
    let data_start = end_of_infos.div_ceil(alignment) * alignment;
    let file_len = bytes.len() as u64;
    let data: &'a [u8] = if data_start <= file_len {
        &bytes[data_start as usize..]
    } else {
        &[]
    };
    let data_len = data.len() as u64;
    for t in &tensors {
        let end = t.offset.checked_add(t.nbytes);
        if end.is_none_or(|e| e > data_len) {
            return Err(GgufError::TensorPastEnd {
                file: file.to_string(),
                tensor: t.name.to_string(),
                offset: t.offset,
                nbytes: t.nbytes,
                data_len,
            });
        }
    }
    let mut order: Vec<&TensorInfo<'_>> = tensors.iter().collect();
    order.sort_by_key(|t| (t.offset, t.offset + t.nbytes));
    let mut last: Option<&TensorInfo<'_>> = None;
    for t in order {
        if let Some(p) = last {
            let p_end = p.offset + p.nbytes;
            if t.offset < p_end {
                return Err(GgufError::TensorOverlap {
                    file: file.to_string(),
                    tensor: t.name.to_string(),
                    begin: t.offset,
                    end: t.offset + t.nbytes,
                    other: p.name.to_string(),
                    other_end: p_end,
                });
            }
        }
        // Sorted by offset and not overlapping, so t ends at or after every earlier tensor.
        last = Some(t);
    }
    Ok(Gguf {
        file: file.to_string(),
        version: raw,
        alignment,
        metadata,
        tensors,
        data_start,
        data,
        keys,
        names,
    })
}

impl Value<'_> {
    /// The value as JSON: strings lossily decoded, non-finite floats as null, and arrays
    /// longer than `limit` (when given) as `{"type", "len", "head"}` with the first `limit`
    /// elements, so a 150,000-token vocabulary does not flood a listing.
    pub fn to_json(&self, limit: Option<usize>) -> serde_json::Value {
        use serde_json::json;
        match self {
            Value::U8(v) => json!(v),
            Value::I8(v) => json!(v),
            Value::U16(v) => json!(v),
            Value::I16(v) => json!(v),
            Value::U32(v) => json!(v),
            Value::I32(v) => json!(v),
            Value::U64(v) => json!(v),
            Value::I64(v) => json!(v),
            Value::F32(v) => json!(v),
            Value::F64(v) => json!(v),
            Value::Bool(v) => json!(v),
            Value::String(b) => json!(String::from_utf8_lossy(b)),
            Value::Array(a) => {
                let take = limit.map_or(usize::MAX, |l| l);
                let head: Vec<serde_json::Value> =
                    a.iter().take(take).map(|v| v.to_json(limit)).collect();
                if (head.len() as u64) < a.len {
                    json!({ "type": a.elem.name(), "len": a.len, "head": head })
                } else {
                    serde_json::Value::Array(head)
                }
            }
        }
    }
}
