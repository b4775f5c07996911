//! Row concatenation of projections that read the same input (q/k/v, gate/up): their
//! stored encodings laid end to end as one [O_a + O_b + ..., I] tensor, so the resident
//! decode path runs one GEMV per group instead of one per projection.
//!
//! Concatenating encodings is only sound when it equals encoding the stacked matrix: every
//! stored byte must belong to one row (or to a band of rows the cut does not split), and no
//! byte may depend on the other rows. That is read from the registry's row
//! ([`quant_core::FormatSpec`]), never from a list of names: no scales, inline block
//! scales, per-row and per-group scales are row-local; tile scales are row-local per band
//! of `rows` rows, so only cuts on band boundaries qualify; a tensor-wide scale
//! (`PerTensor`, e.g. e8-lattice) depends on every row and never qualifies. Rotated formats
//! rotate along I with the tensor's seed, so parts qualify when they share the seed.
//! tests/fuse.rs checks, for every format, that an admitted concatenation is byte for byte
//! the encoding of the stacked matrix, and that the refused ones are refused.

use crate::error::{EngineError, Result};
use quant_core::{EncodedTensor, Format, QTensor, Rotation, ScaleLayout};

/// Why parts of `format` with these row counts cannot be concatenated (`None`: they can).
/// Decided from the registry row alone.
pub fn refusal(format: Format, part_rows: &[usize]) -> Option<String> {
    let spec = format.spec();
    match spec.scales {
        ScaleLayout::None
        | ScaleLayout::Inline
        | ScaleLayout::PerRow(_)
        | ScaleLayout::PerGroup { .. } => None,
        ScaleLayout::PerTile { rows, .. } => {
            let band = rows as usize;
            let cut = part_rows.split_last().map_or(&[][..], |(_, init)| init);
            // A cut inside a band would make the stacked tensor's band share one scale
            // across two parts, which the parts' own encodings cannot hold.
            cut.iter()
                .find(|r| band == 0 || !r.is_multiple_of(band))
                .map(|r| {
                    format!(
                        "{format} keeps one scale per {band}-row tile band; a part of {r} rows \
                         would cut a band"
                    )
                })
        }
        ScaleLayout::PerTensor(_) => Some(format!(
            "{format} has one scale for the whole tensor, which depends on every row"
        )),
    }
}

/// The parts' encodings stacked along O: one tensor of rows sum(O_k), same format, I and
/// rotation seed. Refuses (typed error, no panic) differing formats, I or seeds, and every
/// format [`refusal`] refuses.
pub fn concat_rows(parts: &[QTensor<'_>]) -> Result<EncodedTensor> {
    let first = parts
        .first()
        .ok_or_else(|| EngineError::Input("row concatenation of no tensors".to_string()))?;
    let (format, cols, seed) = (first.format(), first.cols(), first.rotation_seed());
    let spec = format.spec();
    for p in parts {
        if p.format() != format || p.cols() != cols {
            return Err(EngineError::Input(format!(
                "row concatenation needs one format and one I: {format} [.., {cols}] and {} \
                 [.., {}]",
                p.format(),
                p.cols()
            )));
        }
        if spec.rotation != Rotation::None && p.rotation_seed() != seed {
            return Err(EngineError::Input(format!(
                "row concatenation of {format} needs one rotation seed: {seed} and {}",
                p.rotation_seed()
            )));
        }
    }
    let part_rows: Vec<usize> = parts.iter().map(QTensor::rows).collect();
    if let Some(why) = refusal(format, &part_rows) {
        return Err(EngineError::Input(format!(
            "row concatenation refused: {why}"
        )));
    }
    let rows = part_rows
        .iter()
        .try_fold(0usize, |a, &r| a.checked_add(r))
        .ok_or_else(|| EngineError::Input("row concatenation: rows overflow".to_string()))?;
    let quant = |source| EngineError::Quant {
        tensor: format!("{format} row concatenation"),
        source,
    };
    let size = |v: u64| {
        usize::try_from(v)
            .map_err(|_| EngineError::Input(format!("row concatenation: {v} bytes overflow")))
    };
    let mut weights = vec![0u8; size(spec.weight_bytes(rows, cols).map_err(quant)?)?];
    let mut scales = vec![0u8; size(spec.scale_bytes(rows, cols).map_err(quant)?)?];
    let mut row0 = 0usize;
    for p in parts {
        let n = p.rows();
        let wr = spec.weight_range(row0, n, cols).map_err(quant)?;
        let sr = spec.scale_range(row0, n, rows, cols).map_err(quant)?;
        // The registry's ranges of the stacked tensor must be exactly the part's own buffers;
        // anything else means the layout is not row-local after all.
        if wr.len() != p.weights().len() || sr.len() != p.scales().len() {
            return Err(EngineError::Input(format!(
                "row concatenation of {format}: rows {row0}..{} take {} weight and {} scale \
                 bytes in the stacked tensor, the part holds {} and {}",
                row0 + n,
                wr.len(),
                sr.len(),
                p.weights().len(),
                p.scales().len()
            )));
        }
        weights[wr].copy_from_slice(p.weights());
        scales[sr].copy_from_slice(p.scales());
        row0 += n;
    }
    EncodedTensor::from_parts(format, rows, cols, weights, scales, Some(seed)).map_err(quant)
}
