//! A loaded model: config, weights, backend, graph, gates and notice, and the forward pass
//! and greedy generation over them.
//!
//! Loading resolves every tensor the graph needs, asks the gate ([`crate::gate`]) for each
//! layer's path, builds the notice ([`crate::notice`]) from the same predicate, and uploads
//! to the backend exactly the tensors its capability table covers. At run time every GEMV
//! goes through [`Exec::linear`]: on the backend where the tensor is resident, otherwise on
//! the CPU with the fallback counted in [`Stats`].

use crate::backend::{Backend, BackendChoice, Slot, select};
use crate::config::{Arch, ModelConfig};
use crate::deepseek::DeepseekGraph;
use crate::error::{EngineError, Result};
use crate::gate::{Kind, LayerFormats, LayerPath, covers, layer_path_with};
use crate::kv_cache::KvCache;
use crate::llama::LlamaGraph;
use crate::notice::notice_lines;
use crate::ops;
use crate::stats::Stats;
use crate::weights::Weights;
use container_io::{Container, Resolved};
use quant_core::capability::{BackendError, Op, lookup};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A weight the graph multiplies by: its resolution, where it lives, and its bias.
#[derive(Clone, Debug)]
pub struct Linear {
    /// The gate kind (`None` for the LM head, which belongs to no layer).
    pub kind: Option<Kind>,
    pub r: Resolved,
    /// Where the backend keeps it; `None` when its table misses the format (CPU fallback).
    pub slot: Option<Slot>,
    pub bias: Option<Vec<f32>>,
}

impl Linear {
    pub fn new(kind: Option<Kind>, r: Resolved) -> Linear {
        Linear {
            kind,
            r,
            slot: None,
            bias: None,
        }
    }

    /// Output features (O).
    pub fn rows(&self) -> usize {
        self.r.rows
    }

    fn op_name(&self) -> &'static str {
        self.kind.map_or("lm_head", Kind::name)
    }
}

/// What a forward pass runs against.
pub struct Exec<'a> {
    pub weights: &'a Weights,
    pub backend: &'a dyn Backend,
    pub stats: &'a RefCell<Stats>,
}

impl Exec<'_> {
    /// y[S, O] = x[S, I] · Wᵀ (+ bias): on the backend where `lin` is resident, else on the
    /// CPU, counted.
    pub fn linear(&self, lin: &Linear, x: &[f32], s: usize) -> Result<Vec<f32>> {
        let t = self.weights.qtensor(&lin.r)?;
        let mut y = vec![0f32; s * t.rows()];
        let cpu = |y: &mut [f32]| {
            quant_core::gemm(&t, x, s, y).map_err(|source| EngineError::Quant {
                tensor: lin.r.name.clone(),
                source,
            })
        };
        if self.backend.is_cpu() {
            self.backend
                .gemv(Slot(0), &t, x, s, &mut y)
                .map_err(|e| self.backend_err(e))?;
            self.stats.borrow_mut().backend_gemvs += 1;
        } else if let Some(slot) = lin.slot {
            match self.backend_chunks(slot, &t, x, s, &mut y) {
                Ok(()) => self.stats.borrow_mut().backend_gemvs += 1,
                Err(BackendError::NotImplemented { s: bad, .. }) => {
                    self.stats.borrow_mut().fallback(
                        lin.op_name(),
                        &format!("S={bad} outside {}'s table", self.backend.name()),
                    );
                    cpu(&mut y)?;
                }
                Err(e) => return Err(self.backend_err(e)),
            }
        } else {
            self.stats.borrow_mut().fallback(
                lin.op_name(),
                &format!("{} not in {}'s table", t.format(), self.backend.name()),
            );
            cpu(&mut y)?;
        }
        if let Some(b) = &lin.bias {
            for row in y.chunks_exact_mut(b.len()) {
                for (v, bb) in row.iter_mut().zip(b) {
                    *v += bb;
                }
            }
        }
        Ok(y)
    }

    /// Splits S into the batches the capability row admits.
    fn backend_chunks(
        &self,
        slot: Slot,
        t: &quant_core::QTensor<'_>,
        x: &[f32],
        s: usize,
        y: &mut [f32],
    ) -> std::result::Result<(), BackendError> {
        let max = lookup(self.backend.capabilities(), Op::Gemv, t.format(), 1)
            .map_or(1, |c| c.constraint.s_max.max(1));
        let (i, o) = (t.cols(), t.rows());
        let mut k = 0;
        while k < s {
            let n = max.min(s - k);
            self.backend.gemv(
                slot,
                t,
                &x[k * i..(k + n) * i],
                n,
                &mut y[k * o..(k + n) * o],
            )?;
            k += n;
        }
        Ok(())
    }

    fn backend_err(&self, source: BackendError) -> EngineError {
        EngineError::Backend {
            backend: self.backend.name().to_string(),
            source,
        }
    }
}

/// The graph of a model.
pub enum Graph {
    Llama(LlamaGraph),
    Deepseek(DeepseekGraph),
}

impl Graph {
    fn linears_mut(&mut self) -> Vec<&mut Linear> {
        match self {
            Graph::Llama(g) => g.linears_mut(),
            Graph::Deepseek(g) => g.linears_mut(),
        }
    }

    fn layer_formats(&self) -> Vec<LayerFormats> {
        match self {
            Graph::Llama(g) => g.layer_formats(),
            Graph::Deepseek(g) => g.layer_formats(),
        }
    }

    fn new_cache(&self) -> KvCache {
        match self {
            Graph::Llama(g) => g.new_cache(),
            Graph::Deepseek(g) => g.new_cache(),
        }
    }

    fn layer(
        &self,
        ex: &Exec<'_>,
        l: usize,
        x: &mut [f32],
        cache: &mut KvCache,
        pos0: usize,
        s: usize,
    ) -> Result<()> {
        match self {
            Graph::Llama(g) => g.layer(ex, l, x, &mut cache.layers[l], pos0, s),
            Graph::Deepseek(g) => g.layer(ex, l, x, &mut cache.layers[l], pos0, s),
        }
    }
}

/// Where a model comes from.
pub enum ModelSource {
    /// A folder with config.json and model.safetensors (or a sharded index), or a container
    /// file with config.json next to it.
    Path(PathBuf),
    /// A container file or folder and an explicit config.json.
    WithConfig { container: PathBuf, config: PathBuf },
    /// Both in memory (the CLI's embedded default model).
    Bytes {
        name: String,
        config_json: String,
        safetensors: Vec<u8>,
    },
}

/// How to load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub backend: BackendChoice,
    /// Refuse to load when the notice has lines, or when no GPU backend runs the model.
    pub strict_gpu: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            backend: BackendChoice::Cpu,
            strict_gpu: false,
        }
    }
}

/// The result of [`Model::generate`].
#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// The logits each token was chosen from: [tokens.len(), vocab].
    pub logits: Vec<Vec<f32>>,
    pub prefill_secs: f64,
    /// Time of the forward passes after the first token (tokens.len() - 1 of them).
    pub decode_secs: f64,
}

/// A loaded model, ready to run.
pub struct Model {
    pub config: ModelConfig,
    weights: Weights,
    backend: Box<dyn Backend>,
    graph: Graph,
    embed: Resolved,
    final_norm: Vec<f32>,
    lm_head: Linear,
    /// Per layer: the weight tensors' kinds and formats (what the gate reads).
    pub layer_formats: Vec<LayerFormats>,
    /// Per layer: the path the gate chose.
    pub layer_paths: Vec<LayerPath>,
    /// The load-time notice (already checked against `strict_gpu`).
    pub notice: Vec<String>,
    /// Why `auto` did not take a GPU, when it did not.
    pub backend_note: Option<String>,
    /// Why the backend's fused path is not used for this model, when it has one and the
    /// model does not take it.
    pub fused_note: Option<String>,
    stats: RefCell<Stats>,
    /// The device-resident decode path, when every layer and the LM head take it.
    #[cfg(feature = "cuda")]
    resident: Option<crate::resident::Resident>,
}

fn resolve_paths(p: &Path) -> (PathBuf, PathBuf) {
    if p.is_dir() {
        (p.to_path_buf(), p.join("config.json"))
    } else {
        let dir = p.parent().unwrap_or(Path::new("."));
        (p.to_path_buf(), dir.join("config.json"))
    }
}

impl Model {
    /// Loads a model and opens its backend.
    pub fn load(source: ModelSource, opts: &LoadOptions) -> Result<Model> {
        let (backend, note) = select(opts.backend).map_err(|source| EngineError::Backend {
            backend: opts.backend.name().to_string(),
            source,
        })?;
        Model::load_with_backend(source, backend, note, opts)
    }

    /// Loads a model onto a given backend (tests use this to bring their own tables).
    pub fn load_with_backend(
        source: ModelSource,
        mut backend: Box<dyn Backend>,
        backend_note: Option<String>,
        opts: &LoadOptions,
    ) -> Result<Model> {
        let (container, cfg_name, cfg_text) = match source {
            ModelSource::Path(p) => {
                if !p.exists() {
                    return Err(EngineError::Config {
                        file: p.display().to_string(),
                        msg: "no such model folder or container file".to_string(),
                    });
                }
                let (c, cfg) = resolve_paths(&p);
                let text = read_config(&cfg)?;
                (Container::open(&c)?, cfg.display().to_string(), text)
            }
            ModelSource::WithConfig { container, config } => {
                let text = read_config(&config)?;
                (
                    Container::open(&container)?,
                    config.display().to_string(),
                    text,
                )
            }
            ModelSource::Bytes {
                name,
                config_json,
                safetensors,
            } => (
                Container::from_bytes(&name, safetensors)?,
                format!("{name} (config.json)"),
                config_json,
            ),
        };
        let config = ModelConfig::from_json(&cfg_name, &cfg_text)?;
        let json: Option<serde_json::Value> = serde_json::from_str(&cfg_text).ok();
        let weights = Weights::new(container, json.as_ref());

        let h = config.hidden_size;
        let v = config.vocab_size;
        let embed = weights.matrix("model.embed_tokens.weight", v, h)?;
        let final_norm = weights.vector("model.norm.weight", h)?;
        let mut lm_head = if weights.has("lm_head.weight") {
            Linear::new(None, weights.matrix("lm_head.weight", v, h)?)
        } else if config.tie_word_embeddings {
            Linear::new(None, embed.clone())
        } else {
            return Err(EngineError::Tensor {
                file: weights.file().to_string(),
                tensor: "lm_head.weight".to_string(),
                msg: "missing, and tie_word_embeddings is false".to_string(),
            });
        };
        let mut graph = match config.arch {
            Arch::Llama | Arch::Qwen3 => Graph::Llama(LlamaGraph::load(&config, &weights)?),
            Arch::DeepseekV3 => Graph::Deepseek(DeepseekGraph::load(&config, &weights)?),
        };

        let table = backend.capabilities();
        let layer_formats = graph.layer_formats();
        // The fused path exists for the Llama / Qwen3 graph (crate::resident); the gate asks
        // the same predicate of its table as of the op-by-op one.
        let fused_table = backend.fused_capabilities();
        let graph_fused = matches!(graph, Graph::Llama(_)) && !fused_table.is_empty();
        let mut layer_paths: Vec<LayerPath> = layer_formats
            .iter()
            .map(|l| {
                layer_path_with(
                    l,
                    table,
                    backend.is_cpu(),
                    graph_fused.then_some(fused_table),
                )
            })
            .collect();
        let mut fused_note = None;
        if backend.fused_layers() && !graph_fused {
            fused_note = Some(format!(
                "{}'s fused path covers Llama / Qwen3 graphs, not {}",
                backend.name(),
                config.arch.name()
            ));
        }
        // The resident path runs whole tokens: every layer and the LM head, or none.
        let fused_layers = layer_paths
            .iter()
            .filter(|p| **p == LayerPath::Fused)
            .count();
        if fused_layers > 0 {
            let head_ok = covers(fused_table, lm_head.r.format) && lm_head.bias.is_none();
            if fused_layers < layer_paths.len() || !head_ok {
                fused_note = Some(format!(
                    "the fused path needs every layer and the LM head on it: {fused_layers} of {} \
                     layers qualify, LM head {} {}",
                    layer_paths.len(),
                    lm_head.r.format,
                    if head_ok { "covered" } else { "not covered" }
                ));
                for p in &mut layer_paths {
                    if *p == LayerPath::Fused {
                        *p = LayerPath::OpByOp;
                    }
                }
            }
        }
        let notice = if backend.is_cpu() {
            Vec::new()
        } else {
            let mut lines = notice_lines(backend.name(), &layer_formats, table);
            if graph_fused {
                lines.extend(crate::notice::fused_notice_lines(
                    backend.name(),
                    &layer_formats,
                    fused_table,
                    table,
                ));
            }
            if lines.len() > crate::notice::MAX_LINES {
                let rest = lines.split_off(crate::notice::MAX_LINES - 1);
                lines.push(format!(
                    "[{}] {} more notice lines (fused-path kinds) not shown",
                    backend.name(),
                    rest.len()
                ));
            }
            lines
        };
        if opts.strict_gpu {
            if backend.is_cpu() {
                let mut lines = vec![format!(
                    "the model would run on the CPU backend ({})",
                    backend_note.as_deref().unwrap_or("asked for")
                )];
                lines.extend(notice.iter().cloned());
                return Err(EngineError::StrictGpu { lines });
            }
            if !notice.is_empty() {
                return Err(EngineError::StrictGpu {
                    lines: notice.clone(),
                });
            }
        }

        #[cfg(feature = "cuda")]
        let all_fused =
            !layer_paths.is_empty() && layer_paths.iter().all(|p| *p == LayerPath::Fused);
        // The resident path's fused q/k/v and gate/up tensors (crate::fuse), uploaded
        // before the backend lends its tensors out below. The resident path reads only
        // those, so the separate tensors they concatenate are not uploaded too (the
        // op-by-op `forward` of such a model runs them on the CPU, counted as fallbacks).
        #[cfg(feature = "cuda")]
        let fused_slots = match &graph {
            Graph::Llama(g) if all_fused && backend.cuda().is_some() => {
                crate::resident::fuse_layers(g, &weights, backend.as_mut())?
            }
            Graph::Llama(_) | Graph::Deepseek(_) => Vec::new(),
        };
        #[cfg(feature = "cuda")]
        let not_uploaded: std::collections::HashSet<String> = match &graph {
            Graph::Llama(g) => crate::resident::fused_parts(g, &fused_slots),
            Graph::Deepseek(_) => Default::default(),
        };
        #[cfg(not(feature = "cuda"))]
        let not_uploaded: std::collections::HashSet<String> = Default::default();

        // Make resident exactly what the table covers (and the resident path reads); the
        // rest runs on the CPU, counted.
        if !backend.is_cpu() {
            let mut all = graph.linears_mut();
            all.push(&mut lm_head);
            for lin in all {
                if covers(table, lin.r.format) && !not_uploaded.contains(&lin.r.name) {
                    let t = weights.qtensor(&lin.r)?;
                    let slot = backend.upload(&t).map_err(|source| EngineError::Backend {
                        backend: backend.name().to_string(),
                        source,
                    })?;
                    lin.slot = Some(slot);
                }
            }
        }

        #[cfg(feature = "cuda")]
        let resident = match (&graph, backend.cuda()) {
            (Graph::Llama(g), Some((dev, tensors))) if all_fused => {
                Some(crate::resident::Resident::new(
                    dev,
                    tensors,
                    g,
                    &fused_slots,
                    &final_norm,
                    &lm_head,
                    config.vocab_size,
                    config.intermediate_size,
                )?)
            }
            _ => None,
        };
        #[cfg(not(feature = "cuda"))]
        for p in &mut layer_paths {
            // Only the CUDA build has a fused executor.
            if *p == LayerPath::Fused {
                *p = LayerPath::OpByOp;
            }
        }

        Ok(Model {
            config,
            weights,
            backend,
            graph,
            embed,
            final_norm,
            lm_head,
            layer_formats,
            layer_paths,
            notice,
            backend_note,
            fused_note,
            stats: RefCell::new(Stats::default()),
            #[cfg(feature = "cuda")]
            resident,
        })
    }

    /// The backend's name.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// The container's path.
    pub fn file(&self) -> &str {
        self.weights.file()
    }

    /// An empty KV cache for this model.
    pub fn new_cache(&self) -> KvCache {
        self.graph.new_cache()
    }

    /// Runs `tokens` at positions cache.len().. and appends them to the cache; returns the
    /// logits of every token, [tokens.len(), vocab].
    pub fn forward(&self, cache: &mut KvCache, tokens: &[u32]) -> Result<Vec<f32>> {
        let s = tokens.len();
        if s == 0 {
            return Err(EngineError::Input("no tokens to run".to_string()));
        }
        let (h, vocab) = (self.config.hidden_size, self.config.vocab_size);
        let pos0 = cache.len();
        let emb = self.weights.qtensor(&self.embed)?;
        let mut x = vec![0f32; s * h];
        for (row, &tok) in x.chunks_exact_mut(h).zip(tokens) {
            if tok as usize >= vocab {
                return Err(EngineError::Input(format!(
                    "token id {tok} is outside the vocabulary (vocab_size {vocab})"
                )));
            }
            quant_core::decode_rows(&emb, tok as usize, row).map_err(|source| {
                EngineError::Quant {
                    tensor: self.embed.name.clone(),
                    source,
                }
            })?;
        }
        let ex = Exec {
            weights: &self.weights,
            backend: self.backend.as_ref(),
            stats: &self.stats,
        };
        for l in 0..self.config.num_hidden_layers {
            self.graph.layer(&ex, l, &mut x, cache, pos0, s)?;
            // forward() is the op-by-op executor; the fused path runs only in generate().
            let path = match self.layer_paths[l] {
                LayerPath::Fused => LayerPath::OpByOp,
                p => p,
            };
            *self
                .stats
                .borrow_mut()
                .layer_runs
                .entry(path.name())
                .or_default() += 1;
        }
        ops::rms_norm_rows(&mut x, &self.final_norm, self.config.rms_norm_eps);
        ex.linear(&self.lm_head, &x, s)
    }

    /// Greedy decoding: runs the prompt, then chooses `n` tokens one by one with the KV cache.
    /// Keeps every step's logits.
    pub fn generate(&self, prompt: &[u32], n: usize) -> Result<Generation> {
        self.generate_with(prompt, n, true)
    }

    /// [`Model::generate`]; `keep_logits: false` leaves [`Generation::logits`] empty, which
    /// spares the device-resident path a logits read-back per token (it reads back only the
    /// token id).
    pub fn generate_with(&self, prompt: &[u32], n: usize, keep_logits: bool) -> Result<Generation> {
        #[cfg(feature = "cuda")]
        if let Some(res) = &self.resident {
            return self.generate_resident(res, prompt, n, keep_logits);
        }
        let vocab = self.config.vocab_size;
        let mut cache = self.new_cache();
        let t0 = Instant::now();
        let logits = self.forward(&mut cache, prompt)?;
        let prefill_secs = t0.elapsed().as_secs_f64();
        let mut last = logits[(prompt.len() - 1) * vocab..].to_vec();
        let mut tokens = Vec::with_capacity(n);
        let mut steps = Vec::with_capacity(n);
        let t1 = Instant::now();
        for k in 0..n {
            let tok = crate::sampler::greedy(&last);
            tokens.push(tok);
            if keep_logits {
                steps.push(std::mem::take(&mut last));
            }
            if k + 1 < n {
                last = self.forward(&mut cache, &[tok])?;
            }
        }
        Ok(Generation {
            tokens,
            logits: steps,
            prefill_secs,
            decode_secs: t1.elapsed().as_secs_f64(),
        })
    }

    /// The embedding row of `tok`, decoded on the host (the resident path uploads it).
    #[cfg(feature = "cuda")]
    fn embed_row(&self, tok: u32) -> Result<Vec<f32>> {
        let (h, vocab) = (self.config.hidden_size, self.config.vocab_size);
        if tok as usize >= vocab {
            return Err(EngineError::Input(format!(
                "token id {tok} is outside the vocabulary (vocab_size {vocab})"
            )));
        }
        let emb = self.weights.qtensor(&self.embed)?;
        let mut row = vec![0f32; h];
        quant_core::decode_rows(&emb, tok as usize, &mut row).map_err(|source| {
            EngineError::Quant {
                tensor: self.embed.name.clone(),
                source,
            }
        })?;
        Ok(row)
    }

    /// The resident path's launches per decode step; `None` when the model does not take it.
    #[cfg(feature = "cuda")]
    pub fn resident_launches(&self) -> Option<crate::resident::Launches> {
        self.resident
            .as_ref()
            .map(crate::resident::Resident::launches)
    }

    /// Turns the resident path's CUDA graph replay on or off (default:
    /// [`crate::resident::graph_default`]); the tokens are the same either way. Returns
    /// whether the model takes the resident path (nothing to turn otherwise).
    #[cfg(feature = "cuda")]
    pub fn set_cuda_graph(&self, on: bool) -> bool {
        self.resident.as_ref().map(|r| r.set_graph(on)).is_some()
    }

    /// Weight bytes on the device (every uploaded tensor) and weight bytes one resident
    /// decode step reads; `None` when the model does not take the resident path. Equal when
    /// nothing is uploaded that the path does not read.
    #[cfg(feature = "cuda")]
    pub fn resident_weight_bytes(&self) -> Result<Option<(usize, usize)>> {
        let (Some(res), Some((_, tensors))) = (&self.resident, self.backend.cuda()) else {
            return Ok(None);
        };
        let uploaded = crate::resident::sum_stored_bytes(tensors)?;
        Ok(Some((uploaded, res.weight_bytes(tensors)?)))
    }

    /// Decode steps the resident path ran as CUDA graph replays so far; `None` when the
    /// model does not take that path.
    #[cfg(feature = "cuda")]
    pub fn resident_graph_replays(&self) -> Option<u64> {
        self.resident
            .as_ref()
            .map(crate::resident::Resident::graph_replays)
    }

    /// Whether generation takes the device-resident path.
    pub fn resident(&self) -> bool {
        #[cfg(feature = "cuda")]
        if self.resident.is_some() {
            return true;
        }
        false
    }

    /// [`Model::generate_with`] on the device-resident path: the prompt runs token by token
    /// through the same step (the KV cache lives on the device), then each chosen token.
    #[cfg(feature = "cuda")]
    fn generate_resident(
        &self,
        res: &crate::resident::Resident,
        prompt: &[u32],
        n: usize,
        keep_logits: bool,
    ) -> Result<Generation> {
        let Some((dev, tensors)) = self.backend.cuda() else {
            return Err(EngineError::Input(
                "the resident path lost its CUDA backend".to_string(),
            ));
        };
        if prompt.is_empty() {
            return Err(EngineError::Input("no tokens to run".to_string()));
        }
        let cap = prompt.len() + n;
        let mut st = res.new_state(dev, cap)?;
        let mut step = |tok: u32, logits: bool| -> Result<(u32, Option<Vec<f32>>)> {
            let row = self.embed_row(tok)?;
            let out = res.step(dev, tensors, &mut st, &row, logits)?;
            let mut stats = self.stats.borrow_mut();
            *stats.layer_runs.entry(LayerPath::Fused.name()).or_default() += res.layers() as u64;
            stats.backend_gemvs += res.launches().gemv as u64;
            Ok(out)
        };
        let t0 = Instant::now();
        let mut last = (0, None);
        for (i, &tok) in prompt.iter().enumerate() {
            last = step(tok, keep_logits && i + 1 == prompt.len())?;
        }
        let prefill_secs = t0.elapsed().as_secs_f64();
        let mut tokens = Vec::with_capacity(n);
        let mut steps = Vec::with_capacity(if keep_logits { n } else { 0 });
        let t1 = Instant::now();
        for k in 0..n {
            let (tok, logits) = std::mem::take(&mut last);
            tokens.push(tok);
            if let Some(l) = logits {
                steps.push(l);
            }
            if k + 1 < n {
                last = step(tok, keep_logits)?;
            }
        }
        Ok(Generation {
            tokens,
            logits: steps,
            prefill_secs,
            decode_secs: t1.elapsed().as_secs_f64(),
        })
    }

    /// Times the resident path's decode step (all operations, GEMVs only, the rest only;
    /// launched one by one and as graph replays) over `reps` steps; `None` when the model
    /// does not take that path.
    #[cfg(feature = "cuda")]
    pub fn resident_profile(
        &self,
        reps: usize,
    ) -> Result<Option<crate::resident::ResidentProfile>> {
        let (Some(res), Some((dev, tensors))) = (&self.resident, self.backend.cuda()) else {
            return Ok(None);
        };
        let row = self.embed_row(1.min((self.config.vocab_size as u32).saturating_sub(1)))?;
        res.profile(dev, tensors, &row, reps).map(Some)
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.stats.borrow().clone()
    }

    /// The end-of-run summary lines.
    pub fn summary(&self) -> Vec<String> {
        self.stats.borrow().summary(
            self.backend.name(),
            self.backend.fused_layers(),
            self.fused_note.as_deref(),
        )
    }
}

fn read_config(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| EngineError::Config {
        file: path.display().to_string(),
        msg: format!(
            "cannot read the model's config.json: {e} (pass --config FILE when it is not next to the container)"
        ),
    })
}
