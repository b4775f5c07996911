//! Every GGML tensor type a GGUF file may name, with its block geometry, as gguf-py's
//! `GGMLQuantizationType` and `GGML_QUANT_SIZES` give them (gguf-py 0.19). The parser needs
//! the geometry of every type, supported or not, to check a file's tensor sizes and
//! offsets; the types tessera can hold map to registry rows through
//! [`Format::from_ggml`], and a test checks that the registry's block sizes agree with
//! this table. Retired ids (4, 5: Q4_2/Q4_3; 31-33: Q4_0_4_4/4_8/8_8; 36-38: IQ4_NL_4_4/4_8/
//! 8_8) are not in the table, so a file using them is refused as an unknown type.

use quant_core::Format;

/// One GGML type: id, gguf-py name, weights per block, bytes per block.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block: u32,
    pub type_size: u32,
}

const QK_K: u32 = 256;

const fn t(id: u32, name: &'static str, block: u32, type_size: u32) -> GgmlType {
    GgmlType {
        id,
        name,
        block,
        type_size,
    }
}

/// gguf-py's `GGML_QUANT_SIZES`, in id order.
pub static GGML_TYPES: &[GgmlType] = &[
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 2 + 16),
    t(3, "Q4_1", 32, 2 + 2 + 16),
    t(6, "Q5_0", 32, 2 + 4 + 16),
    t(7, "Q5_1", 32, 2 + 2 + 4 + 16),
    t(8, "Q8_0", 32, 2 + 32),
    t(9, "Q8_1", 32, 4 + 4 + 32),
    t(10, "Q2_K", 256, 2 + 2 + QK_K / 16 + QK_K / 4),
    t(11, "Q3_K", 256, 2 + QK_K / 4 + QK_K / 8 + 12),
    t(12, "Q4_K", 256, 2 + 2 + QK_K / 2 + 12),
    t(13, "Q5_K", 256, 2 + 2 + QK_K / 2 + QK_K / 8 + 12),
    t(14, "Q6_K", 256, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16),
    t(15, "Q8_K", 256, 4 + QK_K + QK_K / 8),
    t(16, "IQ2_XXS", 256, 2 + QK_K / 4),
    t(17, "IQ2_XS", 256, 2 + QK_K / 4 + QK_K / 32),
    t(18, "IQ3_XXS", 256, 2 + QK_K / 4 + QK_K / 8),
    t(19, "IQ1_S", 256, 2 + QK_K / 8 + QK_K / 16),
    t(20, "IQ4_NL", 32, 2 + 16),
    t(21, "IQ3_S", 256, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4),
    t(22, "IQ2_S", 256, 2 + QK_K / 4 + QK_K / 16),
    t(23, "IQ4_XS", 256, 2 + 2 + QK_K / 2 + QK_K / 64),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", 256, QK_K / 8 + QK_K / 16 + QK_K / 32),
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", 256, 2 + 4 * 13),
    t(35, "TQ2_0", 256, 2 + 64),
    t(39, "MXFP4", 32, 1 + 16),
    t(40, "NVFP4", 64, 4 + 32),
    t(41, "Q1_0", 128, 2 + 16),
];

impl GgmlType {
    /// The type with GGUF id `id`, if it is a current GGML type.
    pub fn from_id(id: u32) -> Option<&'static GgmlType> {
        GGML_TYPES.iter().find(|t| t.id == id)
    }

    /// The registry format whose blocks are this type's, if tessera has one.
    pub fn format(&self) -> Option<Format> {
        Format::from_ggml(self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_rows_agree_with_gguf_py_sizes() {
        let mut mapped = 0;
        for t in GGML_TYPES {
            if let Some(f) = t.format() {
                let s = f.spec();
                assert_eq!(
                    (s.block_weights, s.block_bytes),
                    (t.block, t.type_size),
                    "{}",
                    t.name
                );
                mapped += 1;
            }
        }
        // F32, F16, BF16 and the 13 GGML block formats of issue 8.
        assert_eq!(mapped, 16);
        for f in Format::all() {
            if let Some(id) = f.spec().legacy.ggml {
                assert!(
                    GgmlType::from_id(u32::from(id)).is_some(),
                    "{f}: ggml id {id}"
                );
            }
        }
    }

    #[test]
    fn retired_ids_are_unknown() {
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 42, u32::MAX] {
            assert!(GgmlType::from_id(id).is_none(), "{id}");
        }
    }
}
