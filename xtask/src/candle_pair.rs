//! The interleaved candle pair of `cargo xtask bench --backend cpu`: builds and runs
//! `xtask/candle-pair` (its own workspace, since it needs candle from crates.io), which
//! times candle's GGUF matvec and tessera's int8-activation GEMV call by call in
//! alternation, and renders its figures as the issue-8 verdict table.
//!
//! Why a second comparison beside the candle anchor: the anchor and quant-core's criterion
//! bench run minutes apart, and this VM's read bandwidth moved by a third within one run
//! (docs/PERF.md), so their ratio carries the drift. The pair's two medians come from
//! the same seconds of the same process.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// One pair line: format, shape [O, I], candle's and tessera's median microseconds a call,
/// and the weight bytes each streams a call.
#[derive(Debug, PartialEq)]
pub struct Pair {
    pub format: String,
    pub shape: (usize, usize),
    pub candle_us: f64,
    pub tessera_us: f64,
    /// Tessera on plain `Vec` copies (4 KiB pages, as candle's buffers), when printed.
    pub tessera_4k_us: Option<f64>,
    pub candle_bytes: u64,
    pub tessera_bytes: u64,
    pub calls: usize,
}

impl Pair {
    /// Tessera's weight bytes per second over candle's (above 1: tessera streams faster).
    pub fn speed_ratio(&self) -> f64 {
        (self.tessera_bytes as f64 / self.tessera_us) / (self.candle_bytes as f64 / self.candle_us)
    }
}

/// Builds the pair with `-C target-cpu=native` (as the anchor) and runs it.
pub fn run(root: &Path) -> Result<Vec<Pair>, String> {
    let src = root.join("xtask/candle-pair");
    let target = std::env::temp_dir().join("tessera-candle-pair");
    eprintln!(
        "bench-cpu: building the interleaved candle pair ({})",
        src.display()
    );
    let status = Command::new("cargo")
        .args(["build", "--release", "--quiet"])
        .current_dir(&src)
        .env("RUSTFLAGS", "-C target-cpu=native")
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("cargo build of xtask/candle-pair failed (it needs crates.io once)".into());
    }
    let bin = target.join("release/candle-pair");
    eprintln!("bench-cpu: running {}", bin.display());
    let out = Command::new(&bin)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let pairs: Vec<Pair> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(parse_line)
        .collect();
    if pairs.is_empty() {
        return Err(format!("{} printed no pair lines", bin.display()));
    }
    Ok(pairs)
}

/// `pair q4_k 4096x4096 candle_us 313.6 tessera_us 306.9 bytes 9437184 9437184 copies 28 calls 200`
fn parse_line(line: &str) -> Option<Pair> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let after = |key: &str, k: usize| -> Option<&str> {
        w.get(w.iter().position(|x| *x == key)? + k).copied()
    };
    if w.first() != Some(&"pair") {
        return None;
    }
    let (o, i) = w.get(2)?.split_once('x')?;
    Some(Pair {
        format: w.get(1)?.to_string(),
        shape: (o.parse().ok()?, i.parse().ok()?),
        candle_us: after("candle_us", 1)?.parse().ok()?,
        tessera_us: after("tessera_us", 1)?.parse().ok()?,
        tessera_4k_us: after("tessera_4k_us", 1).and_then(|v| v.parse().ok()),
        candle_bytes: after("bytes", 1)?.parse().ok()?,
        tessera_bytes: after("bytes", 2)?.parse().ok()?,
        calls: after("calls", 1)?.parse().ok()?,
    })
}

/// The pair table: issue 8's target is a speed ratio of at least 1 on every row.
pub fn render(pairs: &[Pair]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nInterleaved with candle (`xtask/candle-pair`: one call of each in alternation, same \
         process, same seconds; median of the calls; tessera on its int8-activation path, candle \
         on its own, both quantizing x inside the call). Tessera's copies are its own weight \
         buffers (`EncodedTensor::clone`: transparent huge pages where the kernel offers them, \
         `quant_core::memory`); the 4 KiB column times the same kernel on plain `Vec` copies, \
         the pages candle's buffers get:\n"
    );
    let _ = writeln!(
        t,
        "| shape [O x I] | format | calls each | candle | tessera | tessera / candle speed | issue 8 target met | tessera, 4 KiB pages | its speed / candle |"
    );
    let _ = writeln!(
        t,
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
    );
    for p in pairs {
        let r = p.speed_ratio();
        let small = p
            .tessera_4k_us
            .map_or("-".to_string(), |v| format!("{v:.0} us"));
        let small_ratio = p.tessera_4k_us.map_or("-".to_string(), |v| {
            format!("{:.2}x", p.speed_ratio() * p.tessera_us / v)
        });
        let _ = writeln!(
            t,
            "| {}x{} | {} | {} | {:.0} us | {:.0} us | {r:.2}x | {} | {small} | {small_ratio} |",
            p.shape.0,
            p.shape.1,
            p.format,
            p.calls,
            p.candle_us,
            p.tessera_us,
            if r >= 1.0 { "yes" } else { "no" }
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pair_lines() {
        let l = "pair q4_k 4096x4096 candle_us 313.6 tessera_us 306.9 tessera_4k_us 320.5 bytes 9437184 9437180 copies 28 calls 200";
        let p = parse_line(l).unwrap();
        assert_eq!(p.tessera_4k_us, Some(320.5));
        assert_eq!(p.format, "q4_k");
        assert_eq!(p.shape, (4096, 4096));
        assert_eq!((p.candle_us, p.tessera_us), (313.6, 306.9));
        assert_eq!(
            (p.candle_bytes, p.tessera_bytes, p.calls),
            (9437184, 9437180, 200)
        );
        assert!(parse_line("candle q4k O= 4096 I= 4096").is_none());
        assert!(parse_line("pair q4_k 4096 candle_us 1").is_none());
    }

    #[test]
    fn ratio_is_bytes_per_second_not_time() {
        let p = Pair {
            format: "q4_k".into(),
            shape: (1, 1),
            candle_us: 200.0,
            tessera_us: 100.0,
            tessera_4k_us: Some(400.0),
            candle_bytes: 1000,
            tessera_bytes: 1000,
            calls: 1,
        };
        assert_eq!(p.speed_ratio(), 2.0);
        assert!(render(&[p]).contains("| 2.00x | yes | 400 us | 0.50x |"));
    }
}
