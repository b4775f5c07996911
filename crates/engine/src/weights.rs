//! Weights through container-io: a tessera container (quantized, stamped or legacy) or a
//! plain Hugging Face safetensors checkpoint of f32/f16/bf16 tensors, single file or sharded.
//!
//! Tensors stay in the container's map; the engine holds their resolutions and makes
//! borrowed [`QTensor`] views on use. Small tensors (norm weights, biases, the router's
//! correction bias) and the MLA `kv_b_proj` (absorbed on the host) are decoded to f32 once.

use crate::error::{EngineError, Result};
use container_io::{Container, Item, Resolved, ShapeHints};
use quant_core::QTensor;

/// An opened container and the shape hints its legacy (unstamped) tensors need.
pub struct Weights {
    pub container: Container,
    hints: ShapeHints,
}

impl Weights {
    /// Wraps an opened container; `config` (config.json's JSON) supplies logical shapes for
    /// unstamped legacy tensors, as legacy engines did. Stamped and dense tensors need none.
    pub fn new(container: Container, config: Option<&serde_json::Value>) -> Weights {
        let hints = config
            .and_then(|cfg| {
                container_io::census::hints_from_config(
                    cfg,
                    container.names().iter().map(String::as_str),
                )
                .ok()
            })
            .unwrap_or_default();
        Weights { container, hints }
    }

    /// The container's path, for messages.
    pub fn file(&self) -> &str {
        &self.container.path
    }

    fn err(&self, tensor: &str, msg: String) -> EngineError {
        EngineError::Tensor {
            file: self.file().to_string(),
            tensor: tensor.to_string(),
            msg,
        }
    }

    /// Whether the container holds `name`.
    pub fn has(&self, name: &str) -> bool {
        self.container.id(name).is_some()
    }

    /// Resolves `name` to a weight tensor (format, logical [O, I]).
    pub fn resolve(&self, name: &str) -> Result<Resolved> {
        if !self.has(name) {
            return Err(self.err(name, "missing from the container".to_string()));
        }
        match self.container.resolve(name, &self.hints)? {
            Item::Tensor(r) => Ok(r),
            Item::Raw(raw) => Err(self.err(
                name,
                format!(
                    "{} tensor of shape {:?} is not a weight format the engine reads (a Hugging \
                     Face FP8 checkpoint needs `tessera repack-fp8` first)",
                    raw.dtype, raw.dims
                ),
            )),
        }
    }

    /// Resolves `name` and checks its logical shape is [rows, cols].
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Resolved> {
        let r = self.resolve(name)?;
        if (r.rows, r.cols) != (rows, cols) {
            return Err(self.err(
                name,
                format!(
                    "logical shape [{}, {}] ({}), the config implies [{rows}, {cols}]",
                    r.rows, r.cols, r.format
                ),
            ));
        }
        Ok(r)
    }

    /// A borrowed view of a resolved tensor.
    pub fn qtensor(&self, r: &Resolved) -> Result<QTensor<'_>> {
        Ok(self.container.qtensor(r)?)
    }

    /// Decodes a whole resolved tensor to f32 (logical domain).
    pub fn decode(&self, r: &Resolved) -> Result<Vec<f32>> {
        let t = self.qtensor(r)?;
        quant_core::decode(&t).map_err(|source| EngineError::Quant {
            tensor: r.name.clone(),
            source,
        })
    }

    /// A 1-D tensor of `len` values (norm weights, biases), decoded to f32.
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let r = self.resolve(name)?;
        if r.rows.checked_mul(r.cols) != Some(len) {
            return Err(self.err(
                name,
                format!(
                    "{} values ([{}, {}]), the config implies {len}",
                    r.rows.saturating_mul(r.cols),
                    r.rows,
                    r.cols
                ),
            ));
        }
        self.decode(&r)
    }

    /// A decoded [rows, cols] matrix.
    pub fn matrix_f32(&self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
        let r = self.matrix(name, rows, cols)?;
        self.decode(&r)
    }
}
