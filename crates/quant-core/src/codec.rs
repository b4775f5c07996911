//! The codec trait every format implements, and the dispatch from [`Format`] to its codec.
//!
//! A codec works in the *stored* domain: for rotated formats the caller (see `crate::api`)
//! has already rotated the rows it encodes, and un-rotates what it decodes. Decode is written
//! once per format, generic over [`Real`](crate::real::Real); `decode_rows_f32` is the fast
//! path and `decode_rows_f64` the test oracle, both instantiations of that one function.

use crate::api::EncoderEffort;
use crate::codecs;
use crate::error::QuantError;
use crate::registry::Format;
use crate::tensor::QTensor;

pub trait FormatCodec: Send + Sync {
    /// Encodes `src` (row-major [n, cols] f32, stored domain) into `weights` and `scales`,
    /// which are exactly the byte ranges the registry gives for those rows
    /// (`FormatSpec::weight_range` / `scale_range`). Deterministic.
    fn encode_rows(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
    ) -> Result<(), QuantError>;

    /// [`Self::encode_rows`] with the encoder `effort` selects. Formats without an
    /// error-aware encoder have one encoder for every effort.
    fn encode_rows_effort(
        &self,
        format: Format,
        cols: usize,
        src: &[f32],
        weights: &mut [u8],
        scales: &mut [u8],
        effort: EncoderEffort,
    ) -> Result<(), QuantError> {
        let _ = effort;
        self.encode_rows(format, cols, src, weights, scales)
    }

    /// Decodes rows `[row0, row0 + n)` of `t` into `out` ([n, cols], stored domain).
    fn decode_rows_f32(&self, t: &QTensor<'_>, row0: usize, out: &mut [f32]);

    /// The same decode computed in f64: the oracle every kernel is checked against.
    fn decode_rows_f64(&self, t: &QTensor<'_>, row0: usize, out: &mut [f64]);
}

/// The codec of a format. Exhaustive on purpose: a new format must be given a codec here.
pub fn codec_for(format: Format) -> &'static dyn FormatCodec {
    match format {
        Format::F32 => &codecs::float::F32,
        Format::F16 => &codecs::float::F16,
        Format::Bf16 => &codecs::float::BF16,
        Format::Int8Row => &codecs::int_row::INT8_ROW,
        Format::Int4Row => &codecs::int_row::INT4_ROW,
        Format::Int2Row => &codecs::int_row::INT2_ROW,
        Format::Int4G16
        | Format::Int4G32
        | Format::Int4G48
        | Format::Int4G64
        | Format::Int4G96
        | Format::Int4G128
        | Format::Int4G192
        | Format::Int4G256 => &codecs::int_group::Int4GroupCodec,
        Format::Int3G64 => &codecs::int_group::Int3GroupCodec,
        Format::E8Lattice => &codecs::e8::E8Codec,
        Format::Fp8E4m3B128 | Format::Fp8E4m3B128Ue8m0 => &codecs::fp8::Fp8Codec,
        Format::Hfq4G256 | Format::Mq4G256 => &codecs::affine256::Hfq4Codec,
        Format::Mq4G256V2 => &codecs::affine256::Mq4V2Codec,
        Format::Mq4cG256 => &codecs::affine256::Mq4cCodec,
        Format::Mq4K => &codecs::kquant::Mq4KCodec,
        Format::Mxfp4 => &codecs::mxfp4::Mxfp4Codec,
        Format::Q8_0 => &codecs::ggml_legacy::Q8_0_CODEC,
        Format::Q4_0 => &codecs::ggml_legacy::Q4_0_CODEC,
        Format::Q4_1 => &codecs::ggml_legacy::Q4_1_CODEC,
        Format::Q5_0 => &codecs::ggml_legacy::Q5_0_CODEC,
        Format::Q5_1 => &codecs::ggml_legacy::Q5_1_CODEC,
        Format::Q2K => &codecs::ggml_kquants::Q2_K_CODEC,
        Format::Q3K => &codecs::ggml_kquants::Q3_K_CODEC,
        Format::Q4K => &codecs::ggml_kquants::Q4_K_CODEC,
        Format::Q5K => &codecs::ggml_kquants::Q5_K_CODEC,
        Format::Q6K => &codecs::ggml_kquants::Q6_K_CODEC,
        Format::Iq4Nl => &codecs::ggml_iq4::IQ4_NL_CODEC,
        Format::Iq4Xs => &codecs::ggml_iq4::IQ4_XS_CODEC,
        Format::GgufMxfp4 => &codecs::ggml_mxfp4::GGUF_MXFP4_CODEC,
    }
}
