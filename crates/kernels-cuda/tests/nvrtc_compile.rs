//! Every kernel build the capability table can ask for compiles under NVRTC for sm_90
//! (the H200), with and without each mutation. NVRTC needs no GPU: where libnvrtc is
//! present (e.g. from the `nvidia-cuda-nvrtc` wheel on LD_LIBRARY_PATH) this runs on any
//! machine; elsewhere it prints "skipped" and passes.

use kernels_cuda::caps::CAPABILITIES;
use kernels_cuda::compile::{self, ModuleKey, arch_of};
use kernels_cuda::Mutation;
use std::collections::HashSet;

#[test]
fn every_build_compiles_for_sm90() {
    if let Err(e) = compile::nvrtc_available() {
        println!("skipped: {e}");
        return;
    }
    let kernels: HashSet<_> = CAPABILITIES.iter().map(|c| (c.kernel, c.constraint)).collect();
    let mut n = 0;
    for (kernel, constraint) in kernels {
        for s in constraint.s_min..=constraint.s_max {
            let key = ModuleKey { kernel, s, arch: arch_of(9, 0), mutation: None };
            let ptx = compile::ptx(&key).unwrap_or_else(|e| panic!("{e}"));
            assert!(ptx.to_src().contains(&format!(".entry {}", key.function_name())), "{key:?}");
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
    for m in [Mutation::SwapNibbles, Mutation::GroupOffByOne, Mutation::Scale1Pct] {
        for c in CAPABILITIES {
            let key = ModuleKey { kernel: c.kernel, s: 3, arch: arch_of(9, 0), mutation: Some(m.define()) };
            compile::ptx(&key).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
