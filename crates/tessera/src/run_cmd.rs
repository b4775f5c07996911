//! `tessera run`: greedy decoding with the engine (crates/engine).
//!
//! `tessera run [MODEL_DIR] [--backend auto|cpu|cuda|vulkan|wgpu] [--tokens N]
//! [--prompt-ids 1,2,3] [--logits-out FILE.npy] [--strict-gpu] [--config FILE]`
//!
//! Without MODEL_DIR it runs the tiny DeepSeek-V3 fixture (fixtures/parity-deepseek-v3),
//! compiled into the binary, so the command works on a fresh clone with no GPU. It prints
//! the load-time notice (stderr), the token ids, the tokens per second and the end-of-run
//! fallback summary; `--logits-out` writes every step's logits as an f32 .npy [steps, vocab].

use super::{Fail, R, emit};
use engine::{BackendChoice, LoadOptions, Model, ModelSource};
use std::path::{Path, PathBuf};

/// The embedded default model.
const DEFAULT_NAME: &str = "fixtures/parity-deepseek-v3";
const DEFAULT_CONFIG: &str = include_str!("../../../fixtures/parity-deepseek-v3/config.json");
const DEFAULT_WEIGHTS: &[u8] =
    include_bytes!("../../../fixtures/parity-deepseek-v3/model.safetensors");
const DEFAULT_REFERENCE: &str = include_str!("../../../fixtures/parity-deepseek-v3/reference.json");

#[derive(clap::Args)]
pub struct RunArgs {
    /// Model folder (config.json + model.safetensors or a sharded index) or a container file
    /// with config.json next to it. Default: the embedded tiny DeepSeek-V3 fixture.
    model: Option<PathBuf>,
    /// The model's config.json, when it is not next to the container.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where the GEMVs run: auto takes the first GPU tier that answers (cuda, vulkan, wgpu;
    /// vulkan and wgpu need tessera's features of those names), else the CPU.
    #[arg(long, default_value = "auto", value_parser = ["auto", "cpu", "cuda", "vulkan", "wgpu"])]
    backend: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 16)]
    tokens: usize,
    /// Comma-separated prompt token ids. Default: the model folder's reference.json prompt
    /// (the embedded model's for the default), else 1.
    #[arg(long, value_name = "1,2,3")]
    prompt_ids: Option<String>,
    /// Write every step's logits as a little-endian f32 .npy of shape [steps, vocab].
    #[arg(long, value_name = "FILE.npy")]
    logits_out: Option<PathBuf>,
    /// Fail instead of warning when a tensor's format keeps layers off the GPU path, or when
    /// the model would run on the CPU backend.
    #[arg(long)]
    strict_gpu: bool,
}

fn parse_ids(text: &str) -> R<Vec<u32>> {
    let ids = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .map_err(|_| Fail(format!("--prompt-ids: {s:?} is not a token id")))
        })
        .collect::<R<Vec<u32>>>()?;
    if ids.is_empty() {
        return Err(Fail("--prompt-ids: empty prompt".to_string()));
    }
    Ok(ids)
}

/// The prompt of a reference.json (fixtures/gen_models.py's layout), if it has one.
fn reference_prompt(text: &str) -> Option<Vec<u32>> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("prompt_ids")?
        .as_array()?
        .iter()
        .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect()
}

fn folder_of(p: &Path) -> PathBuf {
    if p.is_dir() {
        p.to_path_buf()
    } else {
        p.parent().unwrap_or(Path::new(".")).to_path_buf()
    }
}

pub fn run(a: RunArgs) -> R {
    let choice = BackendChoice::parse(&a.backend)
        .ok_or_else(|| Fail(format!("--backend: unknown backend {:?}", a.backend)))?;
    if a.tokens == 0 {
        return Err(Fail("--tokens: must be at least 1".to_string()));
    }
    let (source, shown, default_prompt) = match (&a.model, &a.config) {
        (None, Some(_)) => {
            return Err(Fail(
                "--config needs MODEL_DIR (the embedded model has its own)".to_string(),
            ));
        }
        (None, None) => (
            ModelSource::Bytes {
                name: DEFAULT_NAME.to_string(),
                config_json: DEFAULT_CONFIG.to_string(),
                safetensors: DEFAULT_WEIGHTS.to_vec(),
            },
            format!("{DEFAULT_NAME} (embedded)"),
            reference_prompt(DEFAULT_REFERENCE),
        ),
        (Some(m), cfg) => {
            let reference = std::fs::read_to_string(folder_of(m).join("reference.json"))
                .ok()
                .and_then(|t| reference_prompt(&t));
            let source = match cfg {
                Some(c) => ModelSource::WithConfig {
                    container: m.clone(),
                    config: c.clone(),
                },
                None => ModelSource::Path(m.clone()),
            };
            (source, m.display().to_string(), reference)
        }
    };
    let prompt = match &a.prompt_ids {
        Some(t) => parse_ids(t)?,
        None => default_prompt.unwrap_or_else(|| vec![1]),
    };
    let opts = LoadOptions {
        backend: choice,
        strict_gpu: a.strict_gpu,
    };
    let model = Model::load(source, &opts)?;
    for line in &model.notice {
        eprintln!("{line}");
    }
    let c = &model.config;
    emit(format_args!(
        "model: {shown}: {}, {} layers, hidden {}, vocab {}",
        c.arch.name(),
        c.num_hidden_layers,
        c.hidden_size,
        c.vocab_size
    ))?;
    match &model.backend_note {
        Some(note) => emit(format_args!("backend: {} ({note})", model.backend_name()))?,
        None => emit(format_args!("backend: {}", model.backend_name()))?,
    }
    // The logits are read back from the device only when they are written out.
    let g = model.generate_with(&prompt, a.tokens, a.logits_out.is_some())?;
    let join = |v: &[u32]| {
        v.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    emit(format_args!("prompt ids: {}", join(&prompt)))?;
    emit(format_args!("token ids: {}", join(&g.tokens)))?;
    let decoded = g.tokens.len() - 1;
    let rate = if g.decode_secs > 0.0 && decoded > 0 {
        format!("{:.1} tokens/s", decoded as f64 / g.decode_secs)
    } else {
        "n/a tokens/s (one token: no decode step)".to_string()
    };
    emit(format_args!(
        "prefill: {} tokens in {:.2} ms; decode: {decoded} tokens in {:.2} ms, {rate}",
        prompt.len(),
        g.prefill_secs * 1e3,
        g.decode_secs * 1e3
    ))?;
    if let Some(path) = &a.logits_out {
        let vocab = model.config.vocab_size;
        let flat: Vec<f32> = g.logits.concat();
        engine::npy::write(path, &[g.logits.len(), vocab], &flat)?;
        emit(format_args!(
            "logits: {} [{}, {vocab}] f32",
            path.display(),
            g.logits.len()
        ))?;
    }
    for line in model.summary() {
        emit(format_args!("{line}"))?;
    }
    Ok(())
}
