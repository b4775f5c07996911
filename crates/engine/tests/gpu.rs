//! CPU and GPU token streams at temperature 0: identical for 64 tokens on every fixture,
//! in f32 and in an int4-g64 container, for each GPU tier compiled in (features `cuda`,
//! `vulkan`, `wgpu`) whose device answers here. Skips, saying why, otherwise (lavapipe
//! serves `vulkan` and `wgpu` on a machine without a GPU).

mod common;
use common::*;
use engine::{BackendChoice, LoadOptions, Model, ModelSource};
use quant_core::Format;

const TOKENS: usize = 64;

fn run(choice: BackendChoice, src: ModelSource, prompt: &[u32]) -> (Vec<u32>, Model) {
    let m = Model::load(
        src,
        &LoadOptions {
            backend: choice,
            strict_gpu: false,
        },
    )
    .unwrap();
    let t = m.generate(prompt, TOKENS).unwrap().tokens;
    (t, m)
}

fn streams_match(choice: BackendChoice) {
    if let Err(e) = engine::backend::select(choice) {
        eprintln!("{}: skipped: {e}", choice.name());
        return;
    }
    for name in FIXTURES {
        let r = Reference::load(name);
        let (a, _) = run(
            BackendChoice::Cpu,
            ModelSource::Path(fixture(name)),
            &r.prompt,
        );
        let (b, gpu) = run(choice, ModelSource::Path(fixture(name)), &r.prompt);
        assert_eq!(
            &a[..r.greedy.len()],
            &r.greedy[..],
            "{name}: CPU not the reference"
        );
        assert_eq!(
            a,
            b,
            "{name} f32: CPU and {} token streams differ",
            choice.name()
        );
        eprintln!(
            "{name} f32 on {}: {}",
            choice.name(),
            gpu.summary().join(" | ")
        );

        let (path, _) = quantize_fixture(name, &format!("{}-int4", choice.name()), |_, _, _| {
            Some(Format::Int4G64)
        });
        let (a, _) = run(BackendChoice::Cpu, quantized_source(&path, name), &r.prompt);
        let (b, gpu) = run(choice, quantized_source(&path, name), &r.prompt);
        assert_eq!(
            a,
            b,
            "{name} int4-g64: CPU and {} token streams differ",
            choice.name()
        );
        eprintln!(
            "{name} int4-g64 on {}: {}",
            choice.name(),
            gpu.summary().join(" | ")
        );
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
