//! The SPIR-V modules build.rs compiled from shaders/wgsl, and which one serves a format.
//!
//! One module per (kernel file, format constants, S): naga resolves WGSL `override`s before
//! writing SPIR-V, so batch S and rows-per-workgroup are baked in, as the wgpu tier bakes
//! them into its pipelines (kernels_metal::kernels).

use crate::error::VulkanError;
use quant_core::Format;

/// One compiled module, or why it could not be compiled.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ModuleEntry {
    /// `<file stem>[.subgroup][.CONST-value...].S<s>`: unique, also the pipeline's key.
    pub name: &'static str,
    pub file: &'static str,
    pub entry: &'static str,
    pub s: usize,
    /// Rows one workgroup owns (the `ROWS` override).
    pub rows: u32,
    /// Invocations a workgroup (the `WG` override).
    pub workgroup: u32,
    offset: usize,
    len: usize,
    /// The build's error where the file did not compile (the format is then refused).
    pub error: Option<&'static str>,
}

mod generated {
    use super::ModuleEntry;
    include!(concat!(env!("OUT_DIR"), "/spirv_index.rs"));
}

/// The copy shader's SPIR-V (the bench's ceiling; empty if it did not compile) and its
/// workgroup width.
pub fn copy_shader() -> (&'static [u8], u32) {
    (generated::COPY, generated::COPY_WORKGROUP)
}

/// Every module, in build order.
pub fn modules() -> &'static [ModuleEntry] {
    generated::MODULES
}

/// SPIR-V `OpCapability DotProduct` (SPV_KHR_integer_dot_product, core in SPIR-V 1.6).
pub const CAPABILITY_DOT_PRODUCT: u32 = 6019;
/// SPIR-V `OpCapability DotProductInput4x8BitPacked`.
pub const CAPABILITY_DOT_PRODUCT_4X8_PACKED: u32 = 6018;

impl ModuleEntry {
    /// The SPIR-V bytes (empty for a module that failed to compile).
    pub fn bytes(&self) -> &'static [u8] {
        generated::BLOB
            .get(self.offset..self.offset.saturating_add(self.len))
            .unwrap_or(&[])
    }

    /// The `OpCapability` operands of the module (empty if it failed to compile or its
    /// bytes are not SPIR-V words, as [`crate::device::spirv_words`] checks them).
    pub fn capabilities(&self) -> Vec<u32> {
        let Ok(words) = crate::device::spirv_words(self.name, self.bytes()) else {
            return vec![];
        };
        let mut out = vec![];
        // Instructions start after the 5-word header; capabilities come first.
        let mut k = 5;
        while let Some(&w) = words.get(k) {
            let (count, op) = ((w >> 16) as usize, w & 0xFFFF);
            if op == 17
                && let Some(&c) = words.get(k + 1)
            {
                out.push(c);
            }
            k += count.max(1);
        }
        out
    }

    /// Whether the module runs `dot4I8Packed` as OpSDot (the device must have
    /// shaderIntegerDotProduct enabled: the S = 1 int4 paths of gemv_int_row,
    /// gemv_int_group and gemv_affine256).
    pub fn needs_integer_dot_product(&self) -> bool {
        self.capabilities().contains(&CAPABILITY_DOT_PRODUCT)
    }
}

/// The module running `format` at batch `s`, subgroup variant or not; `mutate` is 0 except
/// in the mutation tests.
pub fn module_for(
    format: Format,
    subgroup: bool,
    s: usize,
    mutate: u32,
) -> Result<&'static ModuleEntry, VulkanError> {
    let name = format.name();
    let found = generated::BY_FORMAT
        .binary_search_by(|(f, sg, ss, m, _)| (*f, *sg, *ss, *m).cmp(&(name, subgroup, s, mutate)))
        .ok()
        .and_then(|k| generated::MODULES.get(generated::BY_FORMAT[k].4));
    let m = found.ok_or_else(|| VulkanError::NotImplemented {
        format,
        s,
        why: format!(
            "no {} SPIR-V module for S = {s}",
            if subgroup {
                "subgroup"
            } else {
                "shared-memory"
            }
        ),
    })?;
    if let Some(e) = m.error {
        return Err(VulkanError::Shader {
            what: format!("{} did not compile at build time: {e}", m.name),
        });
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_sorted_and_points_at_real_modules() {
        let idx = generated::BY_FORMAT;
        assert!(
            idx.windows(2)
                .all(|w| (w[0].0, w[0].1, w[0].2, w[0].3) < (w[1].0, w[1].1, w[1].2, w[1].3))
        );
        for &(f, sg, s, _, k) in idx {
            let m = &modules()[k];
            assert_eq!(m.s, s, "{f}");
            assert_eq!(m.file.ends_with(".subgroup.wgsl"), sg, "{f}");
            if m.error.is_none() {
                assert!(
                    crate::device::spirv_words(m.name, m.bytes()).is_ok(),
                    "{}",
                    m.name
                );
            }
        }
    }

    /// The modules need nothing the device is not asked for: Shader everywhere,
    /// GroupNonUniform (+ Arithmetic) in the subgroup variants only (the backend uses
    /// those only where the device reports subgroup arithmetic), DotProduct (+ 4x8 packed)
    /// in gemv_int_row, gemv_int_group and gemv_affine256 only (used only where
    /// shaderIntegerDotProduct is enabled). A new capability (Int64,
    /// Float16, 16-bit storage, ...) would need a device feature enabled first.
    #[test]
    fn modules_use_only_the_capabilities_the_device_is_checked_for() {
        const SHADER: u32 = 1;
        const GROUP_NON_UNIFORM: u32 = 61;
        const GROUP_NON_UNIFORM_ARITHMETIC: u32 = 63;
        let mut seen = 0;
        for m in modules().iter().filter(|m| m.error.is_none()) {
            let caps = m.capabilities();
            assert!(caps.contains(&SHADER), "{}: no Shader capability", m.name);
            let subgroup = m.file.ends_with(".subgroup.wgsl");
            // OpSDot (packed int8 activations): gemv_int_row, gemv_int_group and
            // gemv_affine256 only; the backend runs those modules only where the device has
            // shaderIntegerDotProduct.
            let dot = m.file.starts_with("gemv_int_row")
                || m.file.starts_with("gemv_int_group")
                || m.file.starts_with("gemv_affine256");
            for c in &caps {
                let ok = *c == SHADER
                    || (subgroup
                        && (*c == GROUP_NON_UNIFORM || *c == GROUP_NON_UNIFORM_ARITHMETIC))
                    || (dot
                        && (*c == super::CAPABILITY_DOT_PRODUCT
                            || *c == super::CAPABILITY_DOT_PRODUCT_4X8_PACKED));
                assert!(ok, "{}: capability {c}", m.name);
            }
            assert!(caps.contains(&SHADER), "{}", m.name);
            seen += 1;
        }
        assert!(seen > 0);
    }
}
