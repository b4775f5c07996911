//! The interleaved pairs of `cargo xtask bench --backend cpu`: builds `xtask/candle-pair`
//! (its own workspace, since it needs candle from crates.io) and runs its two binaries:
//! `candle-pair` times candle's GGUF matvec and tessera's int8-activation GEMV call by call
//! in alternation (the issue-8 table), `read-pair` times tessera's GEMVs against a
//! streaming read of the same bytes (issue 2's share of read bandwidth, same seconds).
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

/// Where the pair crate is built.
fn target_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("tessera-candle-pair")
}

/// Builds the pair crate (both binaries) with `-C target-cpu=native`, as the anchor is.
fn build(root: &Path) -> Result<(), String> {
    let src = root.join("xtask/candle-pair");
    eprintln!(
        "bench-cpu: building the interleaved pairs ({})",
        src.display()
    );
    let status = Command::new("cargo")
        .args(["build", "--release", "--quiet"])
        .current_dir(&src)
        .env("RUSTFLAGS", "-C target-cpu=native")
        .env("CARGO_TARGET_DIR", target_dir())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("cargo build of xtask/candle-pair failed (it needs crates.io once)".into());
    }
    Ok(())
}

/// Runs one of the built binaries and parses its lines; an error when none parses.
fn run_bin<T>(name: &str, parse: fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    let bin = target_dir().join("release").join(name);
    eprintln!("bench-cpu: running {}", bin.display());
    let out = Command::new(&bin)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("{} failed: {}", bin.display(), stderr.trim()));
    }
    let rows: Vec<T> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(parse)
        .collect();
    if rows.is_empty() {
        return Err(format!(
            "{} printed no result lines: {}",
            bin.display(),
            stderr.trim()
        ));
    }
    Ok(rows)
}

/// Builds the pair crate and runs `candle-pair`.
pub fn run(root: &Path) -> Result<Vec<Pair>, String> {
    build(root)?;
    run_bin("candle-pair", parse_line)
}

/// One read-pair line: format, path, shape, the read's and tessera's median microseconds.
#[derive(Debug, PartialEq)]
pub struct ReadPair {
    pub format: String,
    pub path: String,
    pub shape: (usize, usize),
    pub read_us: f64,
    pub tessera_us: f64,
    pub bytes: u64,
    pub calls: usize,
}

/// Runs the already built `read-pair` (after [`run`] built the crate).
pub fn run_read() -> Result<Vec<ReadPair>, String> {
    run_bin("read-pair", parse_read_line)
}

/// `readpair int8-row int8-act 4096x4096 read_us 541.6 tessera_us 523.0 bytes 16793600 copies 16 calls 200`
fn parse_read_line(line: &str) -> Option<ReadPair> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let after =
        |key: &str| -> Option<&str> { w.get(w.iter().position(|x| *x == key)? + 1).copied() };
    if w.first() != Some(&"readpair") {
        return None;
    }
    let (o, i) = w.get(3)?.split_once('x')?;
    Some(ReadPair {
        format: w.get(1)?.to_string(),
        path: w.get(2)?.to_string(),
        shape: (o.parse().ok()?, i.parse().ok()?),
        read_us: after("read_us")?.parse().ok()?,
        tessera_us: after("tessera_us")?.parse().ok()?,
        bytes: after("bytes")?.parse().ok()?,
        calls: after("calls")?.parse().ok()?,
    })
}

/// The read-pair table: the GEMV's time as a share of a streaming read of its bytes.
pub fn render_read(rows: &[ReadPair], target: f64) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nInterleaved with a streaming read of the same bytes (`xtask/candle-pair` \
         `read-pair`: read_bw.c's loop on each thread's contiguous share of buffers exactly \
         the tensor's stored size, then the GEMV, call by call; median of the calls). The \
         share is read time / GEMV time, so 100% is the speed of reading the weights and \
         nothing else, in the same seconds:\n"
    );
    let _ = writeln!(
        t,
        "| shape [O x I] | format | path | calls each | read | tessera | share of the read | GB/s | {:.0}% reached |",
        100.0 * target
    );
    let _ = writeln!(
        t,
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"
    );
    for r in rows {
        let share = r.read_us / r.tessera_us;
        let _ = writeln!(
            t,
            "| {}x{} | {} | {} | {} | {:.0} us | {:.0} us | {:.0}% | {:.2} | {} |",
            r.shape.0,
            r.shape.1,
            r.format,
            r.path,
            r.calls,
            r.read_us,
            r.tessera_us,
            100.0 * share,
            r.bytes as f64 / r.tessera_us / 1e3,
            if share >= target { "yes" } else { "no" }
        );
    }
    t
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
    fn parses_read_pair_lines_and_shares() {
        let l = "readpair int8-row int8-act 4096x4096 read_us 540.0 tessera_us 600.0 bytes 16793600 copies 16 calls 200";
        let r = parse_read_line(l).unwrap();
        assert_eq!(
            (r.format.as_str(), r.path.as_str()),
            ("int8-row", "int8-act")
        );
        assert_eq!(
            (r.shape, r.read_us, r.tessera_us),
            ((4096, 4096), 540.0, 600.0)
        );
        assert!(parse_read_line(&l.replace("readpair", "pair")).is_none());
        let t = render_read(&[r], 0.85);
        assert!(t.contains("| 90% | 27.99 | yes |"), "{t}");
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
