//! One benchmark run of one backend as data: `docs/perf/<backend>.json`.
//!
//! Every bench (`bench-cpu`, the GPU tiers' `bench_gemv` examples run on the GPU machine)
//! writes this record, so the PERF.md tables and the SVG plots are drawn from the same
//! numbers and a GPU run made elsewhere can be brought home as a file. A record holds the
//! ceiling (read bandwidth or a device-to-device copy) and the peers measured in the same run:
//! a figure without its same-run ceiling is not a figure we publish.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Ceiling {
    /// What was measured ("read_bw.c, 2 threads", "cudaMemcpy D2D 1 GiB").
    pub name: String,
    pub gbps: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Point {
    /// "OxI", e.g. "6144x16384".
    pub shape: String,
    /// Time per call in microseconds.
    pub us: f64,
    /// Weight bytes moved per second, in GB/s (1e9).
    pub gbps: f64,
}

#[derive(Copy, Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A tessera kernel.
    Ours,
    /// A peer measured in the same run (candle, torch, cuBLAS).
    Peer,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Series {
    /// Format name, optionally with the path ("int4-g64", "q4_k int8-act", "candle q4k").
    pub label: String,
    pub kind: Kind,
    /// Activation batch.
    pub s: usize,
    pub points: Vec<Point>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// "cpu", "cuda", "wgpu", "vulkan".
    pub backend: String,
    /// The machine and device ("AMD EPYC, 2 cores", "NVIDIA H200 (Vulkan, driver ...)").
    pub device: String,
    /// UTC date and time of the run.
    pub date: String,
    /// The command that reproduces it.
    pub command: String,
    pub ceiling: Ceiling,
    pub series: Vec<Series>,
}

/// `docs/perf/<backend>.json`.
pub fn path(root: &Path, backend: &str) -> PathBuf {
    root.join("docs/perf").join(format!("{backend}.json"))
}

pub fn read(file: &Path) -> Result<Record, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let r: Record =
        serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", file.display()))?;
    validate(&r).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(r)
}

pub fn write(root: &Path, r: &Record) -> Result<PathBuf, String> {
    validate(r)?;
    let file = path(root, &r.backend);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(r).map_err(|e| e.to_string())? + "\n";
    std::fs::write(&file, text).map_err(|e| format!("writing {}: {e}", file.display()))?;
    Ok(file)
}

/// Every record under docs/perf/, sorted by backend name.
pub fn read_all(root: &Path) -> Result<Vec<Record>, String> {
    let dir = root.join("docs/perf");
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(_) => return Ok(out),
    };
    for e in entries {
        let p = e.map_err(|e| e.to_string())?.path();
        if p.extension().is_some_and(|x| x == "json") {
            out.push(read(&p)?);
        }
    }
    out.sort_by(|a, b| a.backend.cmp(&b.backend));
    Ok(out)
}

/// A record must carry its same-run ceiling and finite, positive figures.
fn validate(r: &Record) -> Result<(), String> {
    if !(r.ceiling.gbps.is_finite() && r.ceiling.gbps > 0.0) {
        return Err(format!("ceiling {:?} is not a positive figure", r.ceiling));
    }
    for s in &r.series {
        for p in &s.points {
            if !(p.gbps.is_finite() && p.gbps > 0.0 && p.us.is_finite() && p.us > 0.0) {
                return Err(format!("{} at {}: bad figure {p:?}", s.label, p.shape));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            backend: "cpu".into(),
            device: "test".into(),
            date: "2026-11-30".into(),
            command: "cargo xtask bench".into(),
            ceiling: Ceiling {
                name: "read".into(),
                gbps: 30.0,
            },
            series: vec![Series {
                label: "int8-row".into(),
                kind: Kind::Ours,
                s: 1,
                points: vec![Point {
                    shape: "4096x4096".into(),
                    us: 700.0,
                    gbps: 24.0,
                }],
            }],
        }
    }

    #[test]
    fn round_trips_through_json() {
        let r = sample();
        let text = serde_json::to_string(&r).unwrap();
        let back: Record = serde_json::from_str(&text).unwrap();
        assert_eq!(r, back);
    }

    #[test]
    fn rejects_a_record_without_a_ceiling() {
        let mut r = sample();
        r.ceiling.gbps = 0.0;
        assert!(validate(&r).is_err());
        let mut r = sample();
        r.series[0].points[0].gbps = f64::NAN;
        assert!(validate(&r).is_err());
        assert!(validate(&sample()).is_ok());
    }
}
