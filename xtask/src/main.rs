//! `cargo xtask`: developer tasks. `ci` is what .ci/run calls.

mod bench_cpu;
mod formats_doc;

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn run(program: &str, args: &[&str]) -> bool {
    eprintln!("xtask: {program} {}", args.join(" "));
    match Command::new(program).args(args).status() {
        Ok(s) => s.success(),
        Err(e) => {
            eprintln!("xtask: could not start {program}: {e}");
            false
        }
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the repo root").to_path_buf()
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

fn ci() -> bool {
    run("cargo", &["fmt", "--all", "--check"])
        && formats_doc(true)
        && run("cargo", &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])
        && run("cargo", &["test", "--workspace", "--release"])
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ok = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("formats-doc") => formats_doc(args.iter().any(|a| a == "--check")),
        Some("bench-cpu") => bench_cpu::run(&root()).map_err(|e| eprintln!("xtask bench-cpu: {e}")).is_ok(),
        other => {
            eprintln!("usage: cargo xtask <ci | formats-doc [--check] | bench-cpu>   (unknown task {other:?})");
            false
        }
    };
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
