//! engine: model graphs and fused decode for tessera.
//!
//! It will hold the DeepSeek-V3/GLM-style MLA + MoE graph and the Llama/Qwen dense GQA graph,
//! backend selection, the per-layer fused-path gate (one predicate, read by the gates and the
//! load-time notice) and greedy generation with a KV cache. Nothing is implemented yet
//! (issue 6); this crate intentionally exports nothing until it is.
