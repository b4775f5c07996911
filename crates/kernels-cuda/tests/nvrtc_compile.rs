//! Every kernel build the capability table can ask for compiles under NVRTC for sm_90
//! (the H200), with and without each mutation. NVRTC needs no GPU: where libnvrtc is
//! present (e.g. from the `nvidia-cuda-nvrtc` wheel on LD_LIBRARY_PATH) this runs on any
//! machine; elsewhere it prints "skipped" and passes.

use kernels_cuda::caps::{CAPABILITIES, KernelId, Op, fmt_id};
use kernels_cuda::compile::{self, Build, ModuleKey, PrepInput, Tuning, arch_of};
use kernels_cuda::{GemmPrecision, Mutation};
use std::collections::HashSet;

/// Every build a capability row can ask for, at one S per GEMV row (all S with `every_s`).
fn builds(every_s: bool) -> Vec<(KernelId, Build, usize)> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for c in CAPABILITIES {
        match c.op {
            Op::Gemv => {
                let ss: Vec<usize> = if every_s {
                    (c.constraint.s_min..=c.constraint.s_max).collect()
                } else {
                    vec![3]
                };
                for s in ss {
                    let mut b = vec![Build::Gemv];
                    b.extend(c.mma.map(Build::GemvMma));
                    // The 16-row GEMV's group-class chunk where S allows it.
                    b.extend(c.mma.and_then(|m| {
                        let w = kernels_cuda::caps::rows_chunk(c.kernel, m, s, 64);
                        (w != m).then_some(Build::GemvMma(w))
                    }));
                    // The persistent twins (S <= 4), both chunks.
                    if s <= 4 {
                        b.extend(c.mma.map(Build::GemvMmaPersist));
                        b.extend(c.mma.and_then(|m| {
                            let w = kernels_cuda::caps::rows_chunk(c.kernel, m, s, 64);
                            (w != m).then_some(Build::GemvMmaPersist(w))
                        }));
                    }
                    // The split-K tile GEMV at this S's n8 tiles (its key has s = 0).
                    b.extend(c.mma.map(|mma| Build::GemvTiles {
                        mma,
                        nt: (2 * s).div_ceil(8).next_power_of_two() as u32,
                    }));
                    for build in b {
                        let s = if matches!(build, Build::GemvTiles { .. }) {
                            0
                        } else {
                            s
                        };
                        if seen.insert((c.kernel, build.clone(), s)) {
                            out.push((c.kernel, build, s));
                        }
                    }
                }
            }
            Op::Gemm => {
                let mma = c.mma.expect("every GEMM row has a tensor-core kernel");
                let mut builds: Vec<Build> = GemmPrecision::ALL
                    .map(|p| p.gemm_build(mma, c.kernel.fmt))
                    .to_vec();
                if kernels_cuda::caps::dequantizes(c.kernel.fmt) {
                    builds.push(Build::GemmRowPow { mma });
                }
                for build in builds {
                    if seen.insert((c.kernel, build.clone(), 0)) {
                        out.push((c.kernel, build, 0));
                    }
                }
            }
        }
    }
    // The resident tile GEMV's activation preparation, for every tensor-core chunk.
    for (chunk_bytes, nibbles) in [(16, true), (8, true), (4, true), (16, false)] {
        for rows in [false, true] {
            let zero = KernelId { fmt: 0, group: 0 };
            // One module exports both inputs' kernels; the engine's fused norm runs on the
            // 16-row layout only.
            let inputs: &[PrepInput] = if rows {
                &[PrepInput::Plain, PrepInput::Norm]
            } else {
                &[PrepInput::Plain]
            };
            for &input in inputs {
                out.push((
                    zero,
                    Build::TilePrep {
                        chunk_bytes,
                        nibbles,
                        rows,
                        input,
                    },
                    0,
                ));
            }
        }
    }
    // A MoE module over a mix of every kernel family.
    let variants = vec![
        KernelId {
            fmt: fmt_id::INT4_G,
            group: 64,
        },
        KernelId {
            fmt: fmt_id::FP8_F32,
            group: 0,
        },
        KernelId {
            fmt: fmt_id::MQ4_V2,
            group: 0,
        },
        KernelId {
            fmt: fmt_id::MQ4K,
            group: 0,
        },
        KernelId {
            fmt: fmt_id::E8,
            group: 0,
        },
    ];
    out.push((variants[0], Build::Moe { variants }, 4));
    out
}

fn key(kernel: KernelId, build: Build, s: usize, mutation: Option<&'static str>) -> ModuleKey {
    ModuleKey {
        kernel,
        build,
        s,
        arch: arch_of(9, 0),
        mutation,
        tuning: Tuning::default(),
    }
}

#[test]
fn every_build_compiles_for_sm90() {
    if let Err(e) = compile::nvrtc_available() {
        println!("skipped: {e}");
        return;
    }
    let mut n = 0;
    for (kernel, build, s) in builds(true) {
        let key = key(kernel, build, s, None);
        let ptx = compile::ptx(&key).unwrap_or_else(|e| panic!("{e}"));
        let src = ptx.to_src();
        assert!(
            src.contains(&format!(".entry {}", key.function_name())),
            "{key:?}"
        );
        // TESSERA_PTX_DUMP=<dir>: keep the PTX, e.g. for `ptxas -v` register counts.
        if let Ok(dir) = std::env::var("TESSERA_PTX_DUMP") {
            let tag = match &key.build {
                Build::Gemv => String::new(),
                Build::GemvMma(m) => format!("_mma{}", m.chunk_bytes),
                Build::GemvMmaPersist(m) => format!("_mmapersist{}", m.chunk_bytes),
                Build::Gemm {
                    mma,
                    parts,
                    dequant,
                } => format!("_gemm{}_p{parts}_dq{}", mma.chunk_bytes, u8::from(*dequant)),
                Build::GemmRowPow { mma } => format!("_rowpow{}", mma.chunk_bytes),
                Build::GemvTiles { mma, nt } => format!("_tiles{}_nt{nt}", mma.chunk_bytes),
                Build::TilePrep {
                    chunk_bytes,
                    nibbles,
                    rows,
                    input,
                } => format!(
                    "_prep{chunk_bytes}_{nibbles}_{rows}_{}",
                    input.function_name()
                ),
                Build::Moe { .. } => "_moe".to_string(),
            };
            let name = format!("fmt{}_g{}{tag}_s{}.ptx", kernel.fmt, kernel.group, key.s);
            std::fs::write(std::path::Path::new(&dir).join(name), &src).expect("write PTX");
        }
        n += 1;
    }
    // The issue formats' GEMM both ways at both precisions: the warpgroup MMA (sm_90a, the
    // default on sm_90, so the loop above built it too) and `mma.sync` (other devices, and
    // `TESSERA_CUDA_WGMMA=0`); row-scaled and scaled (a second accumulator) alike.
    for (fmt, group, chunk_bytes) in [
        (fmt_id::INT4_ROW, 0, 16),
        (fmt_id::INT8_ROW, 0, 16),
        (fmt_id::INT4_G, 64, 8),
        (fmt_id::FP8_F32, 0, 16),
        (fmt_id::MQ4_V2, 0, 16),
    ] {
        for precision in GemmPrecision::ALL {
            for wgmma in [true, false] {
                let mut key = key(
                    KernelId { fmt, group },
                    precision.gemm_build(kernels_cuda::caps::MmaKernel { chunk_bytes }, fmt),
                    0,
                    None,
                );
                key.tuning.gemm_wgmma = wgmma;
                key.tuning.gemm_wgmma_scaled = true;
                let options = key.options();
                assert_eq!(
                    options.contains(&"-DTS_WGMMA".to_string()),
                    wgmma,
                    "{key:?}"
                );
                assert_eq!(options[0].ends_with("sm_90a"), wgmma, "{key:?}");
                let src = compile::ptx(&key)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .to_src();
                assert_eq!(src.contains("wgmma.mma_async"), wgmma, "{key:?}");
                n += 1;
            }
        }
    }
    println!("{n} builds compiled");
}

#[test]
fn mutated_builds_compile() {
    if let Err(e) = compile::nvrtc_available() {
        println!("skipped: {e}");
        return;
    }
    for m in [
        Mutation::SwapNibbles,
        Mutation::GroupOffByOne,
        Mutation::Scale1Pct,
        Mutation::SplitSum,
    ] {
        for (kernel, build, s) in builds(false) {
            compile::ptx(&key(kernel, build, s, Some(m.define())))
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// Times one build of each kernel family at S = 1 and 16 (for docs/CUDA.md's estimate of a
/// device run's compile time). Skipped without NVRTC.
#[test]
fn compile_time_sample() {
    if let Err(e) = compile::nvrtc_available() {
        println!("skipped: {e}");
        return;
    }
    for c in CAPABILITIES
        .iter()
        .filter(|c| c.kernel.group == 0 || c.kernel.group == 64)
    {
        let builds: Vec<(Build, usize)> = match c.op {
            Op::Gemv => [1, 16]
                .into_iter()
                .map(|s| (c.mma.map_or(Build::Gemv, Build::GemvMma), s))
                .collect(),
            Op::Gemm => c
                .mma
                .map(|mma| {
                    (
                        Build::Gemm {
                            mma,
                            parts: 2,
                            dequant: false,
                        },
                        0,
                    )
                })
                .into_iter()
                .collect(),
        };
        for (build, s) in builds {
            // A mutation symbol nobody tests for makes a build the cache has not seen.
            let key = key(c.kernel, build, s, Some("TS_TIMING_SAMPLE"));
            let t = std::time::Instant::now();
            compile::ptx(&key).unwrap_or_else(|e| panic!("{e}"));
            println!(
                "{:<22} {:?} {} S={s:<2} {:.2} s",
                c.format,
                c.op,
                key.function_name(),
                t.elapsed().as_secs_f64()
            );
        }
    }
}
