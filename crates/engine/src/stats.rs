//! Run statistics: which path each layer took and how many GEMVs fell back to the CPU, per
//! op and reason, printed as the end-of-run summary. A fallback is always counted, never
//! silent; work the CPU backend was asked to do is not a fallback.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Counters of one run.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// (op, reason) -> GEMV calls that ran on the CPU instead of the chosen backend.
    pub fallbacks: BTreeMap<(String, String), u64>,
    /// GEMV calls that ran on the chosen backend.
    pub backend_gemvs: u64,
    /// Forward passes through a layer, by path name.
    pub layer_runs: BTreeMap<&'static str, u64>,
}

impl Stats {
    pub fn fallback(&mut self, op: &str, reason: &str) {
        *self
            .fallbacks
            .entry((op.to_string(), reason.to_string()))
            .or_default() += 1;
    }

    /// Total fallback GEMVs.
    pub fn total_fallbacks(&self) -> u64 {
        self.fallbacks.values().sum()
    }

    /// The end-of-run summary, one item a line.
    /// `fused_note` says why a backend with a fused path did not use it for this model.
    pub fn summary(
        &self,
        backend: &str,
        fused_implemented: bool,
        fused_note: Option<&str>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let mut paths = String::new();
        for (k, n) in &self.layer_runs {
            let _ = write!(paths, "{}{k} {n}", if paths.is_empty() { "" } else { ", " });
        }
        out.push(format!(
            "layer passes on {backend}: {}{}",
            if paths.is_empty() { "none" } else { &paths },
            if backend == "cpu" {
                String::new()
            } else if fused_implemented {
                fused_note.map_or(String::new(), |n| format!(" ({n})"))
            } else {
                format!(" (the fused one-submission layer path is not implemented for {backend})")
            }
        ));
        if self.fallbacks.is_empty() {
            out.push(format!(
                "CPU fallbacks: none ({} GEMVs on {backend})",
                self.backend_gemvs
            ));
        } else {
            out.push(format!(
                "CPU fallbacks: {} GEMVs ({} on {backend}):",
                self.total_fallbacks(),
                self.backend_gemvs
            ));
            for ((op, why), n) in &self.fallbacks {
                out.push(format!("  {op}: {n} ({why})"));
            }
        }
        out
    }
}
