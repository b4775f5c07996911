//! The WGSL files without a device: every file parses and validates with naga (the plain
//! files with immediates only, the `.subgroup.wgsl` files with subgroups too), every
//! pipeline of the table specialises (overrides processed) for S = 1..=16, and the two
//! variants of a family differ only in their tail, with one prelude shared by all files
//! (docs/WGPU.md, /work/briefs/shader-contract.md).
use kernels_metal::kernels::{SHADER_FILES, kernel_for, shader_source};
use naga::valid::{Capabilities, ValidationFlags, Validator};
use quant_core::Format;

const PRELUDE: &str = "// ---- prelude:";
const FAMILY: &str = "// ---- family:";
const TAIL: &str = "// ---- tail:";

fn source(file: &str) -> &'static str {
    shader_source(file).unwrap_or_else(|| panic!("{file} is not embedded"))
}

fn validate(file: &str, caps: Capabilities) -> Result<naga::Module, String> {
    let src = source(file);
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| e.emit_to_string(src))?;
    Ok(module)
}

fn caps_for(file: &str) -> Capabilities {
    if file.ends_with(".subgroup.wgsl") {
        Capabilities::IMMEDIATES | Capabilities::SUBGROUP
    } else {
        Capabilities::IMMEDIATES
    }
}

#[test]
fn every_file_validates_with_only_the_capabilities_it_claims() {
    for file in SHADER_FILES {
        if let Err(e) = validate(file, caps_for(file)) {
            panic!("{file}:\n{e}");
        }
    }
    // The plain files really run without subgroups.
    for file in SHADER_FILES
        .iter()
        .filter(|f| !f.ends_with(".subgroup.wgsl"))
    {
        assert!(!source(file).contains("subgroupAdd"), "{file}");
    }
}

#[test]
fn a_subgroup_file_is_its_plain_file_with_the_other_tail() {
    let split = |file: &str| -> (&'static str, &'static str) {
        let src = source(file);
        let at = src
            .find(TAIL)
            .unwrap_or_else(|| panic!("{file}: no `{TAIL}` marker"));
        src.split_at(at)
    };
    let (_, plain_tail) = split(SHADER_FILES[0]);
    let (_, sg_tail) = split(SHADER_FILES[1]);
    let prelude = |file: &str| -> &'static str {
        let src = source(file);
        let (a, b) = (src.find(PRELUDE), src.find(FAMILY));
        match (a, b) {
            (Some(a), Some(b)) if a < b => &src[a..b],
            _ => panic!("{file}: no prelude markers"),
        }
    };
    let first_prelude = prelude(SHADER_FILES[0]);
    for pair in SHADER_FILES.chunks(2) {
        let (plain, sg) = (pair[0], pair[1]);
        assert_eq!(
            sg,
            plain.replace(".wgsl", ".subgroup.wgsl"),
            "SHADER_FILES pairs"
        );
        let (pb, pt) = split(plain);
        let (sb, st) = split(sg);
        assert_eq!(pb, sb, "{sg} must equal {plain} up to the tail marker");
        assert_eq!(pt, plain_tail, "{plain}: its tail differs from the others'");
        assert_eq!(st, sg_tail, "{sg}: its tail differs from the others'");
        assert_eq!(
            prelude(plain),
            first_prelude,
            "{plain}: the prelude differs from {}'s",
            SHADER_FILES[0]
        );
    }
}

#[test]
fn every_pipeline_of_the_table_specialises() {
    for f in Format::all() {
        let Some(k) = kernel_for(f) else { continue };
        for file in [k.file, k.subgroup_file] {
            let module = validate(file, caps_for(file)).unwrap();
            let info = Validator::new(ValidationFlags::all(), caps_for(file))
                .validate(&module)
                .unwrap();
            for s in 1..=16 {
                // The default variant with every mutation, and every admitted row count.
                let variants = (0..=3).map(|m| (k.rows(s), m)).chain(
                    [1u32, 2, 4, 8]
                        .into_iter()
                        .filter(|&r| k.admits(s, r))
                        .map(|r| (r, 0)),
                );
                for (rows, mutate) in variants {
                    assert!(k.admits(s, rows), "{f}: default rows {rows} at S={s}");
                    let mut constants = naga::back::PipelineConstants::default();
                    for (n, v) in k.overrides(s, rows, mutate) {
                        constants.insert(n.to_string(), v);
                    }
                    if let Err(e) = naga::back::pipeline_constants::process_overrides(
                        &module, &info, None, &constants,
                    ) {
                        panic!("{f} {file} S={s} ROWS={rows} MUTATE={mutate}: {e}");
                    }
                }
            }
        }
    }
}
