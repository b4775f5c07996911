//! `cargo xtask`: developer tasks. `ci` is what .ci/run calls.

mod bench;
mod bench_cpu;
mod candle_pair;
mod formats_doc;
mod perf_record;
mod plot;
mod quality;
mod shaders;
mod test_matrix;

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn run(program: &str, args: &[&str]) -> bool {
    run_env(program, args, &[])
}

/// [`run`] with `envs` set on the child, whatever the caller's shell has.
fn run_env(program: &str, args: &[&str], envs: &[(&str, &str)]) -> bool {
    let shown: String = envs.iter().map(|(k, v)| format!("{k}={v:?} ")).collect();
    eprintln!("xtask: {shown}{program} {}", args.join(" "));
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    // lavapipe (the CI machine's Vulkan) runs the WGSL kernels of the wgpu and Vulkan tiers.
    // Its LLVM optimisation passes take minutes on the larger-S kernels and make them
    // slower, not faster (docs/VULKAN.md, "lavapipe"); `no_opt` skips them. It changes
    // nothing on a real GPU and nothing about what is computed.
    if std::env::var_os("GALLIVM_PERF").is_none() {
        cmd.env("GALLIVM_PERF", "no_opt");
    }
    match cmd.status() {
        Ok(s) => s.success(),
        Err(e) => {
            eprintln!("xtask: could not start {program}: {e}");
            false
        }
    }
}

fn root() -> PathBuf {
    // A prebuilt xtask carried to another machine (the GPU bundles) runs in that tree.
    if let Some(r) = std::env::var_os("TESSERA_ROOT") {
        return PathBuf::from(r);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the repo root")
        .to_path_buf()
}

fn formats_doc(check: bool) -> bool {
    match formats_doc::run(&root(), check) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("xtask formats-doc: {e}");
            false
        }
    }
}

fn shaders(check: bool) -> bool {
    match shaders::run(&root(), check) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("xtask shaders: {e}");
            false
        }
    }
}

fn test_matrix(args: &[String]) -> bool {
    // The suite runs every kernel and the f64 oracle over some thousand cases; unoptimised
    // that takes over ten times as long (measured: 9.2 s against 0.8 s for four formats),
    // so a debug xtask hands the job to a release build of itself, with the same backend
    // features. TESSERA_XTASK_DEBUG=1 keeps it in this process.
    if cfg!(debug_assertions) && std::env::var_os("TESSERA_XTASK_DEBUG").is_none() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let manifest = root().join("Cargo.toml");
        // The CI columns' backends always, so a local table is what CI reproduces.
        let mut features = test_matrix::compiled_features();
        for f in CI_MATRIX_FEATURES.split(',') {
            if !features.contains(&f) {
                features.push(f);
            }
        }
        let features = features.join(",");
        let mut a = vec!["run", "--quiet", "--release", "--manifest-path"];
        a.push(manifest.to_str().unwrap_or("Cargo.toml"));
        a.extend(["--package", "xtask"]);
        if !features.is_empty() {
            a.extend(["--features", &features]);
        }
        a.extend(["--", "test-matrix"]);
        a.extend(args.iter().map(String::as_str));
        return run(&cargo, &a);
    }
    match test_matrix::run(&root(), args) {
        Ok(ok) => ok,
        Err(e) => {
            eprintln!("xtask test-matrix: {e}");
            false
        }
    }
}

fn ci() -> bool {
    run("cargo", &["fmt", "--all", "--check"])
        && formats_doc(true)
        && shaders(true)
        && run(
            "cargo",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        )
        // Broken doc links and shapes read as links (`[16]`) are errors here, not warnings.
        && run_env(
            "cargo",
            &["doc", "--workspace", "--no-deps"],
            &[("RUSTDOCFLAGS", "-D warnings")],
        )
        && run("cargo", &["test", "--workspace", "--release"])
        && ci_test_matrix()
}

/// The backend features CI's test matrix is built with: the columns it can run (CPU, and
/// the wgpu and Vulkan tiers on lavapipe).
const CI_MATRIX_FEATURES: &str = "vulkan,wgpu";

/// `test-matrix --check` from a release xtask built with [`CI_MATRIX_FEATURES`], whatever
/// this xtask was built with (`cargo xtask` builds it without features).
fn ci_test_matrix() -> bool {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = root().join("Cargo.toml");
    run(
        &cargo,
        &[
            "run",
            "--quiet",
            "--release",
            "--manifest-path",
            manifest.to_str().unwrap_or("Cargo.toml"),
            "--package",
            "xtask",
            "--features",
            CI_MATRIX_FEATURES,
            "--",
            "test-matrix",
            "--check",
        ],
    )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ok = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("formats-doc") => formats_doc(args.iter().any(|a| a == "--check")),
        Some("shaders") => shaders(args.iter().any(|a| a == "--check")),
        Some("test-matrix") => test_matrix(&args[1..]),
        Some("quality") => quality::run(&root())
            .map_err(|e| eprintln!("xtask quality: {e}"))
            .is_ok(),
        Some("bench") => bench::run(&root(), &args[1..])
            .map_err(|e| eprintln!("xtask bench: {e}"))
            .is_ok(),
        Some("bench-cpu") => bench_cpu::run(&root())
            .map_err(|e| eprintln!("xtask bench-cpu: {e}"))
            .is_ok(),
        other => {
            eprintln!(
                "usage: cargo xtask <ci | formats-doc [--check] | shaders [--check] | test-matrix [--backend b,..] [--format f,..] [--json FILE] [--check] | bench [--backend cpu,cuda,wgpu,vulkan] [--import FILE.json] [--plot-only] | bench-cpu | quality>   (unknown task {other:?})"
            );
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
