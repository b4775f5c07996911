//! NVRTC compilation of `shaders/cuda/gemv.cu`, cached per process.
//!
//! A module is one (format kernel, S, GPU architecture, mutation) build: the source is
//! compiled on first use with `-DTS_FMT`, `-DTS_GS`, `-DTS_S` and
//! `--gpu-architecture=sm_XY` from the device's compute capability, and the PTX is kept in
//! a process-wide map, so every later launch of the same build is a hash lookup.

use crate::caps::{KernelId, MmaKernel};
use crate::error::CudaError;
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The GEMV kernel source, embedded at build time.
pub const GEMV_SOURCE: &str = include_str!("../../../shaders/cuda/gemv.cu");

/// A deliberate defect compiled into the kernels, to show that the conformance test bites
/// (issue 4 §3). Only this crate's tests enable the `mutation-test` feature.
#[cfg(feature = "mutation-test")]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// Low and high nibbles of every byte swapped.
    SwapNibbles,
    /// Every group / tile / block scale read from the next group.
    GroupOffByOne,
    /// Every scale multiplied by 1.01.
    Scale1Pct,
}

#[cfg(feature = "mutation-test")]
impl Mutation {
    /// Parses the `TESSERA_CUDA_MUTATE` spelling: swap-nibbles, group-off-by-one, scale-1pct.
    pub fn parse(name: &str) -> Option<Mutation> {
        match name {
            "swap-nibbles" => Some(Mutation::SwapNibbles),
            "group-off-by-one" => Some(Mutation::GroupOffByOne),
            "scale-1pct" => Some(Mutation::Scale1Pct),
            _ => None,
        }
    }

    /// The preprocessor symbol gemv.cu tests for.
    pub fn define(self) -> &'static str {
        match self {
            Mutation::SwapNibbles => "TS_MUTATE_SWAP_NIBBLES",
            Mutation::GroupOffByOne => "TS_MUTATE_GROUP_OFF_BY_ONE",
            Mutation::Scale1Pct => "TS_MUTATE_SCALE_1PCT",
        }
    }
}

/// Identity of one compiled module.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModuleKey {
    pub kernel: KernelId,
    /// The tensor-core build (`-DTS_MMA=<chunk bytes>`, exporting `gemv_mma_s<S>`), or the
    /// CUDA-core one (`gemv_s<S>`).
    pub mma: Option<MmaKernel>,
    pub s: usize,
    /// `sm_XY`.
    pub arch: String,
    /// The `TS_MUTATE_*` symbol, if any (never set outside mutation tests).
    pub mutation: Option<&'static str>,
}

impl ModuleKey {
    /// The kernel's exported name.
    pub fn function_name(&self) -> String {
        match self.mma {
            Some(_) => format!("gemv_mma_s{}", self.s),
            None => format!("gemv_s{}", self.s),
        }
    }

    /// NVRTC options of this build.
    pub fn options(&self) -> Vec<String> {
        let mut o = vec![
            format!("--gpu-architecture={}", self.arch),
            "-std=c++17".to_string(),
            format!("-DTS_FMT={}", self.kernel.fmt),
            format!("-DTS_GS={}", self.kernel.group),
            format!("-DTS_S={}", self.s),
        ];
        if let Some(m) = self.mma {
            o.push(format!("-DTS_MMA={}", m.chunk_bytes));
        }
        if let Some(m) = self.mutation {
            o.push(format!("-D{m}"));
        }
        o
    }

    fn describe(&self) -> String {
        format!("gemv.cu [{}]", self.options().join(" "))
    }
}

/// `sm_XY` of a compute capability (H200: 9.0 -> sm_90).
pub fn arch_of(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// `Ok` when libnvrtc can be opened (no GPU needed to compile), else why not.
pub fn nvrtc_available() -> Result<(), CudaError> {
    // SAFETY: only dlopens libnvrtc by its standard names and closes it; no symbol is called.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::Unavailable {
            why: "no NVRTC: libnvrtc.so not found".into(),
        })
    }
}

fn cache() -> &'static Mutex<HashMap<ModuleKey, Ptx>> {
    static PTX: OnceLock<Mutex<HashMap<ModuleKey, Ptx>>> = OnceLock::new();
    PTX.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The PTX of `key`, compiled on first use. The lock is not held while NVRTC runs, so
/// [`prewarm`] compiles in parallel; two threads racing for one build both compile it and
/// keep either result (they are identical).
pub fn ptx(key: &ModuleKey) -> Result<Ptx, CudaError> {
    // A poisoned lock only means another thread panicked mid-insert; the map is still valid.
    if let Some(p) = cache().lock().unwrap_or_else(|p| p.into_inner()).get(key) {
        return Ok(p.clone());
    }
    let opts = CompileOptions {
        options: key.options(),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(GEMV_SOURCE, opts).map_err(|e| CudaError::Compile {
        module: key.describe(),
        log: match e {
            CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            other => format!("{other:?}"),
        },
    })?;
    cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone(), ptx.clone());
    Ok(ptx)
}

/// Compiles `keys` on all cores (NVRTC is thread-safe), so a run that will need many
/// builds pays for them once, in parallel, up front.
pub fn prewarm(keys: &[ModuleKey]) -> Result<(), CudaError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(keys.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let first_error: Mutex<Option<CudaError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(key) = keys.get(k) else { break };
                    if let Err(e) = ptx(key) {
                        first_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                    }
                }
            });
        }
    });
    match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::fmt_id;

    #[test]
    fn options_name_the_build() {
        let key = ModuleKey {
            kernel: KernelId {
                fmt: fmt_id::INT4_G,
                group: 64,
            },
            mma: None,
            s: 3,
            arch: arch_of(9, 0),
            mutation: None,
        };
        assert_eq!(key.function_name(), "gemv_s3");
        assert_eq!(
            key.options(),
            [
                "--gpu-architecture=sm_90",
                "-std=c++17",
                "-DTS_FMT=6",
                "-DTS_GS=64",
                "-DTS_S=3"
            ]
        );
    }

    /// The source's format ids are the ones caps.rs launches with.
    #[test]
    fn source_ids_match_the_table() {
        let ids = [
            ("TS_FMT_F32", fmt_id::F32),
            ("TS_FMT_F16", fmt_id::F16),
            ("TS_FMT_BF16", fmt_id::BF16),
            ("TS_FMT_INT8_ROW", fmt_id::INT8_ROW),
            ("TS_FMT_INT4_ROW", fmt_id::INT4_ROW),
            ("TS_FMT_INT2_ROW", fmt_id::INT2_ROW),
            ("TS_FMT_INT4_G", fmt_id::INT4_G),
            ("TS_FMT_INT3_G64", fmt_id::INT3_G64),
            ("TS_FMT_E8", fmt_id::E8),
            ("TS_FMT_FP8_F32", fmt_id::FP8_F32),
            ("TS_FMT_FP8_UE8M0", fmt_id::FP8_UE8M0),
            ("TS_FMT_HFQ4", fmt_id::HFQ4),
            ("TS_FMT_MQ4_V2", fmt_id::MQ4_V2),
            ("TS_FMT_MQ4C", fmt_id::MQ4C),
            ("TS_FMT_MQ4K", fmt_id::MQ4K),
            ("TS_FMT_MXFP4", fmt_id::MXFP4),
        ];
        for (name, id) in ids {
            let line = format!("#define {name} {id}\n");
            assert!(
                GEMV_SOURCE.contains(&line),
                "gemv.cu lacks `{}`",
                line.trim()
            );
        }
        // The rows-per-warp rule of the source is layout::rows_per_warp's.
        assert!(GEMV_SOURCE.contains("enum { R = S <= 4 ? 2 : 4 };"));
        assert!(GEMV_SOURCE.contains("__launch_bounds__(128)"));
    }

    #[cfg(feature = "mutation-test")]
    #[test]
    fn mutations_exist_in_the_source_and_are_off_by_default() {
        for m in [
            Mutation::SwapNibbles,
            Mutation::GroupOffByOne,
            Mutation::Scale1Pct,
        ] {
            assert!(
                GEMV_SOURCE.contains(&format!("#ifdef {}", m.define())),
                "{m:?}"
            );
        }
        assert_eq!(Mutation::parse("scale-1pct"), Some(Mutation::Scale1Pct));
        assert_eq!(Mutation::parse("nope"), None);
    }
}
