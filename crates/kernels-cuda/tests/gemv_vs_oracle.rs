//! The CUDA conformance suite, run on a GPU: every GEMV format of the capability table at
//! S in {1, 2, 3, 4, 8, 16} (and 1..=16 for a few), every GEMM format at S in {17, 40, 128,
//! 300} and every precision, the MoE grouped GEMV per pair over mixed formats; edge shapes,
//! fresh random data (the seed is printed; `TESSERA_SEED` replays it), outputs poisoned
//! before each launch, compared with quant-core's f64 oracle at magnitude-relative error
//! <= 1e-4 (the GEMM's opt-in `GemmPrecision::F16` and `F16Dequant`: their declared 5e-4
//! and 1.5e-3).
//!
//! Without a GPU every test prints "skipped: no CUDA device: <why>" and passes.
//!
//! Mutation runs (docs/CUDA.md): `TESSERA_CUDA_MUTATE=swap-nibbles|group-off-by-one|scale-1pct`
//! compiles the kernels with that defect; the suite must then fail.
//! `TESSERA_FORMATS=name1,name2` narrows the formats.

mod common;

use common::{
    S_LIST, assert_ran_clean, check, check_at, format_rng, formats_under_test,
    gemm_formats_under_test, gemm_shapes, inputs, run_seed, shapes, tensor,
};
use kernels_cuda::caps::{self, Op};
use kernels_cuda::{
    CudaBackend, CudaError, DeviceTensor, GemmPrecision, KernelPath, Mutation, Tuning,
};
use quant_core::testdata::Rng;
use quant_core::{EncodedTensor, Format};
use std::sync::OnceLock;

/// Formats run at every S in 1..=16 (the others at S_LIST).
const EVERY_BATCH_FORMATS: [Format; 5] = [
    Format::Int4G64,
    Format::Int8Row,
    Format::Fp8E4m3B128,
    Format::Mq4G256V2,
    Format::F16,
];

/// Runs a prewarm, printing its time; a compile error fails the test.
fn warm(f: impl FnOnce() -> Result<(), CudaError>) {
    let t = std::time::Instant::now();
    f().unwrap_or_else(|e| panic!("{e}"));
    println!("NVRTC builds ready in {:.1} s", t.elapsed().as_secs_f64());
}

/// The process's backend, or None (after printing why) when there is no GPU.
fn backend() -> Option<&'static CudaBackend> {
    static B: OnceLock<Result<CudaBackend, CudaError>> = OnceLock::new();
    let b = B.get_or_init(|| match std::env::var("TESSERA_CUDA_MUTATE") {
        Ok(name) if !name.is_empty() => {
            let m = Mutation::parse(&name)
                .unwrap_or_else(|| panic!("TESSERA_CUDA_MUTATE={name}: expected swap-nibbles, group-off-by-one, scale-1pct or split-sum"));
            println!("MUTATION {name}: the kernels carry a deliberate defect; this run must fail");
            CudaBackend::with_mutation(m)
        }
        _ => CudaBackend::new(),
    });
    match b {
        Ok(b) => Some(b),
        Err(CudaError::Unavailable { why }) => {
            println!("skipped: {why}");
            None
        }
        Err(e) => panic!("CUDA backend: {e}"),
    }
}

/// The backend's tuning without group classes, programmatic dependent launch, the L2
/// prefetch hint and the wide small-grid blocks (session 3's kernel, still selectable).
fn plain_rows(b: &CudaBackend) -> Tuning {
    Tuning {
        mma_classes: false,
        pdl: false,
        mma_l2_prefetch: 0,
        mma_small_grid_warps: None,
        ..b.tuning().clone()
    }
}

/// The backend's tuning with the 16-row GEMV on the persistent grid at S <= 4
/// (`Tuning::mma_persistent`), on the device's resident blocks (`grid` 0) or at most `grid`
/// blocks (a few: tiles split between blocks), with programmatic dependent launch or
/// without.
fn persist_rows(b: &CudaBackend, grid: u32, pdl: bool) -> Tuning {
    Tuning {
        mma_persistent: Some(true),
        mma_persist_grid: grid,
        pdl,
        ..b.tuning().clone()
    }
}

/// Compiles up front, on all cores, the GEMV builds `run` needs at `batches`: the
/// backend's and `plain_rows`' everywhere, the persistent ones at S <= 4 (where `run`
/// checks them: the persistent grid serves small S).
fn warm_gemv(b: &CudaBackend, formats: &[Format], batches: &[usize]) {
    warm(|| b.prewarm_tuned(formats, batches, &[b.tuning().clone(), plain_rows(b)]));
    let small: Vec<usize> = batches.iter().copied().filter(|&s| s <= 4).collect();
    warm(|| {
        b.prewarm_tuned(
            formats,
            &small,
            &[persist_rows(b, 0, true), persist_rows(b, 3, false)],
        )
    });
}

/// y of one GEMV through `path` with `tuning`'s kernels, into a poisoned output.
fn gemv_tuned(
    b: &CudaBackend,
    dt: &DeviceTensor,
    x: &[f32],
    s: usize,
    path: KernelPath,
    tuning: &Tuning,
) -> Result<Vec<f32>, CudaError> {
    let xa = b.upload_activations(dt, x, s)?;
    let mut y = b.poisoned_output(dt, s)?;
    b.gemv_launch_tuned(dt, &xa, &mut y, path, tuning)?;
    b.stream().clone_dtoh(&y).map_err(|e| CudaError::Driver {
        during: "reading the output",
        detail: format!("{e:?}"),
    })
}

fn run(
    b: &CudaBackend,
    format: Format,
    shapes: &[(usize, usize)],
    batches: &[usize],
    seed: u64,
) -> (f64, Vec<String>) {
    let mut rng = format_rng(seed, format);
    let mut worst = 0f64;
    let mut failures = Vec::new();
    for &(rows, cols) in shapes {
        let t = tensor(format, rows, cols, &mut rng);
        let dt = b
            .upload(&t.view())
            .unwrap_or_else(|e| panic!("upload {format}: {e}"));
        for &s in batches {
            let x = inputs(s, cols, &mut rng);
            // Where the tensor cores take the shape, every kernel is checked: the CUDA-core
            // one, the 16-row tensor-core GEMV and the split-K tile GEMV (Auto is one of them).
            let mut paths = vec![KernelPath::Auto];
            if dt.uses_tensor_cores(s) {
                paths.extend([
                    KernelPath::CudaCores,
                    KernelPath::MmaRows,
                    KernelPath::MmaTiles,
                ]);
            }
            for path in paths {
                let y = b
                    .gemv_path(&dt, &x, s, path)
                    .unwrap_or_else(|e| panic!("{format} [{rows}, {cols}] S={s}: {e}"));
                match check(&t, &x, s, &y) {
                    Ok(e) => worst = worst.max(e),
                    Err(msg) => failures.push(format!("{msg} ({path:?})")),
                }
            }
            // The 16-row GEMV as session 3 launched it too: the format's own chunk (no group
            // classes) and a plain launch (no programmatic dependent launch).
            if dt.uses_tensor_cores(s) {
                let y = gemv_tuned(b, &dt, &x, s, KernelPath::MmaRows, &plain_rows(b))
                    .unwrap_or_else(|e| panic!("{format} [{rows}, {cols}] S={s}: {e}"));
                match check(&t, &x, s, &y) {
                    Ok(e) => worst = worst.max(e),
                    Err(msg) => failures.push(format!("{msg} (MmaRows, own chunk, plain launch)")),
                }
                // The persistent grid at S <= 4: the device's resident blocks with PDL, and 3
                // blocks with a plain launch (tiles split between blocks: partials, arrival
                // counters, their reuse by the next launch).
                let persists: &[(u32, bool)] = if s <= 4 {
                    &[(0, true), (3, false)]
                } else {
                    &[]
                };
                for &(g, pdl) in persists {
                    let y =
                        gemv_tuned(b, &dt, &x, s, KernelPath::MmaRows, &persist_rows(b, g, pdl))
                            .unwrap_or_else(|e| panic!("{format} [{rows}, {cols}] S={s}: {e}"));
                    match check(&t, &x, s, &y) {
                        Ok(e) => worst = worst.max(e),
                        Err(msg) => failures.push(format!("{msg} (MmaRows, persistent grid {g})")),
                    }
                }
            }
        }
    }
    (worst, failures)
}

#[test]
fn every_format_matches_the_oracle() {
    let Some(b) = backend() else { return };
    let seed = run_seed();
    println!(
        "device {} ({}), seed {seed} (replay with TESSERA_SEED={seed})",
        b.device_name(),
        b.arch()
    );
    // Each test compiles exactly its own builds, on all cores, before it starts (a mutation
    // run executes one or two tests, and should not compile the others' builds).
    warm_gemv(b, &formats_under_test(), &S_LIST);
    let mut failures = Vec::new();
    for format in formats_under_test() {
        let (worst, f) = run(b, format, &shapes(format), &S_LIST, seed);
        println!(
            "{format:<22} worst error {worst:.2e}{}",
            if f.is_empty() { "" } else { "  FAILED" }
        );
        failures.extend(f);
    }
    assert!(
        failures.is_empty(),
        "{} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `gemv_launch_resident` (activations already on the device, in the stored domain: the
/// engine's decode path) against the oracle, for every format at S = 1, 2, 4 and 16: on the
/// tensor-core shapes `tile_prep`, then the GEMV `Auto` picks (at S <= 4 once more with the
/// 16-row GEMV on a persistent grid of 5 blocks); elsewhere the CUDA-core kernel.
#[test]
fn resident_launch_matches_the_oracle() {
    let Some(b) = backend() else { return };
    let seed = run_seed();
    println!("seed {seed}");
    let batches = [1, 2, 4, 16];
    let default = b.tuning().clone();
    // tile_prep, then the 16-row GEMV on a persistent grid of 5 blocks, at S <= 4.
    let persist = Tuning {
        mma_persistent: Some(true),
        mma_persist_grid: 5,
        ..b.tuning().clone()
    };
    warm(|| {
        b.prewarm_tuned(
            &formats_under_test(),
            &batches,
            &[default.clone(), persist.clone()],
        )
    });
    let mut failures = Vec::new();
    for format in formats_under_test() {
        let mut rng = format_rng(seed ^ 0x7E51, format);
        let mut worst = 0f64;
        for &(rows, cols) in shapes(format).iter().take(4) {
            let t = tensor(format, rows, cols, &mut rng);
            let dt = b
                .upload(&t.view())
                .unwrap_or_else(|e| panic!("upload {format}: {e}"));
            for s in batches {
                let x = inputs(s, cols, &mut rng);
                let xs = dt.x_stride();
                let xp = kernels_cuda::layout::prepare_activations(
                    format,
                    cols,
                    dt.rotation_seed(),
                    &x,
                    s,
                    xs,
                )
                .unwrap_or_else(|e| panic!("{e}"));
                let xd = b.stream().clone_htod(&xp).expect("upload x");
                for (name, tuning) in [("default", &default), ("persistent", &persist)] {
                    if name != "default" && s > 4 {
                        continue; // the persistent grid serves S <= 4
                    }
                    let mut y = b.poisoned_output(&dt, s).expect("output");
                    b.gemv_launch_resident_tuned(
                        &dt,
                        &xd.slice(..),
                        s,
                        &mut y.slice_mut(..),
                        tuning,
                    )
                    .unwrap_or_else(|e| panic!("{format} [{rows}, {cols}] S={s} {name}: {e}"));
                    let yh = b.stream().clone_dtoh(&y).expect("read back");
                    b.stream().synchronize().expect("sync");
                    match check(&t, &x, s, &yh) {
                        Ok(e) => worst = worst.max(e),
                        Err(msg) => failures.push(format!("resident ({name}): {msg}")),
                    }
                }
            }
        }
        println!("{format:<22} resident worst error {worst:.2e}");
    }
    assert!(
        failures.is_empty(),
        "{} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The engine's RMSNorm inside the resident split (S = 1): RMSNorm of a residual stream plus
/// an update (`gemv_launch_resident_norm`, with and without the update), then the 16-row
/// GEMV, against the oracle of the same GEMV on the norm computed here; the updated residual
/// must equal src + d bit for bit, and stay untouched without an update. Shapes: the
/// suite's, where the tensor takes the fused split (several split blocks from 1024
/// columns on), plus one past 8192 columns; outlier activations included.
#[test]
fn fused_norm_matches_the_oracle() {
    let Some(b) = backend() else { return };
    let seed = run_seed();
    println!("seed {seed}");
    let poison = f32::from_bits(0x7fc0_dead);
    let mut failures = Vec::new();
    let mut ran = 0usize;
    for format in formats_under_test() {
        let mut rng = format_rng(seed ^ 0xF0_5ED, format);
        let mut worst = 0f64;
        let mut extra = if format.spec().whole_blocks_only {
            vec![(17, 8448)]
        } else {
            vec![(33, 9000)]
        };
        let mut all = shapes(format);
        all.append(&mut extra);
        for (rows, cols) in all {
            let t = tensor(format, rows, cols, &mut rng);
            let dt = b
                .upload(&t.view())
                .unwrap_or_else(|e| panic!("upload {format}: {e}"));
            if !b.resident_prologue_fusable(&dt) {
                continue;
            }
            ran += 1;
            let n = cols;
            let mut src = inputs(1, n, &mut rng);
            src[rng.below(n)] *= 300.0; // an outlier sets the split's scale
            let upd = inputs(1, n, &mut rng);
            let weight: Vec<f32> = (0..n).map(|_| 0.5 + rng.uniform() as f32).collect();
            let eps = 1e-5f32;
            for with_d in [true, false] {
                let v: Vec<f32> = (0..n)
                    .map(|i| if with_d { src[i] + upd[i] } else { src[i] })
                    .collect();
                let ss: f64 = v.iter().map(|&a| f64::from(a) * f64::from(a)).sum();
                let r = (1.0 / (ss / n as f64 + f64::from(eps)).sqrt()) as f32;
                let x: Vec<f32> = (0..n).map(|i| weight[i] * (v[i] * r)).collect();
                let st = b.stream();
                let (sd, dd, wd) = (
                    st.clone_htod(&src).expect("upload"),
                    st.clone_htod(&upd).expect("upload"),
                    st.clone_htod(&weight).expect("upload"),
                );
                let mut dst = st.clone_htod(&vec![poison; n]).expect("upload");
                let mut y = b.poisoned_output(&dt, 1).expect("output");
                let dv = dd.slice(..);
                b.gemv_launch_resident_norm(
                    &dt,
                    &sd.slice(..),
                    with_d.then_some(&dv),
                    &wd.slice(..),
                    &mut dst.slice_mut(..),
                    n,
                    eps,
                    &mut y.slice_mut(..),
                )
                .unwrap_or_else(|e| panic!("{format} [{rows}, {cols}] norm: {e}"));
                let yh = st.clone_dtoh(&y).expect("read back");
                let dh = st.clone_dtoh(&dst).expect("read back");
                st.synchronize().expect("sync");
                match check(&t, &x, 1, &yh) {
                    Ok(e) => worst = worst.max(e),
                    Err(msg) => failures.push(format!("norm (update: {with_d}): {msg}")),
                }
                let want: Vec<u32> = if with_d {
                    v.iter().map(|a| a.to_bits()).collect()
                } else {
                    vec![poison.to_bits(); n]
                };
                if let Some(i) = (0..n).find(|&i| dh[i].to_bits() != want[i]) {
                    failures.push(format!(
                        "norm (update: {with_d}): {format} [{rows}, {cols}]: residual[{i}] = {} want {}",
                        dh[i],
                        f32::from_bits(want[i])
                    ));
                }
            }
        }
        println!("{format:<22} fused norm worst error {worst:.2e}");
    }
    assert_ran_clean(ran, "shapes took the fused split", &failures);
}

#[test]
fn every_batch_from_1_to_16() {
    let Some(b) = backend() else { return };
    let seed = run_seed();
    println!("seed {seed}");
    let batches: Vec<usize> = (1..=16).collect();
    warm_gemv(b, &EVERY_BATCH_FORMATS, &batches);
    let mut failures = Vec::new();
    for format in EVERY_BATCH_FORMATS {
        if !formats_under_test().contains(&format) {
            continue;
        }
        // (37, 1024) runs on the tensor cores where the format has them, (37, 1000) not.
        let shapes: &[(usize, usize)] = if format.spec().whole_blocks_only {
            &[(37, 1536)]
        } else {
            &[(37, 1000), (37, 1024)]
        };
        failures.extend(run(b, format, shapes, &batches, seed).1);
    }
    assert!(
        failures.is_empty(),
        "{} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn fp8_nan_poisons_exactly_its_row() {
    let Some(b) = backend() else { return };
    let seed = run_seed();
    println!("seed {seed}");
    for format in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0] {
        let mut rng = format_rng(seed, format);
        // I = 300: the CUDA-core kernel; I = 1024: the tensor cores.
        for (rows, cols) in [(131, 300), (131, 1024)] {
            let mut t = tensor(format, rows, cols, &mut rng);
            // One NaN of each sign, one in a full tile band, one in the partial last band.
            t.weights[5 * cols + 17] = 0x7F;
            t.weights[130 * cols + cols - 1] = 0xFF;
            let dt = b.upload(&t.view()).unwrap();
            for s in [1, 3, 16] {
                let x = inputs(s, cols, &mut rng);
                let y = b.gemv(&dt, &x, s).unwrap();
                check(&t, &x, s, &y).unwrap_or_else(|m| panic!("{m}"));
                for k in 0..s {
                    for o in 0..rows {
                        assert_eq!(
                            y[k * rows + o].is_nan(),
                            o == 5 || o == 130,
                            "{format} s={k} o={o}: {}",
                            y[k * rows + o]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn outside_the_table_is_refused() {
    // Host-side: the table alone decides, device or not.
    assert!(matches!(
        caps::lookup(Op::Gemv, Format::Int4G64, 17),
        Err(CudaError::NotImplemented { .. })
    ));
    let Some(b) = backend() else { return };
    let mut rng = format_rng(1, Format::Int4G64);
    let t = tensor(Format::Int4G64, 4, 64, &mut rng);
    let dt = b.upload(&t.view()).unwrap();
    for s in [0, 17] {
        let x = vec![1.0; s * 64];
        assert!(
            matches!(b.gemv(&dt, &x, s), Err(CudaError::NotImplemented { .. })),
            "S = {s}"
        );
    }
    // Wrong activation length: an error, not a launch.
    assert!(matches!(
        b.gemv(&dt, &[1.0; 63], 1),
        Err(CudaError::Shape { .. })
    ));
}

/// GEMM batches: just past the GEMV, a partial activation block, and two larger ones.
const GEMM_S: [usize; 4] = [17, 40, 128, 300];

#[test]
fn gemm_matches_the_oracle() {
    let Some(b) = backend() else { return };
    let seed = run_seed();
    println!("seed {seed} (replay with TESSERA_SEED={seed})");
    let precisions = GemmPrecision::ALL;
    warm(|| b.prewarm_gemm(&gemm_formats_under_test(), &precisions, &GEMM_S));
    let mut failures = Vec::new();
    for format in gemm_formats_under_test() {
        let mut rng = format_rng(seed ^ 0x6E33, format);
        let mut worst = [0f64; GemmPrecision::ALL.len()];
        let mut fallback_worst = 0f64;
        // The tensor-core shapes, plus the suite's edge shapes (odd I, partial groups),
        // which run the CUDA-core fallback.
        let mut all = gemm_shapes(format);
        all.extend(
            shapes(format)
                .into_iter()
                .filter(|&(r, c)| r * c <= 300_000),
        );
        for (rows, cols) in all {
            let t = tensor(format, rows, cols, &mut rng);
            let dt = b
                .upload(&t.view())
                .unwrap_or_else(|e| panic!("upload {format}: {e}"));
            for s in GEMM_S {
                let x = inputs(s, cols, &mut rng);
                for (k, precision) in precisions.into_iter().enumerate() {
                    let xa = b
                        .upload_gemm_activations(&dt, &x, s, precision)
                        .unwrap_or_else(|e| panic!("{format} [{rows}, {cols}] S={s}: {e}"));
                    let tc = xa.uses_tensor_cores();
                    if !tc && precision != GemmPrecision::Split {
                        continue; // the fallback ignores the precision
                    }
                    let y = b
                        .gemm_with(&dt, &x, s, precision)
                        .unwrap_or_else(|e| panic!("{format} [{rows}, {cols}] S={s}: {e}"));
                    match check_at(&t, &x, s, &y, precision.tolerance()) {
                        Ok(e) if tc => worst[k] = worst[k].max(e),
                        Ok(e) => fallback_worst = fallback_worst.max(e),
                        Err(msg) => {
                            failures.push(format!("{msg} (GEMM {precision:?}, tensor cores {tc})"))
                        }
                    }
                }
            }
        }
        println!(
            "{format:<22} GEMM worst error {:.2e} (split), {:.2e} (f16), {:.2e} (f16 dequantized), {:.2e} (CUDA-core fallback)",
            worst[0], worst[1], worst[2], fallback_worst
        );
    }
    assert!(
        failures.is_empty(),
        "{} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The GEMM with its k range split 2 and 3 ways: each split's partials go through the
/// scratch and the last split of a block adds them. `layout::gemm_splits` splits only grids
/// just past whole waves of the device, which the suite's shapes are not, so the splits are
/// forced here (on a second backend with that tuning).
#[test]
fn gemm_split_k_matches_the_oracle() {
    let Some(b) = backend() else { return };
    let seed = run_seed();
    println!("seed {seed} (replay with TESSERA_SEED={seed})");
    let mut failures = Vec::new();
    for z in [2, 3] {
        let bz = b
            .with_other_tuning(Tuning {
                gemm_split_k: Some(z),
                ..b.tuning().clone()
            })
            .unwrap_or_else(|e| panic!("backend with {z} splits: {e}"));
        for format in gemm_formats_under_test() {
            let mut rng = format_rng(seed ^ 0x5B11 ^ u64::from(z), format);
            let mut worst = 0f64;
            for (rows, cols) in gemm_shapes(format) {
                let t = tensor(format, rows, cols, &mut rng);
                let dt = bz
                    .upload(&t.view())
                    .unwrap_or_else(|e| panic!("upload {format}: {e}"));
                for s in [17, 128] {
                    let x = inputs(s, cols, &mut rng);
                    for precision in GemmPrecision::ALL {
                        // Twice: the first launch leaves the counters for the second.
                        for _ in 0..2 {
                            let y = bz
                                .gemm_with(&dt, &x, s, precision)
                                .unwrap_or_else(|e| panic!("{format} [{rows}, {cols}] S={s}: {e}"));
                            match check_at(&t, &x, s, &y, precision.tolerance()) {
                                Ok(e) => worst = worst.max(e),
                                Err(msg) => {
                                    failures.push(format!("{msg} (GEMM {precision:?}, {z} splits)"))
                                }
                            }
                        }
                    }
                }
            }
            println!("{format:<22} GEMM in {z} splits: worst error {worst:.2e}");
        }
    }
    assert!(
        failures.is_empty(),
        "{} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn gemm_fp8_nan_poisons_exactly_its_row() {
    let Some(b) = backend() else { return };
    let seed = run_seed();
    println!("seed {seed}");
    for format in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0] {
        if !formats_under_test().contains(&format) {
            continue;
        }
        let mut rng = format_rng(seed, format);
        let (rows, cols) = (131, 1024);
        let mut t = tensor(format, rows, cols, &mut rng);
        t.weights[5 * cols + 17] = 0x7F;
        t.weights[130 * cols + cols - 1] = 0xFF;
        let dt = b.upload(&t.view()).unwrap();
        let s = 40;
        let x = inputs(s, cols, &mut rng);
        for precision in GemmPrecision::ALL {
            let y = b.gemm_with(&dt, &x, s, precision).unwrap();
            check_at(&t, &x, s, &y, precision.tolerance()).unwrap_or_else(|m| panic!("{m}"));
            for k in 0..s {
                for o in 0..rows {
                    assert_eq!(
                        y[k * rows + o].is_nan(),
                        o == 5 || o == 130,
                        "{format} {precision:?} s={k} o={o}: {}",
                        y[k * rows + o]
                    );
                }
            }
        }
    }
}

#[test]
fn gemm_outside_the_table_is_refused() {
    assert!(caps::lookup(Op::Gemm, Format::Int4G64, 16).is_err());
    assert!(caps::lookup(Op::Gemm, Format::Mxfp4, 64).is_err());
    let Some(b) = backend() else { return };
    let mut rng = format_rng(2, Format::Int4G64);
    let t = tensor(Format::Int4G64, 4, 128, &mut rng);
    let dt = b.upload(&t.view()).unwrap();
    assert!(matches!(
        b.gemm(&dt, &[1.0; 16 * 128], 16),
        Err(CudaError::NotImplemented { .. })
    ));
    let m = tensor(Format::Mxfp4, 4, 128, &mut rng);
    let dm = b.upload(&m.view()).unwrap();
    assert!(matches!(
        b.gemm(&dm, &[1.0; 32 * 128], 32),
        Err(CudaError::NotImplemented { .. })
    ));
    assert!(matches!(
        b.gemm(&dt, &[1.0; 63], 17),
        Err(CudaError::Shape { .. })
    ));
}

/// Experts of mixed formats (grouped, tiled, rotated affine, row-scaled, CUDA-core only),
/// [O, I] shared.
const MOE_FORMATS: [Format; 7] = [
    Format::Int4G64,
    Format::Fp8E4m3B128,
    Format::Mq4G256V2,
    Format::Int8Row,
    Format::Mxfp4,
    Format::Int4G128,
    Format::Mq4K,
];

/// Top-k routing: each token picks k distinct experts among the first `used` (the rest
/// get no pairs), in random order.
fn route(rng: &mut Rng, tokens: usize, k: usize, used: usize) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for t in 0..tokens {
        let mut chosen: Vec<usize> = Vec::new();
        while chosen.len() < k {
            let e = (rng.next_u64() % used as u64) as usize;
            if !chosen.contains(&e) {
                chosen.push(e);
            }
        }
        pairs.extend(chosen.into_iter().map(|e| (t, e)));
    }
    // Shuffle, so pairs of one expert are not adjacent.
    for i in (1..pairs.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        pairs.swap(i, j);
    }
    pairs
}

#[test]
fn moe_gemv_matches_the_oracle_per_pair() {
    let Some(b) = backend() else { return };
    let seed = run_seed();
    println!("seed {seed} (replay with TESSERA_SEED={seed})");
    let mut rng = Rng::new(seed ^ 0x30E);
    let mut worst = 0f64;
    for (rows, cols, tokens, k) in [(300, 1024, 13, 2), (64, 512, 1, 1), (1000, 768, 40, 4)] {
        // Two experts of each format, so formats repeat across experts; the last two get
        // no pairs.
        let mut host: Vec<EncodedTensor> = Vec::new();
        for f in MOE_FORMATS.iter().chain(MOE_FORMATS.iter()) {
            host.push(tensor(*f, rows, cols, &mut rng));
        }
        let dev: Vec<_> = host.iter().map(|t| b.upload(&t.view()).unwrap()).collect();
        let experts: Vec<_> = dev.iter().collect();
        let used = experts.len() - 2;
        let pairs = route(&mut rng, tokens, k, used);
        let x = inputs(tokens, cols, &mut rng);
        let y = b
            .moe_gemv(&experts, &pairs, &x, tokens)
            .unwrap_or_else(|e| panic!("MoE [{rows}, {cols}]: {e}"));
        assert_eq!(y.len(), pairs.len() * rows);
        for (p, &(t, e)) in pairs.iter().enumerate() {
            let xt = &x[t * cols..(t + 1) * cols];
            let got = &y[p * rows..(p + 1) * rows];
            let err = check(&host[e], xt, 1, got).unwrap_or_else(|m| {
                panic!(
                    "MoE pair {p} (token {t}, expert {e}, {}): {m}",
                    host[e].format
                )
            });
            worst = worst.max(err);
        }
    }
    println!("MoE grouped GEMV: worst error {worst:.2e} over mixed formats");
}

#[test]
fn moe_gemv_refuses_bad_calls() {
    let Some(b) = backend() else { return };
    let mut rng = format_rng(3, Format::Int4G64);
    let a = b
        .upload(&tensor(Format::Int4G64, 8, 256, &mut rng).view())
        .unwrap();
    let c = b
        .upload(&tensor(Format::Int4G64, 8, 512, &mut rng).view())
        .unwrap();
    let x = vec![1.0; 2 * 256];
    // No experts, mismatched shapes, pairs out of range, wrong activation length.
    assert!(b.moe_gemv(&[], &[(0, 0)], &x, 2).is_err());
    assert!(b.moe_gemv(&[&a, &c], &[(0, 0)], &x, 2).is_err());
    assert!(b.moe_gemv(&[&a], &[(2, 0)], &x, 2).is_err());
    assert!(b.moe_gemv(&[&a], &[(0, 1)], &x, 2).is_err());
    assert!(b.moe_gemv(&[&a], &[(0, 0)], &x[..300], 2).is_err());
    // No pairs: nothing to compute.
    assert_eq!(b.moe_gemv(&[&a], &[], &x, 2).unwrap(), Vec::<f32>::new());
    // The same token twice through one expert gives the same row twice.
    let y = b.moe_gemv(&[&a], &[(1, 0), (1, 0)], &x, 2).unwrap();
    assert_eq!(y[..8], y[8..]);
}
