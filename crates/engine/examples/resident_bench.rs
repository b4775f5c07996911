//! Times the CUDA device-resident decode path on a model folder and splits a step into its
//! GEMVs and everything else (each timed alone over the same steps), and times the step
//! without its attention kernel, so a figure against the bandwidth floor says where the
//! time goes.
//!
//! `cargo run --release -p engine --features cuda --example resident_bench -- MODEL_DIR
//!  [--tokens 64] [--reps 64]`
//!
//! It prints the launches per step (GEMVs, their activation splits, the rest), and times
//! the decode both with the kernels launched one by one and with each step one CUDA graph
//! replay (whatever `TESSERA_CUDA_GRAPH` says). For before/after figures in one run:
//! `TESSERA_RESIDENT_UNFUSED=1` keeps q/k/v and gate/up as separate GEMVs,
//! `TESSERA_RESIDENT_PDL=0` launches the decode kernels without programmatic dependent
//! launch, `TESSERA_RESIDENT_ATTN=serial|split` runs attention with the positions over one
//! block's threads or warps instead of in chunks of their own blocks,
//! `TESSERA_RESIDENT_PROLOGUE=0` runs RMSNorm as a kernel of its own instead of inside the
//! GEMVs' activation splits.

use engine::{BackendChoice, LoadOptions, Model, ModelSource};

fn main() {
    if let Err(e) = run() {
        eprintln!("resident_bench: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut it = std::env::args().skip(1);
    let dir = it
        .next()
        .ok_or("usage: resident_bench MODEL_DIR [--tokens N] [--reps N]")?;
    let (mut tokens, mut reps) = (64usize, 64usize);
    while let Some(a) = it.next() {
        let v: usize = it.next().ok_or("missing value")?.parse()?;
        match a.as_str() {
            "--tokens" => tokens = v,
            "--reps" => reps = v,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    let m = Model::load(
        ModelSource::Path(dir.into()),
        &LoadOptions {
            backend: BackendChoice::Cuda,
            strict_gpu: false,
        },
    )?;
    println!("resident path: {}", m.resident());
    if let Some((uploaded, read)) = m.resident_weight_bytes()? {
        println!(
            "weight bytes: {:.3} GB on the device, {:.3} GB read per decode step",
            uploaded as f64 / 1e9,
            read as f64 / 1e9
        );
    }
    let prompt = [1u32, 2, 3];
    // Launched one by one, then as one CUDA graph replay a step (the state's first step
    // runs eagerly and its second captures the graph, both inside the decode timing).
    for graph in [false, true] {
        m.set_cuda_graph(graph);
        let mode = if graph { "graph" } else { "eager" };
        for round in 0..3 {
            let g = m.generate_with(&prompt, tokens, false)?;
            let n = g.tokens.len().saturating_sub(1);
            println!(
                "{mode} round {round}: decode {n} tokens in {:.2} ms = {:.1} tokens/s \
                 (prefill {:.2} ms)",
                g.decode_secs * 1e3,
                n as f64 / g.decode_secs,
                g.prefill_secs * 1e3
            );
        }
    }
    println!("graph replays: {}", m.resident_graph_replays().unwrap_or(0));
    if let Some(p) = m.resident_profile(reps)? {
        let n = p.launches;
        println!(
            "launches per step: eager {} kernels ({} GEMVs + {} activation splits + {} other) \
             + {} copies; graph 1 graph launch + {} copies; decode kernels with programmatic \
             dependent launch: {}; attention: {:?}; norms inside the \
             GEMVs' splits: {}",
            n.kernels(),
            n.gemv,
            n.prep,
            n.other,
            n.copies,
            n.copies,
            p.pdl,
            p.attention,
            p.prologue_fusion
        );
        for (mode, t) in [("eager", p.eager), ("graph", p.graph)] {
            println!(
                "{mode} profile over {reps} steps (no read-back), us per step (host enqueue \
                 time of it): all {:.1} ({:.1}) = {:.1} tokens/s; GEMVs alone {:.1} ({:.1}); \
                 the rest alone (norms, attention with RoPE, SwiGLU, argmax) {:.1} ({:.1}); \
                 both with the embedding and position uploads; all but attention {:.1}",
                t.step_s * 1e6,
                t.step_enqueue_s * 1e6,
                1.0 / t.step_s,
                t.gemv_only_s * 1e6,
                t.gemv_enqueue_s * 1e6,
                t.other_only_s * 1e6,
                t.other_enqueue_s * 1e6,
                t.no_attention_s * 1e6
            );
        }
    }
    for line in m.summary() {
        println!("{line}");
    }
    Ok(())
}
