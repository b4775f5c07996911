//! container-io: stamped safetensors containers, the legacy resolver and the pipelines.
//!
//! Being written (issue 3).
