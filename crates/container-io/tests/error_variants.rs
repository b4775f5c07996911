//! One byte-level test per `ContainerError` variant: each builds the smallest file (or
//! file set) that triggers it, checks the variant, and checks the message names the file,
//! the tensor and the condition.

// The helpers return the library's own error type, as callers do.
#![allow(clippy::result_large_err)]

use container_io::container::{Container, ShapeHints};
use container_io::error::ContainerError as E;
use container_io::legacy;
use container_io::pipeline::{QuantizeOptions, plan_quantize};
use container_io::{Dtype, Plan};
use quant_core::Format;
use std::collections::HashMap;
use std::path::PathBuf;

/// A safetensors file from header JSON text and data bytes.
fn st(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

fn open(bytes: Vec<u8>) -> Result<Container, E> {
    Container::from_bytes("test.safetensors", bytes)
}

fn err(bytes: Vec<u8>) -> E {
    match open(bytes) {
        Err(e) => e,
        Ok(_) => panic!("expected an error"),
    }
}

fn says(e: &E, parts: &[&str]) {
    let m = e.to_string();
    for p in parts {
        assert!(m.contains(p), "message {m:?} lacks {p:?}");
    }
}

fn resolve_err(bytes: Vec<u8>, name: &str, hints: &ShapeHints) -> E {
    let c = open(bytes).expect("file itself is valid");
    match c.resolve(name, hints) {
        Err(e) => e,
        Ok(i) => panic!("expected a refusal, got {i:?}"),
    }
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-errs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const A4: &str = r#""a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}"#;

#[test]
fn io() {
    let e = Container::open("/nonexistent/tessera.safetensors")
        .err()
        .unwrap();
    assert!(matches!(e, E::Io { .. }));
    says(&e, &["/nonexistent/tessera.safetensors", "open"]);
}

#[test]
fn too_short() {
    let e = err(vec![1, 2, 3]);
    assert!(matches!(e, E::TooShort { len: 3, .. }));
    says(&e, &["test.safetensors", "3 bytes"]);
}

#[test]
fn header_too_large_and_overflowing() {
    for len in [200_000_000u64, u64::MAX, u64::MAX - 7] {
        let mut v = len.to_le_bytes().to_vec();
        v.extend_from_slice(b"{}");
        let e = err(v);
        assert!(matches!(e, E::HeaderTooLarge { .. }), "{e}");
        says(&e, &["test.safetensors", "cap"]);
    }
}

#[test]
fn header_past_end() {
    let mut v = 100u64.to_le_bytes().to_vec();
    v.extend_from_slice(b"{}");
    let e = err(v);
    assert!(matches!(
        e,
        E::HeaderPastEnd {
            header_len: 100,
            file_len: 10,
            ..
        }
    ));
    says(&e, &["test.safetensors", "past the end"]);
}

#[test]
fn header_json() {
    for h in ["{not json", "[1,2]", "\u{0}", "{\"a\":1"] {
        let e = err(st(h, b""));
        assert!(matches!(e, E::HeaderJson { .. }), "{h}: {e}");
        says(&e, &["test.safetensors", "JSON"]);
    }
    // Invalid UTF-8 inside a string.
    let mut bad = st("{\"\u{e9}\":1}", b"");
    let at = bad.iter().position(|&b| b == 0xC3).unwrap();
    bad[at] = 0xFF;
    assert!(matches!(err(bad), E::HeaderJson { .. }));
}

#[test]
fn duplicate_tensor() {
    let e = err(st(&format!("{{{A4},{A4}}}"), b"abcd"));
    assert!(matches!(e, E::DuplicateTensor { .. }));
    says(&e, &["test.safetensors", "\"a\"", "twice"]);
}

#[test]
fn bad_entry() {
    let e = err(st(r#"{"a":{"dtype":"U8","shape":[4]}}"#, b"abcd"));
    assert!(matches!(e, E::BadEntry { .. }));
    says(&e, &["test.safetensors", "\"a\"", "data_offsets"]);
    let e = err(st(
        r#"{"a":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}}"#,
        b"abcd",
    ));
    assert!(matches!(e, E::BadEntry { .. }));
}

#[test]
fn unknown_dtype() {
    let e = err(st(
        r#"{"a":{"dtype":"Q9","shape":[4],"data_offsets":[0,4]}}"#,
        b"abcd",
    ));
    assert!(matches!(e, E::UnknownDtype { .. }));
    says(&e, &["test.safetensors", "\"a\"", "Q9"]);
}

#[test]
fn bad_metadata() {
    let e = err(st(
        &format!(r#"{{"__metadata__":{{"k":1}},{A4}}}"#),
        b"abcd",
    ));
    assert!(matches!(e, E::BadMetadata { .. }));
    says(&e, &["test.safetensors", "\"k\"", "not a string"]);
    let e = err(st(
        &format!(r#"{{"__metadata__":{{"k":"1","k":"2"}},{A4}}}"#),
        b"abcd",
    ));
    assert!(matches!(e, E::BadMetadata { .. }));
    says(&e, &["twice"]);
}

#[test]
fn shape_overflow() {
    let e = err(st(
        r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#,
        b"abcd",
    ));
    assert!(matches!(e, E::ShapeOverflow { .. }));
    says(&e, &["test.safetensors", "\"a\"", "overflows"]);
}

#[test]
fn offsets_reversed() {
    let e = err(st(
        r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}"#,
        b"abcd",
    ));
    assert!(matches!(
        e,
        E::OffsetsReversed {
            begin: 4,
            end: 0,
            ..
        }
    ));
    says(&e, &["test.safetensors", "\"a\"", "reversed"]);
}

#[test]
fn offset_out_of_range_truncated_file() {
    let e = err(st(
        r#"{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}"#,
        b"abcd",
    ));
    assert!(matches!(
        e,
        E::OffsetOutOfRange {
            end: 8,
            data_len: 4,
            ..
        }
    ));
    says(&e, &["test.safetensors", "\"a\"", "truncated"]);
}

#[test]
fn size_mismatch() {
    let e = err(st(
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
        b"abcd",
    ));
    assert!(matches!(
        e,
        E::SizeMismatch {
            expected: 8,
            span: 4,
            ..
        }
    ));
    says(&e, &["test.safetensors", "\"a\"", "F32"]);
}

#[test]
fn overlap() {
    let h = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#;
    let e = err(st(h, b"abcdef"));
    assert!(matches!(e, E::Overlap { .. }));
    says(&e, &["test.safetensors", "\"b\"", "\"a\"", "overlaps"]);
}

#[test]
fn gap() {
    let h = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}"#;
    let e = err(st(h, b"abcdef"));
    assert!(matches!(
        e,
        E::Gap {
            begin: 4,
            gap_start: 2,
            ..
        }
    ));
    says(&e, &["test.safetensors", "\"b\"", "gap"]);
}

#[test]
fn trailing_bytes() {
    let e = err(st(
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#,
        b"abcd",
    ));
    assert!(matches!(e, E::TrailingBytes { trailing: 2, .. }));
    says(&e, &["test.safetensors", "\"a\"", "trailing"]);
}

fn write(dir: &std::path::Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

#[test]
fn index_json() {
    let d = tmpdir("index-json");
    write(&d, "model.safetensors.index.json", b"{\"weight_map\": 3}");
    let e = Container::open(&d).err().unwrap();
    assert!(matches!(e, E::IndexJson { .. }));
    says(&e, &["model.safetensors.index.json", "malformed"]);
}

#[test]
fn shard_path() {
    let d = tmpdir("shard-path");
    write(
        &d,
        "model.safetensors.index.json",
        br#"{"weight_map": {"a": "../evil.safetensors"}}"#,
    );
    let e = Container::open(&d).err().unwrap();
    assert!(matches!(e, E::ShardPath { .. }));
    says(&e, &["\"a\"", "../evil.safetensors", "plain file name"]);
}

#[test]
fn index_tensor_missing_and_duplicate_across_shards() {
    let d = tmpdir("shards");
    write(&d, "s1.safetensors", &st(&format!("{{{A4}}}"), b"abcd"));
    write(
        &d,
        "s2.safetensors",
        &st(
            r#"{"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
            b"z",
        ),
    );
    write(
        &d,
        "model.safetensors.index.json",
        br#"{"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}}"#,
    );
    let e = Container::open(&d).err().unwrap();
    assert!(matches!(e, E::IndexTensorMissing { .. }), "{e}");
    says(&e, &["\"b\"", "s1.safetensors"]);
    // Fixed index opens.
    write(
        &d,
        "model.safetensors.index.json",
        br#"{"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}"#,
    );
    let c = Container::open(&d).unwrap();
    assert_eq!(c.names().len(), 2);
    // Now s2 also holds "a".
    write(&d, "s2.safetensors", &st(&format!("{{{A4}}}"), b"wxyz"));
    write(
        &d,
        "model.safetensors.index.json",
        br#"{"weight_map": {"a": "s1.safetensors", "c": "s2.safetensors"}}"#,
    );
    let e = Container::open(&d).err().unwrap();
    assert!(matches!(e, E::DuplicateAcrossShards { .. }), "{e}");
    says(&e, &["\"a\"", "s1.safetensors", "s2.safetensors"]);
}

#[test]
fn missing_tensor() {
    let c = open(st(&format!("{{{A4}}}"), b"abcd")).unwrap();
    let e = c.resolve("nope", &ShapeHints::new()).err().unwrap();
    assert!(matches!(e, E::MissingTensor { .. }));
    says(&e, &["test.safetensors", "\"nope\""]);
}

/// A stamped file: tensor `w` (U8, `wb` bytes) + optional sidecar, with stamp JSON `stamp`.
fn stamped(stamp: &str, wdtype: &str, wb: usize, sb: Option<usize>) -> Vec<u8> {
    let esc = stamp.replace('"', "\\\"");
    let mut h = format!(
        r#"{{"__metadata__":{{"tessera.w":"{esc}"}},"w":{{"dtype":"{wdtype}","shape":[{wb}],"data_offsets":[0,{wb}]}}"#
    );
    if let Some(sb) = sb {
        h += &format!(
            r#","w.qs":{{"dtype":"U8","shape":[{sb}],"data_offsets":[{wb},{}]}}"#,
            wb + sb
        );
    }
    h += "}";
    st(&h, &vec![0u8; wb + sb.unwrap_or(0)])
}

const INT8_2X4: &str = r#"{"format":"int8-row","shape":[2,4],"version":1}"#;

#[test]
fn stamped_ok_baseline() {
    let c = open(stamped(INT8_2X4, "U8", 8, Some(8))).unwrap();
    let r = c.resolve("w", &ShapeHints::new()).unwrap();
    assert!(
        matches!(r, container_io::Item::Tensor(ref t) if t.format == Format::Int8Row && t.how == container_io::How::Stamp)
    );
}

#[test]
fn missing_sidecar() {
    let e = resolve_err(stamped(INT8_2X4, "U8", 8, None), "w", &ShapeHints::new());
    assert!(matches!(e, E::MissingSidecar { expected: 8, .. }));
    says(&e, &["test.safetensors", "\"w\"", "w.qs", "missing"]);
}

#[test]
fn unexpected_sidecar() {
    let s = r#"{"format":"mq4-g256-v2","shape":[1,256],"seed":42,"version":1}"#;
    let e = resolve_err(stamped(s, "U8", 136, Some(4)), "w", &ShapeHints::new());
    assert!(matches!(e, E::UnexpectedSidecar { .. }));
    says(&e, &["test.safetensors", "\"w\"", "no sidecar"]);
}

#[test]
fn wrong_dtype() {
    let esc = INT8_2X4.replace('"', "\\\"");
    let h = format!(
        r#"{{"__metadata__":{{"tessera.w":"{esc}"}},"w":{{"dtype":"F32","shape":[2],"data_offsets":[0,8]}},"w.qs":{{"dtype":"U8","shape":[8],"data_offsets":[8,16]}}}}"#
    );
    let e = resolve_err(st(&h, &[0u8; 16]), "w", &ShapeHints::new());
    assert!(matches!(e, E::WrongDtype { .. }));
    says(&e, &["test.safetensors", "\"w\"", "F32", "U8"]);
}

#[test]
fn quant_shape_refused_by_registry() {
    let s = r#"{"format":"mq4-g256-v2","shape":[1,100],"seed":42,"version":1}"#;
    let e = resolve_err(stamped(s, "U8", 136, None), "w", &ShapeHints::new());
    assert!(matches!(e, E::Quant { .. }));
    says(&e, &["test.safetensors", "\"w\"", "multiple of the 256"]);
}

#[test]
fn stamp_json() {
    for s in [
        "nope",
        r#"{"format":"int8-row","shape":[2,4],"version":9}"#,
        r#"{"format":"int8-row","shape":[2],"version":1}"#,
        r#"{"format":"int8-row","shape":[2,4],"version":1,"extra":1}"#,
    ] {
        let e = resolve_err(stamped(s, "U8", 8, Some(8)), "w", &ShapeHints::new());
        assert!(matches!(e, E::StampJson { .. }), "{s}: {e}");
        says(&e, &["test.safetensors", "\"w\"", "stamp"]);
    }
}

#[test]
fn stamp_unknown_format() {
    let s = r#"{"format":"int4-g65","shape":[2,4],"version":1}"#;
    let e = resolve_err(stamped(s, "U8", 8, Some(8)), "w", &ShapeHints::new());
    assert!(matches!(e, E::StampUnknownFormat { .. }));
    says(&e, &["test.safetensors", "\"w\"", "int4-g65"]);
}

#[test]
fn stamp_inconsistent() {
    let s = r#"{"format":"int4-g64","shape":[2,4],"group":32,"version":1}"#;
    let e = resolve_err(stamped(s, "U8", 4, Some(8)), "w", &ShapeHints::new());
    assert!(matches!(e, E::StampInconsistent { field: "group", .. }));
    says(&e, &["test.safetensors", "\"w\"", "group = 32", "int4-g64"]);
    let s = r#"{"format":"fp8-e4m3-b128","shape":[2,4],"scales":"ue8m0","version":1}"#;
    let e = resolve_err(stamped(s, "U8", 8, Some(4)), "w", &ShapeHints::new());
    assert!(matches!(
        e,
        E::StampInconsistent {
            field: "scales",
            ..
        }
    ));
}

#[test]
fn stamp_mismatch_names_both() {
    // Stamp says int8-row [2, 4] (8 + 8 bytes); the file holds 8 + 4 (fp8's count).
    let e = resolve_err(stamped(INT8_2X4, "U8", 8, Some(4)), "w", &ShapeHints::new());
    assert!(matches!(
        e,
        E::StampMismatch {
            want_w: 8,
            want_s: 8,
            got_w: 8,
            got_s: 4,
            ..
        }
    ));
    says(
        &e,
        &[
            "test.safetensors",
            "\"w\"",
            "int8-row",
            "8 weight + 8 scale",
            "8 weight + 4 scale",
        ],
    );
}

#[test]
fn stamp_without_tensor() {
    let h = format!(r#"{{"__metadata__":{{"tessera.ghost":"{{}}"}},{A4}}}"#);
    let e = err(st(&h, b"abcd"));
    assert!(matches!(e, E::StampWithoutTensor { .. }));
    says(&e, &["test.safetensors", "\"ghost\""]);
}

/// An unstamped legacy pair `w` (shape text) + `w.qs`.
fn legacy_file(wshape: &str, wb: usize, sb: usize) -> Vec<u8> {
    let h = format!(
        r#"{{"w":{{"dtype":"U8","shape":{wshape},"data_offsets":[0,{wb}]}},"w.qs":{{"dtype":"U8","shape":[{sb}],"data_offsets":[{wb},{}]}}}}"#,
        wb + sb
    );
    st(&h, &vec![0u8; wb + sb])
}

#[test]
fn no_shape() {
    let e = resolve_err(legacy_file("[32]", 32, 16), "w", &ShapeHints::new());
    assert!(matches!(e, E::NoShape { .. }));
    says(&e, &["test.safetensors", "\"w\"", "shape hint"]);
}

#[test]
fn no_legacy_match() {
    let hints: ShapeHints = HashMap::from([("w".to_string(), (4, 8))]);
    let e = resolve_err(legacy_file("[32]", 32, 3), "w", &hints);
    assert!(matches!(e, E::NoLegacyMatch { .. }));
    says(
        &e,
        &[
            "test.safetensors",
            "\"w\"",
            "[4, 8]",
            "matches no legacy format",
        ],
    );
}

#[test]
fn ambiguous_names_rule_and_candidates() {
    let (w, s) = legacy::byte_counts(Format::Fp8E4m3B128, 64, 98).unwrap();
    let hints: ShapeHints = HashMap::from([("w".to_string(), (64, 98))]);
    let e = resolve_err(
        legacy_file(&format!("[{w}]"), w as usize, s as usize),
        "w",
        &hints,
    );
    assert!(matches!(e, E::Ambiguous { .. }));
    says(
        &e,
        &[
            "test.safetensors",
            "\"w\"",
            legacy::RULE_FMT6_FMT7,
            "e8-lattice, fp8-e4m3-b128",
        ],
    );
    // The GLM-5.2 o_proj family resolves (incumbent), it is not refused.
    let (w, s) = legacy::byte_counts(Format::Int8Row, 256, 16384).unwrap();
    let hints: ShapeHints = HashMap::from([("w".to_string(), (256, 16384))]);
    let c = open(legacy_file(&format!("[{w}]"), w as usize, s as usize)).unwrap();
    match c.resolve("w", &hints).unwrap() {
        container_io::Item::Tensor(t) => {
            assert_eq!(t.format, Format::Int8Row);
            assert_eq!(t.how, container_io::How::Incumbent(legacy::RULE_FMT1_FMT7));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn ambiguous_shape() {
    let e = resolve_err(
        legacy_file("[16,300]", 16 * 300, 64),
        "w",
        &ShapeHints::new(),
    );
    assert!(matches!(e, E::AmbiguousShape { .. }));
    says(
        &e,
        &[
            "test.safetensors",
            "\"w\"",
            "int8-row [16, 300]",
            "int4-row [16, 600]",
            "shape hint",
        ],
    );
}

#[test]
fn legacy_would_misresolve() {
    let mut p = Plan::new("out.safetensors", true);
    let e = p
        .add_quantized("o_proj", Format::Fp8E4m3B128, 6144, 16384, 42)
        .err()
        .unwrap();
    assert!(matches!(e, E::LegacyWouldMisresolve { .. }));
    says(
        &e,
        &[
            "out.safetensors",
            "\"o_proj\"",
            "int8-row",
            legacy::RULE_FMT1_FMT7,
        ],
    );
    let e = p
        .add_quantized("x", Format::Mq4G256V2, 4, 256, 42)
        .err()
        .unwrap();
    says(&e, &["no legacy fmt= id"]);
    // Stamped mode writes it.
    let mut p = Plan::new("out.safetensors", false);
    p.add_quantized("o_proj", Format::Fp8E4m3B128, 6144, 16384, 42)
        .unwrap();
}

#[test]
fn plan() {
    let mut p = Plan::new("out.safetensors", false);
    p.add_raw("a", Dtype::U8, &[4]).unwrap();
    let e = p.add_raw("a", Dtype::U8, &[4]).err().unwrap();
    assert!(matches!(e, E::Plan { .. }));
    says(&e, &["out.safetensors", "\"a\"", "twice"]);
}

#[test]
fn input() {
    let c = open(st(
        r#"{"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}"#,
        &[0u8; 8],
    ))
    .unwrap();
    let opts = QuantizeOptions {
        format: Format::Int8Row,
        roles: HashMap::new(),
        legacy_unstamped: false,
        seed: 42,
        gpu_tables: Vec::new(),
    };
    let e = plan_quantize(&c, "out.safetensors", &opts).err().unwrap();
    assert!(matches!(e, E::Input { .. }));
    says(
        &e,
        &["test.safetensors", "\"ids\"", "I64", "not a float tensor"],
    );
}
