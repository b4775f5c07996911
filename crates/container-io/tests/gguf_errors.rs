//! One byte-level test per `GgufError` variant: each builds the smallest GGUF file that
//! triggers it, checks the variant, and checks the message names the file, the key or
//! tensor, and the condition.

use container_io::gguf::{GgufError as E, GgufFile, format_of, import, names, parse, qtensor};
use quant_core::Format;

const FILE: &str = "t.gguf";

/// A GGUF file under construction, little-endian, with counts that may lie.
#[derive(Clone)]
struct G {
    version: u32,
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
    alignment: u64,
    data: Vec<u8>,
}

fn gstr(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

impl G {
    fn new() -> G {
        G {
            version: 3,
            kv: vec![],
            n_kv: 0,
            infos: vec![],
            n_tensors: 0,
            alignment: 32,
            data: vec![],
        }
    }
    /// A raw metadata entry: key, type id, value bytes.
    fn kv_raw(mut self, key: &[u8], ty: u32, value: &[u8]) -> G {
        self.kv.extend(gstr(key));
        self.kv.extend(ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }
    fn kv_u32(self, key: &str, v: u32) -> G {
        self.kv_raw(key.as_bytes(), 4, &v.to_le_bytes())
    }
    fn kv_str(self, key: &str, v: &str) -> G {
        self.kv_raw(key.as_bytes(), 8, &gstr(v.as_bytes()))
    }
    /// A raw tensor info.
    fn info(mut self, name: &[u8], dims: &[u64], ty: u32, offset: u64) -> G {
        self.infos.extend(gstr(name));
        self.infos.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            self.infos.extend(d.to_le_bytes());
        }
        self.infos.extend(ty.to_le_bytes());
        self.infos.extend(offset.to_le_bytes());
        self.n_tensors += 1;
        self
    }
    fn data(mut self, n: usize) -> G {
        self.data = (0..n).map(|i| i as u8).collect();
        self
    }
    fn bytes(&self) -> Vec<u8> {
        let mut v = b"GGUF".to_vec();
        v.extend(self.version.to_le_bytes());
        v.extend(self.n_tensors.to_le_bytes());
        v.extend(self.n_kv.to_le_bytes());
        v.extend(&self.kv);
        v.extend(&self.infos);
        while !(v.len() as u64).is_multiple_of(self.alignment) {
            v.push(0);
        }
        v.extend(&self.data);
        v
    }
}

fn parse_err(bytes: &[u8]) -> E {
    match parse(FILE, bytes) {
        Err(e) => e,
        Ok(g) => panic!("expected an error, parsed {} tensors", g.tensors.len()),
    }
}

fn says(e: &E, parts: &[&str]) {
    let m = e.to_string();
    assert!(
        m.contains(FILE) || parts.iter().any(|p| p.contains(".gguf")),
        "message {m:?} lacks the file"
    );
    for p in parts {
        assert!(m.contains(p), "message {m:?} lacks {p:?}");
    }
}

/// A valid file with one f32 tensor [2, 8] = 64 bytes, used as a baseline.
fn one_tensor() -> G {
    G::new()
        .kv_str("general.architecture", "llama")
        .info(b"w", &[8, 2], 0, 0)
        .data(64)
}

#[test]
fn baseline_parses() {
    let b = one_tensor().bytes();
    let g = parse(FILE, &b).unwrap();
    assert_eq!(g.tensors[0].logical_shape(), (2, 8));
    assert_eq!(g.tensors[0].nbytes, 64);
    assert_eq!(g.architecture(), Some("llama"));
    assert_eq!(g.alignment, 32);
    let mut v2 = one_tensor();
    v2.version = 2;
    assert!(parse(FILE, &v2.bytes()).is_ok());
}

#[test]
fn io() {
    let e = GgufFile::open(std::path::Path::new("/nonexistent/x.gguf"))
        .err()
        .unwrap();
    assert!(matches!(e, E::Io { op: "open", .. }));
    says(&e, &["/nonexistent/x.gguf", "open"]);
}

#[test]
fn not_gguf() {
    for b in [&b"GGU"[..], b"GGML\x03\0\0\0", b""] {
        let e = parse_err(b);
        assert!(matches!(e, E::NotGguf { .. }), "{e}");
        says(&e, &["not a GGUF file"]);
    }
}

#[test]
fn truncated() {
    let b = one_tensor().bytes();
    // Cut inside the tensor info: the last 3 bytes of the offset field are missing.
    let header_end = 4 + 4 + 8 + 8 + one_tensor().kv.len() + one_tensor().infos.len();
    let e = parse_err(&b[..header_end - 3]);
    assert!(matches!(e, E::Truncated { .. }), "{e}");
    says(&e, &["offset of tensor \"w\"", "8 bytes needed"]);
}

#[test]
fn big_endian() {
    let mut b = G::new().bytes();
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    let e = parse_err(&b);
    assert!(matches!(e, E::BigEndian { version: 3, .. }), "{e}");
    says(&e, &["big-endian"]);
}

#[test]
fn unsupported_version() {
    for v in [1u32, 4, 0xFFFF_FFFF] {
        let mut g = G::new();
        g.version = v;
        let e = parse_err(&g.bytes());
        assert!(
            matches!(e, E::UnsupportedVersion { version, .. } if version == v),
            "{e}"
        );
        says(&e, &[&format!("version {v}")]);
    }
}

#[test]
fn too_many_kv() {
    // CVE-2024-21802 class: a count that would drive a huge allocation.
    let mut g = G::new().kv_u32("a", 1);
    g.n_kv = u64::MAX;
    let e = parse_err(&g.bytes());
    assert!(matches!(e, E::TooManyKv { n_kv: u64::MAX, .. }), "{e}");
    says(&e, &["metadata entries"]);
}

#[test]
fn too_many_tensors() {
    let mut g = G::new();
    g.n_tensors = 1 << 40;
    let e = parse_err(&g.bytes());
    assert!(matches!(e, E::TooManyTensors { .. }), "{e}");
    says(&e, &["1099511627776 tensors"]);
    // A count that fits the header but not what is left after the metadata.
    let mut g = G::new()
        .kv_str("k", &"x".repeat(100))
        .info(b"w", &[1], 0, 0);
    g.n_tensors = 5;
    let e = parse_err(&g.bytes());
    assert!(matches!(e, E::TooManyTensors { n_tensors: 5, .. }), "{e}");
}

#[test]
fn string_past_end() {
    // A key whose length runs past the end.
    let mut g = G::new();
    g.kv.extend((1u64 << 60).to_le_bytes());
    g.kv.extend([0u8; 16]);
    g.n_kv = 1;
    let e = parse_err(&g.bytes());
    assert!(
        matches!(e, E::StringPastEnd { len, .. } if len == 1 << 60),
        "{e}"
    );
    says(&e, &["metadata key #0", "1152921504606846976-byte string"]);
    // A string value likewise.
    let mut value = (1u64 << 50).to_le_bytes().to_vec();
    value.extend(b"abc");
    let e = parse_err(&G::new().kv_raw(b"s", 8, &value).bytes());
    assert!(matches!(e, E::StringPastEnd { .. }), "{e}");
    says(&e, &["metadata key \"s\""]);
}

#[test]
fn bad_key() {
    let e = parse_err(&G::new().kv_raw("clé".as_bytes(), 4, &[0; 4]).bytes());
    assert!(matches!(e, E::BadKey { .. }), "{e}");
    says(&e, &["not ASCII"]);
    let long = vec![b'a'; 65_536];
    let e = parse_err(&G::new().kv_raw(&long, 4, &[0; 4]).bytes());
    assert!(matches!(e, E::BadKey { .. }), "{e}");
    says(&e, &["65536 bytes long"]);
}

#[test]
fn duplicate_key() {
    let e = parse_err(
        &G::new()
            .kv_u32("general.alignment", 32)
            .kv_u32("general.alignment", 64)
            .bytes(),
    );
    assert!(matches!(e, E::DuplicateKey { .. }), "{e}");
    says(&e, &["\"general.alignment\"", "twice"]);
}

#[test]
fn unknown_value_type() {
    let e = parse_err(&G::new().kv_raw(b"k", 13, &[0; 8]).bytes());
    assert!(matches!(e, E::UnknownValueType { type_id: 13, .. }), "{e}");
    says(&e, &["\"k\"", "value type 13"]);
    // Inside an array too.
    let mut arr = 99u32.to_le_bytes().to_vec();
    arr.extend(1u64.to_le_bytes());
    let e = parse_err(&G::new().kv_raw(b"a", 9, &arr).bytes());
    assert!(matches!(e, E::UnknownValueType { type_id: 99, .. }), "{e}");
}

#[test]
fn bad_bool() {
    let e = parse_err(&G::new().kv_raw(b"flag", 7, &[2]).bytes());
    assert!(matches!(e, E::BadBool { byte: 2, .. }), "{e}");
    says(&e, &["\"flag\"", "0x02"]);
    // In a bool array as well.
    let mut arr = 7u32.to_le_bytes().to_vec();
    arr.extend(3u64.to_le_bytes());
    arr.extend([1, 0, 9]);
    let e = parse_err(&G::new().kv_raw(b"flags", 9, &arr).bytes());
    assert!(matches!(e, E::BadBool { byte: 9, .. }), "{e}");
}

#[test]
fn array_past_end() {
    // CVE-2024-23605 class: an element count that would drive a huge allocation or walk.
    for (elem, count) in [(4u32, u64::MAX), (8, 1 << 40), (9, 1 << 30), (0, 100)] {
        let mut arr = elem.to_le_bytes().to_vec();
        arr.extend(count.to_le_bytes());
        arr.extend([0u8; 16]);
        let e = parse_err(&G::new().kv_raw(b"arr", 9, &arr).bytes());
        assert!(
            matches!(e, E::ArrayPastEnd { count: c, .. } if c == count),
            "{e}"
        );
        says(&e, &["\"arr\"", &format!("array of {count}")]);
    }
}

#[test]
fn nesting_too_deep() {
    // 9 nested arrays, each holding one array, then an empty u8 array.
    let mut v = Vec::new();
    for _ in 0..9 {
        v.extend(9u32.to_le_bytes());
        v.extend(1u64.to_le_bytes());
    }
    v.extend(0u32.to_le_bytes());
    v.extend(0u64.to_le_bytes());
    let e = parse_err(&G::new().kv_raw(b"deep", 9, &v[12..]).bytes());
    assert!(matches!(e, E::NestingTooDeep { max: 8, .. }), "{e}");
    says(&e, &["\"deep\"", "nested deeper than 8"]);
    // 8 levels are fine.
    let ok = G::new().kv_raw(b"deep", 9, &v[24..]).bytes();
    let g = parse(FILE, &ok).unwrap();
    assert!(matches!(
        g.get("deep"),
        Some(container_io::gguf::Value::Array(_))
    ));
}

#[test]
fn bad_alignment_type() {
    let e = parse_err(
        &G::new()
            .kv_raw(b"general.alignment", 10, &32u64.to_le_bytes())
            .bytes(),
    );
    assert!(
        matches!(
            e,
            E::BadAlignmentType {
                found: "uint64",
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["general.alignment", "uint64"]);
}

#[test]
fn bad_alignment() {
    for a in [0u32, 3, 48, 1 << 17] {
        let e = parse_err(&G::new().kv_u32("general.alignment", a).bytes());
        assert!(
            matches!(e, E::BadAlignment { alignment, .. } if alignment == u64::from(a)),
            "{e}"
        );
        says(&e, &[&format!("general.alignment = {a}"), "power of two"]);
    }
    // A valid non-default alignment is honoured.
    let mut g = G::new()
        .kv_u32("general.alignment", 64)
        .info(b"w", &[16], 0, 0)
        .data(64);
    g.alignment = 64;
    let b = g.bytes();
    let p = parse(FILE, &b).unwrap();
    assert_eq!((p.alignment, p.data_start % 64), (64, 0));
}

#[test]
fn tensor_name_too_long() {
    let e = parse_err(&G::new().info(&[b'n'; 65], &[1], 0, 0).data(32).bytes());
    assert!(matches!(e, E::TensorNameTooLong { len: 65, .. }), "{e}");
    says(&e, &["65 bytes", "64-byte limit"]);
}

#[test]
fn not_utf8() {
    let e = parse_err(&G::new().info(b"w\xff", &[1], 0, 0).data(32).bytes());
    assert!(
        matches!(
            e,
            E::NotUtf8 {
                what: "tensor name",
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["tensor name", "UTF-8"]);
}

#[test]
fn duplicate_tensor() {
    let e = parse_err(
        &G::new()
            .info(b"w", &[8], 0, 0)
            .info(b"w", &[8], 0, 32)
            .data(64)
            .bytes(),
    );
    assert!(matches!(e, E::DuplicateTensor { .. }), "{e}");
    says(&e, &["\"w\"", "twice"]);
}

#[test]
fn too_many_dims() {
    let e = parse_err(&G::new().info(b"w", &[1, 1, 1, 1, 1], 0, 0).data(32).bytes());
    assert!(matches!(e, E::TooManyDims { n_dims: 5, .. }), "{e}");
    says(&e, &["\"w\"", "5 dimensions"]);
    // n_dims = u32::MAX is refused before any dimension is read.
    let mut g = G::new();
    g.infos.extend(gstr(b"w"));
    g.infos.extend(u32::MAX.to_le_bytes());
    g.infos.extend([0u8; 20]);
    g.n_tensors = 1;
    let e = parse_err(&g.bytes());
    assert!(
        matches!(
            e,
            E::TooManyDims {
                n_dims: u32::MAX,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn element_overflow() {
    // CVE-2025-53630 / CVE-2026-33298 class: an ne product that wraps.
    // The last: a zero ne[0] makes the element count 0, but the row count still wraps.
    for dims in [
        vec![1u64 << 32, 1 << 32],
        vec![1 << 63],
        vec![3, 1 << 62],
        vec![0, 1 << 40, 1 << 40],
    ] {
        let e = parse_err(&G::new().info(b"w", &dims, 0, 0).data(32).bytes());
        assert!(matches!(e, E::ElementOverflow { .. }), "{e}");
        says(&e, &["\"w\"", "overflows"]);
    }
}

#[test]
fn unknown_tensor_type() {
    for ty in [4u32, 31, 36, 42, u32::MAX] {
        let e = parse_err(&G::new().info(b"w", &[32], ty, 0).data(64).bytes());
        assert!(
            matches!(e, E::UnknownTensorType { type_id, .. } if type_id == ty),
            "{e}"
        );
        says(&e, &["\"w\"", &format!("type id {ty}")]);
    }
}

#[test]
fn partial_block() {
    // Q4_K rows must be whole 256-weight blocks.
    let e = parse_err(&G::new().info(b"w", &[255, 2], 12, 0).data(512).bytes());
    assert!(
        matches!(
            e,
            E::PartialBlock {
                ne0: 255,
                block: 256,
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["\"w\"", "Q4_K", "ne[0] = 255"]);
}

#[test]
fn byte_size_overflow() {
    // 2^62 f32 elements fit i64, but 2^62 x 4 bytes does not fit u64.
    let e = parse_err(
        &G::new()
            .info(b"w", &[1 << 31, 1 << 31], 0, 0)
            .data(32)
            .bytes(),
    );
    assert!(matches!(e, E::ByteSizeOverflow { type_size: 4, .. }), "{e}");
    says(&e, &["\"w\"", "overflows"]);
}

#[test]
fn misaligned_offset() {
    let e = parse_err(&G::new().info(b"w", &[4], 0, 16).data(64).bytes());
    assert!(
        matches!(
            e,
            E::MisalignedOffset {
                offset: 16,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["\"w\"", "offset 16", "alignment 32"]);
}

#[test]
fn tensor_past_end() {
    // CVE-2026-27940 class: offset + size outside the data (and an offset near u64::MAX
    // whose sum wraps).
    let e = parse_err(&G::new().info(b"w", &[16], 0, 32).data(64).bytes());
    assert!(
        matches!(
            e,
            E::TensorPastEnd {
                offset: 32,
                nbytes: 64,
                data_len: 64,
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["\"w\"", "truncated"]);
    let e = parse_err(
        &G::new()
            .info(b"w", &[16], 0, u64::MAX - 31)
            .data(64)
            .bytes(),
    );
    assert!(matches!(e, E::TensorPastEnd { .. }), "{e}");
    // A file that ends before its data section begins.
    let mut b = G::new().info(b"w", &[8], 0, 0).bytes();
    b.truncate(b.len() - 1);
    let e = parse_err(&b);
    assert!(matches!(e, E::TensorPastEnd { data_len: 0, .. }), "{e}");
}

#[test]
fn tensor_overlap() {
    let e = parse_err(
        &G::new()
            .info(b"a", &[16], 0, 0)
            .info(b"b", &[16], 0, 32)
            .data(128)
            .bytes(),
    );
    assert!(matches!(e, E::TensorOverlap { .. }), "{e}");
    says(&e, &["\"b\"", "overlaps tensor \"a\"", "ends at 64"]);
}

#[test]
fn unsupported_type() {
    // IQ2_XXS (16) is a valid GGML type with no registry row.
    let b = G::new().info(b"w", &[256], 16, 0).data(96).bytes();
    let g = parse(FILE, &b).unwrap();
    let e = format_of(&g, &g.tensors[0]).unwrap_err();
    assert!(matches!(e, E::UnsupportedType { ty: "IQ2_XXS", .. }), "{e}");
    says(&e, &["\"w\"", "IQ2_XXS"]);
    let b = one_tensor().bytes();
    let g = parse(FILE, &b).unwrap();
    assert_eq!(format_of(&g, &g.tensors[0]).unwrap(), Format::F32);
}

#[test]
fn metadata() {
    let b = G::new()
        .kv_str("general.architecture", "mamba")
        .info(b"w", &[8], 0, 0)
        .data(32)
        .bytes();
    let g = parse(FILE, &b).unwrap();
    let e = names::hf_config(&g).unwrap_err();
    assert!(matches!(e, E::Metadata { .. }), "{e}");
    says(&e, &["\"mamba\"", "config.json"]);
    let b = G::new().kv_str("general.architecture", "llama").bytes();
    let e = names::hf_config(&parse(FILE, &b).unwrap()).unwrap_err();
    says(&e, &["llama.embedding_length is missing"]);
}

#[test]
fn quant() {
    // A zero dimension is a valid GGUF tensor but not an [O, I] matrix.
    let b = G::new().info(b"w", &[8, 0], 0, 0).data(32).bytes();
    let g = parse(FILE, &b).unwrap();
    let e = qtensor(&g, &g.tensors[0]).unwrap_err();
    assert!(matches!(e, E::Quant { .. }), "{e}");
    says(&e, &["\"w\"", "empty shape"]);
}

#[test]
fn container() {
    let b = one_tensor().bytes();
    let g = parse(FILE, &b).unwrap();
    let e = import::dequantize(
        &g,
        std::path::Path::new("/nonexistent/dir/out.safetensors"),
        Format::F32,
        &|_| {},
    )
    .unwrap_err();
    assert!(matches!(e, E::Container(_)), "{e}");
    assert!(
        e.to_string().contains("/nonexistent/dir/out.safetensors"),
        "{e}"
    );
}
