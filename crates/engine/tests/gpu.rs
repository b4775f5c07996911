//! CPU and GPU token streams at temperature 0: identical for 64 tokens on every fixture,
//! in f32 and in an int4-g64 container, for each GPU tier compiled in (features `cuda`,
//! `vulkan`, `wgpu`) whose device answers here, with every step's logits within
//! [`LOGIT_TOL`] of the largest |logit|. On CUDA the Llama and Qwen3 fixtures run the
//! device-resident path (`engine::resident`) and must say so. Skips, saying why, otherwise
//! (lavapipe serves `vulkan` and `wgpu` on a machine without a GPU).
//!
//! Built with `--features mutation-test`, `TESSERA_DECODE_MUTATE=drop-rope` compiles the
//! resident kernels without the RoPE rotation: the CUDA test must then fail (docs/ENGINE.md).
//! `TESSERA_DECODE_MUTATE=stale-position` stops writing the position once the step's CUDA
//! graph exists (as if it were baked into the graph): the test must fail too.
//! `TESSERA_RESIDENT_UNFUSED=1` runs the resident path with q/k/v and gate/up as separate
//! GEMVs (the path formats that cannot be row-concatenated take). The resident path runs
//! with its CUDA graph on and off (`TESSERA_CUDA_GRAPH` sets the first run's default);
//! `TESSERA_RESIDENT_ATTN=serial` runs the attention kernel without splitting positions.

mod common;
use common::*;
use engine::{BackendChoice, LoadOptions, Model, ModelSource};
use quant_core::Format;

const TOKENS: usize = 64;

/// Logits of the GPU run may differ from the CPU's by this fraction of the largest |logit|
/// (the parity bound against transformers, docs/ENGINE.md).
const LOGIT_TOL: f32 = 1e-3;

fn run(choice: BackendChoice, src: ModelSource, prompt: &[u32]) -> (Vec<u32>, Vec<f32>, Model) {
    let m = Model::load(
        src,
        &LoadOptions {
            backend: choice,
            strict_gpu: false,
        },
    )
    .unwrap();
    let g = m.generate(prompt, TOKENS).unwrap();
    (g.tokens, g.logits.concat(), m)
}

/// Tokens and logits of a GPU run against the CPU's; on CUDA, the Llama / Qwen3 fixtures
/// must have taken the device-resident path, and its no-logits mode (what `tessera run`
/// uses for speed) must choose the same tokens.
fn compare(
    choice: BackendChoice,
    what: &str,
    cpu: &(Vec<u32>, Vec<f32>, Model),
    gpu: &(Vec<u32>, Vec<f32>, Model),
    prompt: &[u32],
) {
    assert_eq!(
        cpu.0,
        gpu.0,
        "{what}: CPU and {} token streams differ",
        choice.name()
    );
    let scale = cpu.1.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = max_abs_diff(&cpu.1, &gpu.1);
    let resident = gpu.2.resident();
    eprintln!(
        "{what} on {}{}: 64 tokens equal, logits max |diff| {diff:.3e} = {:.2e} of scale {scale:.2} | {}",
        choice.name(),
        if resident { " (resident)" } else { "" },
        diff / scale,
        gpu.2.summary().join(" | ")
    );
    assert!(
        diff <= LOGIT_TOL * scale,
        "{what}: {} logits differ from the CPU's by {diff} (> {LOGIT_TOL} of {scale})",
        choice.name()
    );
    if choice == BackendChoice::Cuda && cfg!(feature = "cuda") && !what.contains("deepseek") {
        assert!(resident, "{what}: CUDA did not take the resident path");
        #[cfg(feature = "cuda")]
        {
            // Both fixture formats concatenate (engine::fuse): one q/k/v and one gate/up
            // GEMV per layer, plus o, down and the LM head, unless fusion is turned off.
            let layers = gpu.2.config.num_hidden_layers;
            let n = gpu.2.resident_launches().unwrap();
            let per_layer = if engine::resident::fusion_enabled() {
                4
            } else {
                7
            };
            eprintln!("{what}: launches per step {n:?}");
            assert_eq!(n.gemv, per_layer * layers + 1, "{what}: {n:?}");
            // Only what the resident path reads is on the device (the fused tensors, not
            // also the separate ones they concatenate).
            let (uploaded, read) = gpu.2.resident_weight_bytes().unwrap().unwrap();
            assert_eq!(
                uploaded, read,
                "{what}: weight bytes uploaded vs read per step"
            );
            // Both ways of launching a step, whatever TESSERA_CUDA_GRAPH says: one CUDA graph
            // replay a step (the first step runs eagerly, the second captures the graph and
            // every step from it on replays it), and the kernels one by one.
            let steps = prompt.len() + TOKENS - 1;
            for graph in [true, false] {
                let m = &gpu.2;
                assert!(m.set_cuda_graph(graph));
                let before = m.resident_graph_replays().unwrap();
                let g = m.generate(prompt, TOKENS).unwrap();
                let replays = m.resident_graph_replays().unwrap() - before;
                let want = if graph { steps as u64 - 1 } else { 0 };
                assert_eq!(replays, want, "{what}: graph {graph}: replays");
                assert_eq!(
                    g.tokens, cpu.0,
                    "{what}: graph {graph}: token streams differ"
                );
                let d = max_abs_diff(&cpu.1, &g.logits.concat());
                eprintln!("{what}: graph {graph}: 64 tokens equal, logits max |diff| {d:.3e}");
                assert!(
                    d <= LOGIT_TOL * scale,
                    "{what}: graph {graph}: logits differ from the CPU's by {d}"
                );
            }
            gpu.2.set_cuda_graph(engine::resident::graph_default());
        }
        let fast = gpu.2.generate_with(prompt, TOKENS, false).unwrap();
        assert!(fast.logits.is_empty());
        assert_eq!(fast.tokens, cpu.0, "{what}: resident no-logits run differs");
    }
}

fn streams_match(choice: BackendChoice) {
    if let Err(e) = engine::backend::select(choice) {
        eprintln!("{}: skipped: {e}", choice.name());
        return;
    }
    for name in FIXTURES {
        let r = Reference::load(name);
        let cpu = run(
            BackendChoice::Cpu,
            ModelSource::Path(fixture(name)),
            &r.prompt,
        );
        assert_eq!(
            &cpu.0[..r.greedy.len()],
            &r.greedy[..],
            "{name}: CPU not the reference"
        );
        let gpu = run(choice, ModelSource::Path(fixture(name)), &r.prompt);
        compare(choice, &format!("{name} f32"), &cpu, &gpu, &r.prompt);

        let (path, _) = quantize_fixture(name, &format!("{}-int4", choice.name()), |_, _, _| {
            Some(Format::Int4G64)
        });
        let cpu = run(BackendChoice::Cpu, quantized_source(&path, name), &r.prompt);
        let gpu = run(choice, quantized_source(&path, name), &r.prompt);
        compare(choice, &format!("{name} int4-g64"), &cpu, &gpu, &r.prompt);
    }
}

#[test]
fn cpu_and_cuda_streams_are_identical_for_64_tokens() {
    streams_match(BackendChoice::Cuda);
}

#[test]
fn cpu_and_vulkan_streams_are_identical_for_64_tokens() {
    streams_match(BackendChoice::Vulkan);
}

#[test]
fn cpu_and_wgpu_streams_are_identical_for_64_tokens() {
    streams_match(BackendChoice::Wgpu);
}
