//! The engine's error type: every variant names the file, tensor or setting at fault and
//! the condition, so a CLI can print it as is.

use container_io::ContainerError;
use quant_core::QuantError;
use quant_core::capability::BackendError;

/// Why loading or running a model failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// config.json is missing, unreadable, or describes a graph the engine does not run.
    #[error("{file}: {msg}")]
    Config { file: String, msg: String },
    /// A tensor the graph needs is missing or has the wrong shape.
    #[error("{file}: tensor {tensor}: {msg}")]
    Tensor {
        file: String,
        tensor: String,
        msg: String,
    },
    /// The container could not be opened or a tensor could not be resolved (boxed: the
    /// container's errors carry every detail and are large).
    #[error(transparent)]
    Container(Box<ContainerError>),
    /// A kernel refused its inputs (a size mismatch the engine should have prevented).
    #[error("{tensor}: {source}")]
    Quant {
        tensor: String,
        #[source]
        source: QuantError,
    },
    /// The backend asked for cannot run here, or failed.
    #[error("backend {backend}: {source}")]
    Backend {
        backend: String,
        #[source]
        source: BackendError,
    },
    /// `--strict-gpu`: the load-time notice found tensors that keep layers off the GPU path.
    #[error("--strict-gpu: {}", lines.join("; "))]
    StrictGpu { lines: Vec<String> },
    /// A request the engine cannot serve (an out-of-vocabulary token id, an empty prompt).
    #[error("{0}")]
    Input(String),
    /// A file the engine writes (e.g. `--logits-out`).
    #[error("{file}: {msg}")]
    Io { file: String, msg: String },
}

impl From<ContainerError> for EngineError {
    fn from(e: ContainerError) -> Self {
        EngineError::Container(Box::new(e))
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
