//! Whole-tensor encode and decode: rotation, row-block streaming and rayon across rows.
//!
//! Encoding walks the tensor in row blocks (a multiple of the format's `row_block()`), so
//! a caller streaming a large tensor (container-io's pipelines) can feed [`encode_rows`]
//! one block at a time and keep memory proportional to the block.

use crate::codec::codec_for;
use crate::error::QuantError;
use crate::real::Real;
use crate::registry::{Format, Rotation};
use crate::rotation;
use crate::tensor::{EncodedTensor, QTensor};
use rayon::prelude::*;

/// Which encoder fits a format's scales. Either way the bytes mean the same thing to the one
/// decoder; only the choice of scale, zero and codes differs.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum EncoderEffort {
    /// Each group's scale and zero from its min and max (seed 001 § 3): both extremes are
    /// representable. Fast; the reference encoder.
    #[default]
    MinMax,
    /// A search over clipping and zero per group, keeping the lowest squared error as the
    /// decoder reconstructs it (docs/QUALITY.md). Implemented by mq4-g256-v2, mq4-k and the
    /// other 136-byte affine formats; every other format encodes as `MinMax`. Never worse
    /// than `MinMax` on any block: its candidate is always among those tried.
    ErrorAware,
}

/// Options of an encode.
#[derive(Copy, Clone, Debug)]
pub struct EncodeOptions {
    /// Seed of the FWHT signs for rotated formats; ignored by the others.
    pub rotation_seed: u64,
    /// Which encoder fits the scales (the bytes' meaning is the same either way).
    pub effort: EncoderEffort,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            rotation_seed: crate::registry::DEFAULT_ROTATION_SEED,
            effort: EncoderEffort::MinMax,
        }
    }
}

/// Rows a parallel task encodes or decodes at once: a multiple of the format's row block,
/// sized so a task touches a few hundred KiB.
pub fn task_rows(format: Format, cols: usize) -> usize {
    format.spec().stream_rows(cols, 262_144)
}

/// Encodes rows `[row0, row0 + n)` of an [rows, cols] tensor (`src` holds those rows,
/// logical domain) into the matching byte ranges `weights` and `scales`
/// (`FormatSpec::weight_range` / `scale_range`). The streaming primitive.
// The streaming primitive takes the shape, the block and both outputs explicitly so that
// callers slicing a memory map need no intermediate struct.
#[allow(clippy::too_many_arguments)]
pub fn encode_rows(
    format: Format,
    rows: usize,
    cols: usize,
    row0: usize,
    src: &[f32],
    weights: &mut [u8],
    scales: &mut [u8],
    opts: &EncodeOptions,
) -> Result<(), QuantError> {
    let spec = format.spec();
    spec.check_shape(rows, cols)?;
    let n = src.len() / cols;
    if n * cols != src.len() {
        return Err(QuantError::InputSize {
            format,
            rows,
            cols,
            expected: (n as u64 + 1) * cols as u64,
            got: src.len(),
        });
    }
    let wr = spec.weight_range(row0, n, cols)?;
    let sr = spec.scale_range(row0, n, rows, cols)?;
    let check = |what, expected: usize, got: usize| {
        if expected != got {
            Err(QuantError::BufferSize {
                format,
                what,
                rows,
                cols,
                expected: expected as u64,
                got,
            })
        } else {
            Ok(())
        }
    };
    check("weight", wr.len(), weights.len())?;
    check("scale", sr.len(), scales.len())?;
    if let Some(k) = src.iter().position(|v| !v.is_finite()) {
        return Err(QuantError::NonFiniteInput {
            format,
            row: row0 + k / cols,
            col: k % cols,
        });
    }
    let codec = codec_for(format);
    match spec.rotation {
        Rotation::None => codec.encode_rows_effort(format, cols, src, weights, scales, opts.effort),
        Rotation::Fwht256 => {
            let mut rotated = src.to_vec();
            rotation::forward_rows(&mut rotated, cols, opts.rotation_seed);
            codec.encode_rows_effort(format, cols, &rotated, weights, scales, opts.effort)
        }
    }
}

/// Encodes a whole row-major [rows, cols] f32 tensor, in parallel across row blocks.
pub fn encode(
    format: Format,
    rows: usize,
    cols: usize,
    src: &[f32],
    opts: &EncodeOptions,
) -> Result<EncodedTensor, QuantError> {
    let spec = format.spec();
    spec.check_shape(rows, cols)?;
    let expected = (rows as u64)
        .checked_mul(cols as u64)
        .ok_or(QuantError::SizeOverflow { format, rows, cols })?;
    if expected != src.len() as u64 {
        return Err(QuantError::InputSize {
            format,
            rows,
            cols,
            expected,
            got: src.len(),
        });
    }
    let wbytes = usize::try_from(spec.weight_bytes(rows, cols)?)
        .map_err(|_| QuantError::SizeOverflow { format, rows, cols })?;
    let sbytes = usize::try_from(spec.scale_bytes(rows, cols)?)
        .map_err(|_| QuantError::SizeOverflow { format, rows, cols })?;
    let mut weights = crate::memory::weight_buffer(wbytes);
    let mut scales = vec![0u8; sbytes];

    // Cut both buffers into disjoint per-task slices along the registry's own ranges.
    let step = task_rows(format, cols);
    let mut tasks = Vec::new();
    let (mut wrest, mut srest): (&mut [u8], &mut [u8]) = (&mut weights, &mut scales);
    let mut row0 = 0;
    while row0 < rows {
        let n = step.min(rows - row0);
        let wl = spec.weight_range(row0, n, cols)?.len();
        let sl = spec.scale_range(row0, n, rows, cols)?.len();
        let (w, wr) = std::mem::take(&mut wrest).split_at_mut(wl);
        let (s, sr) = std::mem::take(&mut srest).split_at_mut(sl);
        wrest = wr;
        srest = sr;
        tasks.push((row0, n, w, s));
        row0 += n;
    }
    tasks.into_par_iter().try_for_each(|(row0, n, w, s)| {
        encode_rows(
            format,
            rows,
            cols,
            row0,
            &src[row0 * cols..(row0 + n) * cols],
            w,
            s,
            opts,
        )
    })?;
    Ok(EncodedTensor {
        format,
        rows,
        cols,
        weights,
        scales,
        rotation_seed: opts.rotation_seed,
    })
}

/// Decodes rows `[row0, row0 + n)` into `out` ([n, cols]) in the logical (un-rotated)
/// domain.
pub fn decode_rows(t: &QTensor<'_>, row0: usize, out: &mut [f32]) -> Result<(), QuantError> {
    let n = out.len() / t.cols();
    if n * t.cols() != out.len() || row0 + n > t.rows() {
        return Err(QuantError::RowRange {
            format: t.format(),
            row0,
            n,
            rows: t.rows(),
        });
    }
    codec_for(t.format()).decode_rows_f32(t, row0, out);
    unrotate(t, out);
    Ok(())
}

/// Decodes the whole tensor to a row-major [rows, cols] f32 buffer (logical domain), in
/// parallel across rows.
pub fn decode(t: &QTensor<'_>) -> Result<Vec<f32>, QuantError> {
    let cols = t.cols();
    let mut out = vec![0f32; t.rows() * cols];
    let step = task_rows(t.format(), cols);
    out.par_chunks_mut(step * cols)
        .enumerate()
        .try_for_each(|(k, chunk)| decode_rows(t, k * step, chunk))?;
    Ok(out)
}

/// The oracle's decode: rows `[row0, row0 + n)` in f64, in the *stored* domain.
pub fn decode_rows_stored_f64(t: &QTensor<'_>, row0: usize, out: &mut [f64]) {
    codec_for(t.format()).decode_rows_f64(t, row0, out);
}

fn unrotate<T: Real>(t: &QTensor<'_>, data: &mut [T]) {
    match t.format().spec().rotation {
        Rotation::None => {}
        Rotation::Fwht256 => rotation::inverse_rows(data, t.cols(), t.rotation_seed()),
    }
}

/// Rotates activations ([s, cols], row-major) into the stored domain of `t`'s format.
pub fn rotate_activations<T: Real>(t: &QTensor<'_>, x: &mut [T]) {
    match t.format().spec().rotation {
        Rotation::None => {}
        Rotation::Fwht256 => rotation::forward_rows(x, t.cols(), t.rotation_seed()),
    }
}
