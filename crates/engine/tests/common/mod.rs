//! Helpers shared by the engine's integration tests: fixture paths, the committed
//! transformers references, and the parity metric.
#![allow(dead_code)]

use engine::{LoadOptions, Model, ModelSource};
use std::path::PathBuf;

pub const FIXTURES: [&str; 4] = [
    "parity-llama",
    "parity-qwen3",
    "parity-deepseek-v3",
    "parity-deepseek-v3-qproj",
];

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name)
}

/// What fixtures/gen_models.py committed for one model.
pub struct Reference {
    pub prompt: Vec<u32>,
    pub greedy: Vec<u32>,
    /// [rows, vocab]: every position of prompt + greedy[..len-1].
    pub logits: Vec<f32>,
    pub rows: usize,
    pub vocab: usize,
}

impl Reference {
    pub fn load(name: &str) -> Reference {
        Reference::load_dir(&fixture(name))
    }

    /// The reference in `dir` (a fixture or one of its `variants/<v>/`).
    pub fn load_dir(dir: &std::path::Path) -> Reference {
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
                .unwrap();
        let ids = |k: &str| -> Vec<u32> {
            j[k].as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect()
        };
        let (shape, logits) = engine::npy::read(&dir.join("reference_logits.npy")).unwrap();
        Reference {
            prompt: ids("prompt_ids"),
            greedy: ids("greedy_tokens"),
            logits,
            rows: shape[0],
            vocab: shape[1],
        }
    }

    /// prompt + greedy[..len-1]: the tokens whose logits the reference holds.
    pub fn sequence(&self) -> Vec<u32> {
        let mut s = self.prompt.clone();
        s.extend_from_slice(&self.greedy[..self.greedy.len() - 1]);
        s
    }

    pub fn row(&self, r: usize) -> &[f32] {
        &self.logits[r * self.vocab..(r + 1) * self.vocab]
    }

    pub fn scale(&self) -> f32 {
        self.logits.iter().fold(0f32, |m, v| m.max(v.abs()))
    }
}

/// max |a - b|.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

pub fn load_cpu(name: &str) -> Model {
    Model::load(ModelSource::Path(fixture(name)), &LoadOptions::default()).unwrap()
}

use container_io::pipeline::{Job, Planned, Target, execute};
use container_io::roles::{Role, classify};
use container_io::{Container, Item, Plan};
use quant_core::Format;

/// Quantizes a fixture through container-io's pipeline into a stamped container under the
/// temp dir: `pick(role, rows, cols)` chooses each 2-D weight's format (None keeps it f32);
/// norms, routers and biases stay f32 (as `tessera quantize` keeps them). A pick whose
/// shape the format refuses (e.g. I % 256 != 0 for the 256-weight families) also stays
/// f32. Returns the container path and the fraction of weights (by count) quantized.
pub fn quantize_fixture(
    name: &str,
    tag: &str,
    pick: impl Fn(Role, usize, usize) -> Option<Format>,
) -> (PathBuf, f64) {
    let input = Container::open(fixture(name)).unwrap();
    let dir = std::env::temp_dir().join(format!("tessera-engine-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{name}-{tag}.safetensors"));
    let mut plan = Plan::new(&out.display().to_string(), false);
    let mut jobs = Vec::new();
    let (mut quantized, mut total) = (0usize, 0usize);
    for n in input.primary_names() {
        let role = classify(n);
        let r = match input.resolve(n, &Default::default()).unwrap() {
            Item::Tensor(r) => r,
            Item::Raw(raw) => panic!("{n}: raw {:?}", raw.dtype),
        };
        let weight = !role.stays_f32() && r.dims.len() == 2;
        if weight {
            total += r.rows * r.cols;
        }
        let chosen = if weight {
            pick(role, r.rows, r.cols).filter(|f| f.spec().check_shape(r.rows, r.cols).is_ok())
        } else {
            None
        };
        let target = match chosen {
            Some(format) => {
                quantized += r.rows * r.cols;
                plan.add_quantized(n, format, r.rows, r.cols, 42).unwrap();
                Target::Quantize {
                    format,
                    rows: r.rows,
                    cols: r.cols,
                }
            }
            None => {
                plan.add_dense(n, Format::F32, &r.dims).unwrap();
                Target::Dense {
                    format: Format::F32,
                    dims: r.dims.clone(),
                }
            }
        };
        jobs.push(Job {
            name: n.to_string(),
            role,
            source: r,
            target,
        });
    }
    let planned = Planned {
        plan,
        jobs,
        warnings: Vec::new(),
        skipped: Vec::new(),
    };
    execute(&input, planned, &out, 42, &|_| {}).unwrap();
    (out, quantized as f64 / total as f64)
}

/// A model source for a quantized container of fixture `name`.
pub fn quantized_source(path: &std::path::Path, name: &str) -> ModelSource {
    ModelSource::WithConfig {
        container: path.to_path_buf(),
        config: fixture(name).join("config.json"),
    }
}

/// Decodes every tensor of a container back to a plain f32 safetensors file (container-io's
/// dequantize pipeline): the weights a quantized container stands for, as f32.
pub fn dequantize(path: &std::path::Path) -> PathBuf {
    let input = Container::open(path).unwrap();
    let out = path.with_extension("f32.safetensors");
    let planned = container_io::pipeline::plan_dequantize(
        &input,
        &out.display().to_string(),
        &Default::default(),
        Format::F32,
    )
    .unwrap();
    execute(&input, planned, &out, 42, &|_| {}).unwrap();
    out
}
