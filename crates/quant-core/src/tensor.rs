//! Quantized tensors: a borrowed view ([`QTensor`]) and an owned encoding ([`EncodedTensor`]).
//!
//! A view is only constructed after its buffers were checked against the registry's byte
//! counts, so codecs and kernels may index without re-validating.

use crate::error::QuantError;
use crate::memory::WeightBytes;
use crate::registry::{DEFAULT_ROTATION_SEED, Format};

/// A quantized [O, I] weight matrix in its stored layout, borrowed (e.g. from an mmap).
#[derive(Copy, Clone, Debug)]
pub struct QTensor<'a> {
    format: Format,
    rows: usize,
    cols: usize,
    weights: &'a [u8],
    scales: &'a [u8],
    rotation_seed: u64,
}

fn check_len(
    format: Format,
    what: &'static str,
    rows: usize,
    cols: usize,
    expected: u64,
    got: usize,
) -> Result<(), QuantError> {
    if expected != got as u64 {
        return Err(QuantError::BufferSize {
            format,
            what,
            rows,
            cols,
            expected,
            got,
        });
    }
    Ok(())
}

impl<'a> QTensor<'a> {
    /// Wraps stored bytes after checking their lengths against the registry.
    pub fn new(
        format: Format,
        rows: usize,
        cols: usize,
        weights: &'a [u8],
        scales: &'a [u8],
        rotation_seed: u64,
    ) -> Result<Self, QuantError> {
        let spec = format.spec();
        spec.check_shape(rows, cols)?;
        check_len(
            format,
            "weight",
            rows,
            cols,
            spec.weight_bytes(rows, cols)?,
            weights.len(),
        )?;
        check_len(
            format,
            "scale",
            rows,
            cols,
            spec.scale_bytes(rows, cols)?,
            scales.len(),
        )?;
        Ok(QTensor {
            format,
            rows,
            cols,
            weights,
            scales,
            rotation_seed,
        })
    }

    pub fn format(&self) -> Format {
        self.format
    }
    /// O, the number of output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// I, the number of weights a row.
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn weights(&self) -> &'a [u8] {
        self.weights
    }
    pub fn scales(&self) -> &'a [u8] {
        self.scales
    }
    /// Seed of the FWHT signs (meaningful for rotated formats only).
    pub fn rotation_seed(&self) -> u64 {
        self.rotation_seed
    }
    /// Stored bytes of one row.
    pub fn row_bytes(&self) -> usize {
        // Checked in `new`: the whole buffer fits in memory, so one row does.
        self.weights.len() / self.rows
    }
    /// The stored bytes of row `o`.
    pub fn row(&self, o: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.weights[o * rb..(o + 1) * rb]
    }
}

/// An owned quantized tensor, as an encoder produced it or a container handed it over.
#[derive(Debug, PartialEq)]
pub struct EncodedTensor {
    pub format: Format,
    pub rows: usize,
    pub cols: usize,
    /// On a cache line, in huge pages where offered ([`crate::memory::WeightBytes`]).
    pub weights: WeightBytes,
    pub scales: Vec<u8>,
    pub rotation_seed: u64,
}

/// A clone's weights go into a [`crate::memory::weight_copy`] buffer (a cache line, huge
/// pages where offered), as the encoder's output does.
impl Clone for EncodedTensor {
    fn clone(&self) -> Self {
        EncodedTensor {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            weights: crate::memory::weight_copy(&self.weights),
            scales: self.scales.clone(),
            rotation_seed: self.rotation_seed,
        }
    }
}

impl EncodedTensor {
    /// Adopts stored bytes as they are (passthrough, e.g. an FP8 checkpoint's own bytes):
    /// the lengths are checked, the bytes are never changed (moved onto a cache line if
    /// `weights` does not start on one: [`WeightBytes`]).
    pub fn from_parts(
        format: Format,
        rows: usize,
        cols: usize,
        weights: impl Into<WeightBytes>,
        scales: Vec<u8>,
        rotation_seed: Option<u64>,
    ) -> Result<Self, QuantError> {
        let weights = weights.into();
        let seed = rotation_seed.unwrap_or(DEFAULT_ROTATION_SEED);
        QTensor::new(format, rows, cols, &weights, &scales, seed)?;
        Ok(EncodedTensor {
            format,
            rows,
            cols,
            weights,
            scales,
            rotation_seed: seed,
        })
    }

    pub fn view(&self) -> QTensor<'_> {
        QTensor {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            weights: &self.weights,
            scales: &self.scales,
            rotation_seed: self.rotation_seed,
        }
    }
}
