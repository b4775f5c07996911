//! The CUDA GEMV conformance suite, run on a GPU: every format of the capability table,
//! S in {1, 2, 3, 4, 8, 16} (and 1..=16 for a few), edge shapes, fresh random data (the seed
//! is printed; `TESSERA_SEED` replays it), outputs poisoned before each launch, compared
//! with quant-core's f64 oracle at magnitude-relative error <= 1e-4.
//!
//! Without a GPU every test prints "skipped: no CUDA device: <why>" and passes.
//!
//! Mutation runs (docs/CUDA.md): `TESSERA_CUDA_MUTATE=swap-nibbles|group-off-by-one|scale-1pct`
//! compiles the kernels with that defect; the suite must then fail.
//! `TESSERA_FORMATS=name1,name2` narrows the formats.

mod common;

use common::{S_LIST, check, format_rng, formats_under_test, inputs, run_seed, shapes, tensor};
use kernels_cuda::caps::{self, Op};
use kernels_cuda::{CudaBackend, CudaError, KernelPath, Mutation};
use quant_core::Format;
use std::sync::OnceLock;

/// Formats run at every S in 1..=16 (the others at S_LIST).
const EVERY_BATCH_FORMATS: [Format; 5] = [
    Format::Int4G64,
    Format::Int8Row,
    Format::Fp8E4m3B128,
    Format::Mq4G256V2,
    Format::F16,
];

/// The process's backend, or None (after printing why) when there is no GPU.
fn backend() -> Option<&'static CudaBackend> {
    static B: OnceLock<Result<CudaBackend, CudaError>> = OnceLock::new();
    let b = B.get_or_init(|| match std::env::var("TESSERA_CUDA_MUTATE") {
        Ok(name) if !name.is_empty() => {
            let m = Mutation::parse(&name)
                .unwrap_or_else(|| panic!("TESSERA_CUDA_MUTATE={name}: expected swap-nibbles, group-off-by-one or scale-1pct"));
            println!("MUTATION {name}: the kernels carry a deliberate defect; this run must fail");
            CudaBackend::with_mutation(m)
        }
        _ => CudaBackend::new(),
    });
    match b {
        Ok(b) => {
            static WARM: OnceLock<()> = OnceLock::new();
            WARM.get_or_init(|| {
                let t = std::time::Instant::now();
                // Exactly the builds the tests below launch, compiled on all cores up front.
                let every: Vec<usize> = (1..=16).collect();
                let batch_formats: Vec<Format> = formats_under_test()
                    .into_iter()
                    .filter(|f| EVERY_BATCH_FORMATS.contains(f))
                    .collect();
                b.prewarm(&formats_under_test(), &S_LIST)
                    .unwrap_or_else(|e| panic!("{e}"));
                b.prewarm(&batch_formats, &every)
                    .unwrap_or_else(|e| panic!("{e}"));
                println!("NVRTC builds ready in {:.1} s", t.elapsed().as_secs_f64());
            });
            Some(b)
        }
        Err(CudaError::Unavailable { why }) => {
            println!("skipped: {why}");
            None
        }
        Err(e) => panic!("CUDA backend: {e}"),
    }
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
            // Where the tensor cores take the shape, the CUDA-core kernel is checked too.
            let mut paths = vec![KernelPath::Auto];
            if dt.uses_tensor_cores(s) {
                paths.push(KernelPath::CudaCores);
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

#[test]
fn every_batch_from_1_to_16() {
    let Some(b) = backend() else { return };
    let seed = run_seed();
    println!("seed {seed}");
    let batches: Vec<usize> = (1..=16).collect();
    b.prewarm(&EVERY_BATCH_FORMATS, &batches)
        .unwrap_or_else(|e| panic!("{e}"));
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
