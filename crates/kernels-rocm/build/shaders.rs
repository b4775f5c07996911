//! WGSL -> naga -> SPIR-V / MSL / HLSL, one module per pipeline the kernel table asks for.
//!
//! Shared, as source, by `crates/kernels-rocm/build.rs` (which embeds the SPIR-V) and
//! `xtask/src/shaders.rs` (`cargo xtask shaders [--check]`, which writes the MSL and HLSL
//! snapshots and the SPIR-V manifest), so the two cannot compile the shaders differently.
//! It reads the table and the WGSL text from `kernels_metal::kernels` (the contract in
//! /work/briefs/shader-contract.md): file, entry point, override constants, S and ROWS.
//!
//! naga's SPIR-V, MSL and HLSL writers take no override constants (SPIR-V gets no
//! specialisation constants from naga), so every override is resolved here
//! (`process_overrides`) and each (file, format constants, S) is its own module.

use kernels_metal::kernels::{self as table, MAX_S};
use naga::back::pipeline_constants::process_overrides;
use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
use naga::valid::{
    Capabilities, ModuleInfo, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator,
};
use naga::{AddressSpace, Module, ShaderStage, StorageAccess};
use quant_core::Format;
use std::collections::BTreeMap;

/// SPIR-V 1.3: the first with GroupNonUniformArithmetic (subgroupAdd); Vulkan 1.1 takes it.
pub const SPIRV_VERSION: (u8, u8) = (1, 3);
/// MSL 2.4 (macOS 12): simd_sum and friends for the subgroup files.
pub const MSL_VERSION: (u8, u8) = (2, 4);
/// Bytes of `Params` (the contract's push-constant block).
pub const PARAMS_BYTES: u32 = 32;

/// Whether `file` is a subgroup variant (`<name>.subgroup.wgsl`).
pub fn is_subgroup_file(file: &str) -> bool {
    file.ends_with(".subgroup.wgsl")
}

/// What a file may use: immediates (push constants) and `unpack2x16float` (naga's
/// SHADER_FLOAT16_IN_FLOAT32: no f16 type, no SPIR-V capability; wgpu's downlevel
/// SHADER_F16_IN_F32, which its Vulkan, Metal and DX12 devices have, lavapipe where it
/// offers shaderFloat16) everywhere, subgroups only in the `.subgroup.wgsl` variants. Every
/// backend (Vulkan, Metal, DX12) is given exactly this, so a file that validates here needs
/// nothing a backend lacks.
pub fn capabilities(subgroup: bool) -> Capabilities {
    let base = Capabilities::IMMEDIATES | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if subgroup {
        base | Capabilities::SUBGROUP
    } else {
        base
    }
}

fn validator(caps: Capabilities) -> Validator {
    let mut v = Validator::new(ValidationFlags::all(), caps);
    if caps.contains(Capabilities::SUBGROUP) {
        v.subgroup_stages(ShaderStages::COMPUTE);
        v.subgroup_operations(SubgroupOperationSet::BASIC | SubgroupOperationSet::ARITHMETIC);
    }
    v
}

/// A parsed and validated WGSL file.
pub struct Source {
    pub file: &'static str,
    pub module: Module,
    pub info: ModuleInfo,
}

/// The WGSL text of `file`: the copy compiled into kernels-metal (`shader_source`), so the
/// build and the wgpu tier read the same bytes.
pub fn text(file: &str) -> Result<&'static str, String> {
    table::shader_source(file)
        .ok_or_else(|| format!("{file}: not in kernels_metal::kernels::SHADER_FILES"))
}

/// Parses and validates `file` with the capabilities its name allows, and checks the
/// contract's interface: bindings 0..=3 of group 0 (weights, scales, x read-only; y
/// read-write) and a 32-byte immediate block. A `.subgroup.wgsl` file must also *fail*
/// without subgroups (else it is misnamed and the subgroup selection means nothing).
pub fn load(file: &'static str) -> Result<Source, String> {
    let wgsl = text(file)?;
    let module = naga::front::wgsl::parse_str(wgsl)
        .map_err(|e| format!("{file}: {}", e.emit_to_string(wgsl)))?;
    let subgroup = is_subgroup_file(file);
    let info = validator(capabilities(subgroup))
        .validate(&module)
        .map_err(|e| format!("{file}: invalid: {}", e.emit_to_string(wgsl)))?;
    if subgroup && validator(capabilities(false)).validate(&module).is_ok() {
        return Err(format!(
            "{file}: validates without subgroups, so it is not a subgroup variant"
        ));
    }
    check_interface(file, &module)?;
    Ok(Source { file, module, info })
}

fn check_interface(file: &str, module: &Module) -> Result<(), String> {
    let mut seen = [false; 4];
    let mut immediates = 0;
    for (_, g) in module.global_variables.iter() {
        match (g.space, &g.binding) {
            (AddressSpace::Immediate, _) => {
                immediates += 1;
                let size = module.types[g.ty].inner.size(module.to_ctx());
                if size != PARAMS_BYTES {
                    return Err(format!(
                        "{file}: the immediate block is {size} bytes, the contract says {PARAMS_BYTES}"
                    ));
                }
            }
            (AddressSpace::Storage { access }, Some(b)) => {
                let slot = usize::try_from(b.binding)
                    .ok()
                    .filter(|&k| b.group == 0 && k < 4);
                let Some(k) = slot else {
                    return Err(format!(
                        "{file}: storage buffer at group {} binding {} (the contract has group 0, bindings 0..=3)",
                        b.group, b.binding
                    ));
                };
                let want = if k == 3 {
                    StorageAccess::LOAD | StorageAccess::STORE
                } else {
                    StorageAccess::LOAD
                };
                if access != want {
                    return Err(format!(
                        "{file}: binding {k} has access {access:?}, the contract says {want:?}"
                    ));
                }
                seen[k] = true;
            }
            (AddressSpace::Uniform | AddressSpace::Handle, Some(b)) => {
                return Err(format!(
                    "{file}: resource at group {} binding {} is not a storage buffer",
                    b.group, b.binding
                ));
            }
            _ => {}
        }
    }
    if immediates != 1 {
        return Err(format!(
            "{file}: {immediates} immediate blocks (the contract has one, `var<immediate> p: Params`)"
        ));
    }
    if !seen[3] {
        return Err(format!("{file}: no output binding 3"));
    }
    Ok(())
}

/// Renders an override value for a module name: integers as such, others with `p` for the
/// point and `m` for a minus sign.
pub fn value_tag(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64).replace('-', "m")
    } else {
        format!("{v}").replace('.', "p").replace('-', "m")
    }
}

/// One pipeline's module: a file with every override resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Specialisation {
    pub file: &'static str,
    pub entry: &'static str,
    /// The format's own constants (the table's `constants`), in table order.
    pub constants: Vec<(&'static str, f64)>,
    pub s: usize,
    pub rows: u32,
    /// Invocations a workgroup (the `WG` override, `KernelSpec::workgroup_size`).
    pub workgroup: u32,
    /// The `MUTATE` override: 0, or a deliberate defect (kernels-rocm's mutation tests).
    pub mutate: u32,
    /// Registry formats this module serves, in registry order.
    pub formats: Vec<Format>,
}

impl Specialisation {
    /// `<file stem>[.subgroup][.NAME-value...]`: the module without S (the snapshots).
    pub fn family_name(&self) -> String {
        let mut n = self.file.trim_end_matches(".wgsl").to_string();
        for (name, v) in &self.constants {
            n.push('.');
            n.push_str(name);
            n.push('-');
            n.push_str(&value_tag(*v));
        }
        n
    }

    /// [`Self::family_name`] plus `.S<s>` (and `.MUTATE-<m>` for a mutant): unique per
    /// module.
    pub fn name(&self) -> String {
        if self.mutate == 0 {
            format!("{}.S{}", self.family_name(), self.s)
        } else {
            format!("{}.S{}.MUTATE-{}", self.family_name(), self.s, self.mutate)
        }
    }

    /// Every override of the module.
    pub fn overrides(&self, spec: &table::KernelSpec) -> Vec<(&'static str, f64)> {
        spec.overrides(self.s, self.rows, self.mutate)
    }
}

/// Every module the table needs for batches `batches` (1..=MAX_S for the Vulkan tier), both
/// variants, deduplicated (formats sharing a kernel and constants share a module), in a
/// stable order: file, constants, S.
pub fn specialisations(batches: std::ops::RangeInclusive<usize>) -> Vec<Specialisation> {
    specialise(Format::all(), batches, 0)
}

/// The modules of `formats` with the deliberate defect `mutate` (1..=3, see the shaders).
pub fn mutants(
    formats: impl Iterator<Item = Format>,
    batches: std::ops::RangeInclusive<usize>,
    mutate: u32,
) -> Vec<Specialisation> {
    specialise(formats, batches, mutate)
}

fn specialise(
    formats: impl Iterator<Item = Format>,
    batches: std::ops::RangeInclusive<usize>,
    mutate: u32,
) -> Vec<Specialisation> {
    let mut out: BTreeMap<String, Specialisation> = BTreeMap::new();
    for format in formats {
        let Some(spec) = table::kernel_for(format) else {
            continue;
        };
        for file in [spec.file, spec.subgroup_file] {
            for s in batches.clone() {
                let sp = Specialisation {
                    file,
                    entry: spec.entry,
                    constants: spec.constants.to_vec(),
                    s,
                    // The table's default, as the wgpu tier uses (KernelSpec::rows).
                    rows: spec.rows(s),
                    workgroup: spec.workgroup_size(s),
                    mutate,
                    formats: vec![],
                };
                // Zero-padded S keeps S10 after S9 in the map's order.
                let key = format!("{}.S{:03}", sp.family_name(), s);
                out.entry(key).or_insert(sp).formats.push(format);
            }
        }
    }
    out.into_values().collect()
}

/// The batches the Vulkan tier compiles: every S a kernel accepts.
pub fn vulkan_batches() -> std::ops::RangeInclusive<usize> {
    1..=MAX_S
}

/// `src` with `sp`'s overrides resolved, validated again, its entry point checked.
pub fn resolve(src: &Source, sp: &Specialisation) -> Result<(Module, ModuleInfo), String> {
    let name = sp.name();
    let format = sp
        .formats
        .first()
        .copied()
        .ok_or_else(|| format!("{name}: no format"))?;
    let spec =
        table::kernel_for(format).ok_or_else(|| format!("{name}: no kernel for {format}"))?;
    let mut constants = naga::back::PipelineConstants::default();
    for (k, v) in sp.overrides(&spec) {
        let known = src
            .module
            .overrides
            .iter()
            .any(|(_, o)| o.name.as_deref() == Some(k));
        if !known {
            return Err(format!("{name}: {} has no override `{k}`", src.file));
        }
        constants.insert(k.to_string(), v);
    }
    let (module, info) = process_overrides(
        &src.module,
        &src.info,
        Some((ShaderStage::Compute, sp.entry)),
        &constants,
    )
    .map_err(|e| format!("{name}: resolving overrides: {e}"))?;
    let (module, info) = (module.into_owned(), info.into_owned());
    let ep = module
        .entry_points
        .iter()
        .find(|e| e.name == sp.entry)
        .ok_or_else(|| format!("{name}: no entry point `{}`", sp.entry))?;
    if ep.stage != ShaderStage::Compute || ep.workgroup_size != [sp.workgroup, 1, 1] {
        return Err(format!(
            "{name}: entry `{}` is {:?} with workgroup size {:?}; the table says compute, [{}, 1, 1]",
            sp.entry, ep.stage, ep.workgroup_size, sp.workgroup
        ));
    }
    Ok((module, info))
}

/// The SPIR-V's checks. Indices into arrays of fixed size are clamped into range
/// (`Restrict`). Storage-buffer accesses are left to the device (`Unchecked`): kernels-rocm
/// opens every device with robustBufferAccess, so an access past a binding reads values
/// from within the buffer or zero and a write past it is discarded or lands in the buffer;
/// a kernel bug then still cannot touch other memory and fails the conformance suite
/// instead (wgpu 30 compiles the same way on devices with robustBufferAccess2). The clamps
/// cost the scalar-load kernels: on the H200 at S = 1, int4-g64 68% of the copy ceiling
/// with them and 72% without, mq4-g256-v2 62% and 66-68% (docs/VULKAN.md, "Session 13").
fn spirv_bounds() -> BoundsCheckPolicies {
    BoundsCheckPolicies {
        index: BoundsCheckPolicy::Restrict,
        buffer: BoundsCheckPolicy::Unchecked,
        ..Default::default()
    }
}

/// The MSL and HLSL snapshots' checks: index and buffer accesses clamped into range
/// (`Restrict`), as no device robustness is assumed there.
fn bounds() -> BoundsCheckPolicies {
    BoundsCheckPolicies {
        index: BoundsCheckPolicy::Restrict,
        buffer: BoundsCheckPolicy::Restrict,
        ..Default::default()
    }
}

/// The SPIR-V words of a resolved module, for `entry`.
pub fn spirv(module: &Module, info: &ModuleInfo, entry: &str) -> Result<Vec<u32>, String> {
    use naga::back::spv;
    // Descriptor set 0, bindings 0..=3, as the WGSL declares them (and as the Vulkan
    // tier's one descriptor-set layout has them).
    let mut binding_map = spv::BindingMap::default();
    for k in 0..4u32 {
        binding_map.insert(
            naga::ResourceBinding {
                group: 0,
                binding: k,
            },
            spv::BindingInfo {
                descriptor_set: 0,
                binding: k,
                binding_array_size: None,
            },
        );
    }
    let options = spv::Options {
        binding_map,
        lang_version: SPIRV_VERSION,
        // Explicit: naga's default adds debug output when naga itself is a debug build,
        // which would make the build script and xtask disagree.
        flags: spv::WriterFlags::empty(),
        fake_missing_bindings: false,
        bounds_check_policies: spirv_bounds(),
        // Every loop is bounded by the push constants; naga's loop counters cost a
        // register pair and a branch per iteration.
        force_loop_bounding: false,
        // Every kernel writes its workgroup memory before reading it (the reduction
        // tails), so naga's zeroing prologue (one invocation storing the whole array, then
        // a barrier) is pure cost. The wgpu tier compiles the same way
        // (`zero_initialize_workgroup_memory: false`), so both tiers run the same code.
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        ..Default::default()
    };
    let pipeline = spv::PipelineOptions {
        shader_stage: ShaderStage::Compute,
        entry_point: entry.to_string(),
    };
    spv::write_vec(module, info, &options, Some(&pipeline)).map_err(|e| e.to_string())
}

/// The bench's copy ceiling: a vec4 copy shader (the wgpu tier's, with the contract's
/// bindings: source at 0, destination at 3), each invocation moving 4 vec4s a round,
/// grid-strided. NVIDIA's vkCmdCopyBuffer reaches about a fifth of what a shader copy does,
/// so only a shader copy is a fair ceiling for shader GEMVs.
pub const COPY_WGSL: &str = "
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> dst: array<vec4<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
    let total = arrayLength(&dst);
    let stride = n.x * 256u;
    var k = g.x;
    while (k < total) {
        for (var j = 0u; j < 4u; j++) {
            if (k < total) {
                dst[k] = src[k];
            }
            k += stride;
        }
    }
}
";

/// Invocations of one copy-shader workgroup.
pub const COPY_WORKGROUP: u32 = 256;

/// The SPIR-V of [`COPY_WGSL`] (entry `main`).
pub fn copy_spirv() -> Result<Vec<u32>, String> {
    let module =
        naga::front::wgsl::parse_str(COPY_WGSL).map_err(|e| e.emit_to_string(COPY_WGSL))?;
    let info = validator(Capabilities::empty())
        .validate(&module)
        .map_err(|e| e.emit_to_string(COPY_WGSL))?;
    spirv(&module, &info, "main")
}

/// MSL of a resolved module: buffers 0..=3 as the bindings, the immediates at buffer 4 and
/// the runtime-array sizes at buffer 5 (what a Metal host binds).
pub fn msl(module: &Module, info: &ModuleInfo, entry: &str) -> Result<String, String> {
    use naga::back::msl;
    let mut resources = msl::BindingMap::default();
    for k in 0..4u8 {
        resources.insert(
            naga::ResourceBinding {
                group: 0,
                binding: u32::from(k),
            },
            msl::BindTarget {
                buffer: Some(k),
                mutable: k == 3,
                ..Default::default()
            },
        );
    }
    let mut map = msl::EntryPointResourceMap::default();
    map.insert(
        entry.to_string(),
        msl::EntryPointResources {
            resources,
            immediates_buffer: Some(4),
            sizes_buffer: Some(5),
        },
    );
    let options = msl::Options {
        lang_version: MSL_VERSION,
        per_entry_point_map: map,
        fake_missing_bindings: false,
        bounds_check_policies: bounds(),
        force_loop_bounding: false,
        ..Default::default()
    };
    let pipeline = msl::PipelineOptions {
        entry_point: Some((ShaderStage::Compute, entry.to_string())),
        ..Default::default()
    };
    msl::write_string(module, info, &options, &pipeline)
        .map(|(s, _)| s)
        .map_err(|e| e.to_string())
}

/// HLSL (shader model 6.0, the first with wave intrinsics) of a resolved module: bindings
/// n at register n of space 0, the immediates at b0, naga's special constants
/// (num_workgroups) at b1.
pub fn hlsl(module: &Module, info: &ModuleInfo, entry: &str) -> Result<String, String> {
    use naga::back::hlsl;
    let mut binding_map = hlsl::BindingMap::default();
    for k in 0..4u32 {
        binding_map.insert(
            naga::ResourceBinding {
                group: 0,
                binding: k,
            },
            hlsl::BindTarget {
                space: 0,
                register: k,
                ..Default::default()
            },
        );
    }
    let options = hlsl::Options {
        shader_model: hlsl::ShaderModel::V6_0,
        binding_map,
        fake_missing_bindings: false,
        immediates_target: Some(hlsl::BindTarget {
            space: 0,
            register: 0,
            ..Default::default()
        }),
        special_constants_binding: Some(hlsl::BindTarget {
            space: 0,
            register: 1,
            ..Default::default()
        }),
        force_loop_bounding: false,
        ..Default::default()
    };
    let pipeline = hlsl::PipelineOptions {
        entry_point: Some((ShaderStage::Compute, entry.to_string())),
    };
    let mut out = String::new();
    hlsl::Writer::new(&mut out, &options, &pipeline)
        .write(module, info, None)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// FNV-1a 64 of the SPIR-V words (the manifest's fingerprint; not a security hash).
pub fn fingerprint(words: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        for b in w.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
