//! The gate, the notice and the fallback summary end to end, on a stand-in GPU backend: a
//! backend that is not the CPU, whose capability table covers only some formats (and only
//! S <= 4), and which computes with quant-core's kernels. Quantized fixtures with a format
//! outside that table must give the right notice lines, CPU fallbacks counted per op, an
//! error under --strict-gpu, and the same logits as the CPU backend.

mod common;
use common::*;
use container_io::roles::Role;
use engine::backend::{Backend, Slot};
use engine::gate::LayerPath;
use engine::{EngineError, LoadOptions, Model};
use quant_core::capability::{BackendError, Capability, Constraint, Op, lookup};
use quant_core::{Format, QTensor};

static TABLE: [Capability; 3] = [
    Capability {
        op: Op::Gemv,
        format: Format::F32,
        constraint: Constraint::batch(1, 4),
    },
    Capability {
        op: Op::Gemv,
        format: Format::Int8Row,
        constraint: Constraint::batch(1, 4),
    },
    Capability {
        op: Op::Gemv,
        format: Format::Int4G64,
        constraint: Constraint::batch(1, 4),
    },
];

/// A GPU in all but hardware: refuses what its table lacks, like a real tier.
struct FakeGpu {
    uploads: usize,
}

impl Backend for FakeGpu {
    fn name(&self) -> &'static str {
        "fakegpu"
    }
    fn is_cpu(&self) -> bool {
        false
    }
    fn capabilities(&self) -> &'static [Capability] {
        &TABLE
    }
    fn upload(&mut self, t: &QTensor<'_>) -> Result<Slot, BackendError> {
        assert!(
            lookup(&TABLE, Op::Gemv, t.format(), 1).is_some(),
            "uploaded an uncovered format {}",
            t.format()
        );
        self.uploads += 1;
        Ok(Slot(self.uploads))
    }
    fn gemv(
        &self,
        _slot: Slot,
        t: &QTensor<'_>,
        x: &[f32],
        s: usize,
        y: &mut [f32],
    ) -> Result<(), BackendError> {
        if lookup(&TABLE, Op::Gemv, t.format(), s).is_none() {
            return Err(BackendError::NotImplemented {
                backend: "fakegpu",
                op: "gemv",
                format: t.format(),
                s,
            });
        }
        quant_core::gemm(t, x, s, y).map_err(BackendError::Input)
    }
}

fn load_fake(src: engine::ModelSource, strict: bool) -> engine::Result<Model> {
    Model::load_with_backend(
        src,
        Box::new(FakeGpu { uploads: 0 }),
        None,
        &LoadOptions {
            strict_gpu: strict,
            ..Default::default()
        },
    )
}

fn load_cpu_src(src: engine::ModelSource) -> Model {
    Model::load(src, &LoadOptions::default()).unwrap()
}

#[test]
fn clean_container_is_silent_and_runs_op_by_op_on_the_backend() {
    let name = "parity-llama";
    let (path, _) = quantize_fixture(name, "all-int4", |_, _, _| Some(Format::Int4G64));
    let m = load_fake(quantized_source(&path, name), true).unwrap();
    assert!(m.notice.is_empty(), "{:?}", m.notice);
    assert!(m.layer_paths.iter().all(|p| *p == LayerPath::OpByOp));
    let r = Reference::load(name);
    let mut cache = m.new_cache();
    let logits = m.forward(&mut cache, &r.sequence()).unwrap();
    let st = m.stats();
    // The prompt batch (S = 23) exceeds the table's S <= 4: it is split, not refused.
    assert_eq!(st.total_fallbacks(), 0, "{:?}", st.fallbacks);
    let summary = m.summary().join("\n");
    assert!(
        summary.contains("op-by-op 2")
            && summary.contains("fused one-submission layer path is not implemented for fakegpu"),
        "{summary}"
    );
    assert!(summary.contains("CPU fallbacks: none"), "{summary}");
    // Same kernels, same numbers as the CPU backend on the same container.
    let cpu = load_cpu_src(quantized_source(&path, name));
    let mut c2 = cpu.new_cache();
    assert_eq!(logits, cpu.forward(&mut c2, &r.sequence()).unwrap());
}

#[test]
fn offending_kind_gets_one_line_fallbacks_and_a_strict_error() {
    let name = "parity-llama";
    // o_proj at q8_0, which the fake table lacks; everything else int4-g64.
    let (path, _) = quantize_fixture(name, "o-q8", |role, _, _| {
        Some(if role == Role::AttnO {
            Format::Q8_0
        } else {
            Format::Int4G64
        })
    });
    let m = load_fake(quantized_source(&path, name), false).unwrap();
    assert_eq!(m.notice.len(), 1, "{:?}", m.notice);
    let line = &m.notice[0];
    for part in [
        "[fakegpu] o_proj:",
        "q8_0 in 2 of 2 layers",
        "run o_proj on the CPU",
        "--role o=",
    ] {
        assert!(line.contains(part), "missing {part:?} in {line}");
    }
    // Still op by op: the other kinds run on the backend.
    assert!(m.layer_paths.iter().all(|p| *p == LayerPath::OpByOp));
    let g = m.generate(&[1, 2, 3], 4).unwrap();
    let st = m.stats();
    // 2 layers x 4 forward passes (prefill + 3 decode steps).
    let o = st
        .fallbacks
        .iter()
        .filter(|((op, _), _)| op == "o_proj")
        .map(|(_, n)| *n)
        .sum::<u64>();
    assert_eq!(o, 8, "{:?}", st.fallbacks);
    assert_eq!(st.total_fallbacks(), 8, "{:?}", st.fallbacks);
    let summary = m.summary().join("\n");
    assert!(
        summary.contains("o_proj: 8 (q8_0 not in fakegpu's table)"),
        "{summary}"
    );
    eprintln!("{}\n{summary}", m.notice.join("\n"));
    // The fallback is correct: same tokens as the CPU backend.
    let cpu = load_cpu_src(quantized_source(&path, name));
    assert_eq!(g.tokens, cpu.generate(&[1, 2, 3], 4).unwrap().tokens);

    let e = load_fake(quantized_source(&path, name), true)
        .err()
        .expect("strict load must fail");
    match e {
        EngineError::StrictGpu { lines } => assert_eq!(lines, m.notice),
        other => panic!("{other}"),
    }
}

#[test]
fn expert_kinds_count_over_moe_layers_only() {
    let name = "parity-deepseek-v3";
    let (path, _) = quantize_fixture(name, "exp-int4row", |role, _, _| {
        Some(if role == Role::RoutedExpert {
            Format::Int4Row
        } else {
            Format::Int8Row
        })
    });
    let m = load_fake(quantized_source(&path, name), false).unwrap();
    assert_eq!(m.notice.len(), 3, "{:#?}", m.notice);
    for (line, kind) in
        m.notice
            .iter()
            .zip(["experts.gate_proj", "experts.up_proj", "experts.down_proj"])
    {
        assert!(
            line.starts_with(&format!("[fakegpu] {kind}: int4-row in 2 of 2 layers")),
            "{line}"
        );
        assert!(line.contains("--role expert="), "{line}");
    }
    let g = m.generate(&[1, 2, 3], 3).unwrap();
    let cpu = load_cpu_src(quantized_source(&path, name));
    assert_eq!(g.tokens, cpu.generate(&[1, 2, 3], 3).unwrap().tokens);
    let st = m.stats();
    assert!(
        st.fallbacks
            .keys()
            .all(|(op, _)| op.starts_with("experts.")),
        "{:?}",
        st.fallbacks
    );
    assert!(st.total_fallbacks() > 0);
}

#[test]
fn cpu_backend_is_never_a_fallback_and_strict_gpu_refuses_it() {
    let m = load_cpu("parity-deepseek-v3");
    assert!(m.notice.is_empty());
    assert!(m.layer_paths.iter().all(|p| *p == LayerPath::Cpu));
    m.generate(&[1, 2], 2).unwrap();
    assert_eq!(m.stats().total_fallbacks(), 0);
    let e = Model::load(
        engine::ModelSource::Path(fixture("parity-deepseek-v3")),
        &LoadOptions {
            strict_gpu: true,
            ..Default::default()
        },
    )
    .err()
    .expect("strict on the CPU must fail");
    assert!(matches!(e, EngineError::StrictGpu { .. }), "{e}");
}

#[test]
fn backends_not_compiled_in_say_why() {
    let absent: Vec<engine::BackendChoice> = [
        (engine::BackendChoice::Cuda, cfg!(feature = "cuda")),
        (engine::BackendChoice::Wgpu, cfg!(feature = "wgpu")),
        (engine::BackendChoice::Vulkan, cfg!(feature = "vulkan")),
    ]
    .into_iter()
    .filter(|(_, built)| !built)
    .map(|(b, _)| b)
    .collect();
    for b in absent {
        let e = Model::load(
            engine::ModelSource::Path(fixture("parity-llama")),
            &LoadOptions {
                backend: b,
                strict_gpu: false,
            },
        )
        .err()
        .expect("not compiled in");
        assert!(
            e.to_string()
                .contains(&format!("this build has no {} support", b.name())),
            "{e}"
        );
    }
}

/// The real CUDA table (no device needed to read it): GGUF k-quants are not in it, so a
/// q4_k expert gets a notice line naming cuda and a covered remedy.
#[cfg(feature = "cuda")]
#[test]
fn cuda_table_drives_the_notice() {
    use engine::gate::{Kind, LayerFormats};
    let table = kernels_cuda::backend::capability_table();
    let layers = vec![
        LayerFormats {
            tensors: vec![(Kind::QA, Format::Int4G64), (Kind::ExpGate, Format::Q4K)],
        };
        3
    ];
    let lines = engine::notice::notice_lines("cuda", &layers, table);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("[cuda] experts.gate_proj: q4_k in 3 of 3 layers"),
        "{}",
        lines[0]
    );
}
