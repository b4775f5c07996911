//! `cargo xtask`: developer tasks. `ci` is what .ci/run calls.

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

fn ci() -> bool {
    run("cargo", &["fmt", "--all", "--check"])
        && run("cargo", &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])
        && run("cargo", &["test", "--workspace", "--release"])
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ok = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        other => {
            eprintln!("usage: cargo xtask ci   (unknown task {other:?})");
            false
        }
    };
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
