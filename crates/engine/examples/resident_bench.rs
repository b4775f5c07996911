//! Times the CUDA device-resident decode path on a model folder and splits a step into its
//! GEMVs and everything else (each timed alone over the same steps), so a figure against
//! the bandwidth floor says where the time goes.
//!
//! `cargo run --release -p engine --features cuda --example resident_bench -- MODEL_DIR
//!  [--tokens 64] [--reps 64]`
//!
//! It prints the launches per step (GEMVs, their activation splits, the rest). For
//! before/after figures in one run: `TESSERA_RESIDENT_UNFUSED=1` keeps q/k/v and gate/up as
//! separate GEMVs, `TESSERA_RESIDENT_PDL=0` launches the decode kernels without
//! programmatic dependent launch.

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
    let prompt = [1u32, 2, 3];
    for round in 0..3 {
        let g = m.generate_with(&prompt, tokens, false)?;
        let n = g.tokens.len().saturating_sub(1);
        println!(
            "round {round}: decode {n} tokens in {:.2} ms = {:.1} tokens/s (prefill {:.2} ms)",
            g.decode_secs * 1e3,
            n as f64 / g.decode_secs,
            g.prefill_secs * 1e3
        );
    }
    if let Some(p) = m.resident_profile(reps)? {
        let n = p.launches;
        println!(
            "launches per step: {} kernels ({} GEMVs + {} activation splits + {} other) + {} \
             copy; decode kernels with programmatic dependent launch: {}",
            n.kernels(),
            n.gemv,
            n.prep,
            n.other,
            n.copies,
            p.pdl
        );
        println!(
            "profile over {reps} steps (no read-back), us per step (host enqueue time of it): \
             all {:.1} ({:.1}) = {:.1} tokens/s; GEMVs alone {:.1} ({:.1}); the rest alone \
             (norms, attention with RoPE, SwiGLU, argmax, embedding upload) {:.1} ({:.1})",
            p.step_s * 1e6,
            p.step_enqueue_s * 1e6,
            1.0 / p.step_s,
            p.gemv_only_s * 1e6,
            p.gemv_enqueue_s * 1e6,
            p.other_only_s * 1e6,
            p.other_enqueue_s * 1e6
        );
    }
    for line in m.summary() {
        println!("{line}");
    }
    Ok(())
}
