//! The WGSL files without a device: every file parses and validates with naga (the plain
//! files with immediates only, the `.subgroup.wgsl` files with subgroups too), every
//! pipeline of the table specialises (overrides processed) for S = 1..=16, and every kernel
//! is composed of the one prelude, its family file and one of the two tails
//! (docs/WGPU.md, /work/briefs/shader-contract.md).
use kernels_metal::kernels::{
    PRELUDE_FILE, SHADER_FILES, SOURCE_FILES, TAIL_SHARED_MEMORY_FILE, TAIL_SUBGROUP_FILE,
    kernel_for, shader_parts, shader_source,
};
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

// unpack2x16float (gemv_fp8's S = 1 decode) needs SHADER_FLOAT16_IN_FLOAT32: no f16 type,
// no SPIR-V capability; wgpu's downlevel SHADER_F16_IN_F32.
fn caps_for(file: &str) -> Capabilities {
    let base = Capabilities::IMMEDIATES | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if file.ends_with(".subgroup.wgsl") {
        base | Capabilities::SUBGROUP
    } else {
        base
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
fn every_kernel_is_the_prelude_its_family_and_its_tail() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shaders/wgsl");
    let disk = |name: &str| {
        std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    // Every file on disk is a part, and every part is on disk.
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".wgsl"))
        .collect();
    on_disk.sort();
    let mut parts: Vec<String> = SOURCE_FILES.iter().map(|s| s.to_string()).collect();
    parts.sort();
    assert_eq!(on_disk, parts, "shaders/wgsl/ and SOURCE_FILES");
    assert!(disk(PRELUDE_FILE).starts_with(PRELUDE));
    assert!(disk(TAIL_SHARED_MEMORY_FILE).starts_with(TAIL));
    assert!(disk(TAIL_SUBGROUP_FILE).starts_with(TAIL));
    for file in SHADER_FILES {
        let [prelude, family, tail] = shader_parts(file).unwrap();
        // A family file holds only its own code: no second copy of a shared part.
        let fam = disk(family);
        assert!(fam.contains(FAMILY), "{family}: no `{FAMILY}` marker");
        for marker in [PRELUDE, TAIL] {
            assert!(
                !fam.contains(marker),
                "{family} repeats a shared part ({marker})"
            );
        }
        let want = if file.ends_with(".subgroup.wgsl") {
            TAIL_SUBGROUP_FILE
        } else {
            TAIL_SHARED_MEMORY_FILE
        };
        assert_eq!((prelude, tail), (PRELUDE_FILE, want), "{file}");
        // The embedded kernel is the parts as they are on disk (a stale build fails here).
        let composed = disk(prelude) + &fam + &disk(tail);
        assert!(
            source(file) == composed,
            "{file}: embedded copy differs from its parts"
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
