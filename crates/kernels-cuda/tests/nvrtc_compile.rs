//! Every kernel build the capability table can ask for compiles under NVRTC for sm_90
//! (the H200), with and without each mutation. NVRTC needs no GPU: where libnvrtc is
//! present (e.g. from the `nvidia-cuda-nvrtc` wheel on LD_LIBRARY_PATH) this runs on any
//! machine; elsewhere it prints "skipped" and passes.

use kernels_cuda::Mutation;
use kernels_cuda::caps::CAPABILITIES;
use kernels_cuda::compile::{self, ModuleKey, arch_of};
use std::collections::HashSet;

#[test]
fn every_build_compiles_for_sm90() {
    if let Err(e) = compile::nvrtc_available() {
        println!("skipped: {e}");
        return;
    }
    let kernels: HashSet<_> = CAPABILITIES
        .iter()
        .flat_map(|c| {
            [
                (c.kernel, None, c.constraint),
                (c.kernel, c.mma, c.constraint),
            ]
        })
        .collect();
    let mut n = 0;
    for (kernel, mma, constraint) in kernels {
        for s in constraint.s_min..=constraint.s_max {
            let key = ModuleKey {
                kernel,
                mma,
                s,
                arch: arch_of(9, 0),
                mutation: None,
            };
            let ptx = compile::ptx(&key).unwrap_or_else(|e| panic!("{e}"));
            let src = ptx.to_src();
            assert!(
                src.contains(&format!(".entry {}", key.function_name())),
                "{key:?}"
            );
            // TESSERA_PTX_DUMP=<dir>: keep the PTX, e.g. for `ptxas -v` register counts.
            if let Ok(dir) = std::env::var("TESSERA_PTX_DUMP") {
                let tag = mma.map_or(String::new(), |m| format!("_mma{}", m.chunk_bytes));
                let name = format!("fmt{}_g{}{tag}_s{s}.ptx", kernel.fmt, kernel.group);
                std::fs::write(std::path::Path::new(&dir).join(name), &src).expect("write PTX");
            }
            n += 1;
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
    ] {
        for (c, mma) in CAPABILITIES.iter().flat_map(|c| [(c, None), (c, c.mma)]) {
            let key = ModuleKey {
                kernel: c.kernel,
                mma,
                s: 3,
                arch: arch_of(9, 0),
                mutation: Some(m.define()),
            };
            compile::ptx(&key).unwrap_or_else(|e| panic!("{e}"));
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
        for s in [1, 16] {
            // A mutation symbol nobody tests for makes a build the cache has not seen.
            let key = ModuleKey {
                kernel: c.kernel,
                mma: c.mma,
                s,
                arch: arch_of(9, 0),
                mutation: Some("TS_TIMING_SAMPLE"),
            };
            let t = std::time::Instant::now();
            compile::ptx(&key).unwrap_or_else(|e| panic!("{e}"));
            println!(
                "{:<22} S={s:<2} {:.2} s",
                c.format,
                t.elapsed().as_secs_f64()
            );
        }
    }
}
