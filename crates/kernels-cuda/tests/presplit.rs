//! Producers that write the 16-row GEMV's split themselves (kernels-cuda `presplit`), run
//! on a GPU: SwiGLU (`swiglu_split`) and chunked attention (`attention_rope` with split
//! buffers) write the split, then `gemv_launch_presplit` multiplies it, for every format
//! under test that has a presplit launch. Compared with quant-core's f64 oracle on the
//! producer's own f32 output (read back), at magnitude-relative error <= 1e-4. The
//! activations' 128-column segments span ten orders of magnitude and carry outliers, so a
//! segment folded with another segment's power of two fails. Outputs poisoned before each
//! launch; fresh random data (the seed is printed; `TESSERA_SEED` replays it).
//!
//! Without a GPU every test prints "skipped: no CUDA device: <why>" and passes.

mod common;

use common::{assert_ran_clean, check, format_rng, formats_under_test, run_seed, shapes, tensor};
use kernels_cuda::resident::{AttentionScratch, AttentionShape, DecodeKernels, RopeArgs};
use kernels_cuda::{CudaBackend, CudaError};
use quant_core::testdata::Rng;
use std::sync::OnceLock;

fn backend() -> Option<&'static CudaBackend> {
    static B: OnceLock<Result<CudaBackend, CudaError>> = OnceLock::new();
    match B.get_or_init(CudaBackend::new) {
        Ok(b) => Some(b),
        Err(CudaError::Unavailable { why }) => {
            println!("skipped: {why}");
            None
        }
        Err(e) => panic!("CUDA backend: {e}"),
    }
}

/// n values whose 128-column segments sit at magnitudes 1e-5 .. 1e5 (segment k at
/// 10^(k mod 11 - 5)), with one outlier of 300x.
fn segmented(n: usize, rng: &mut Rng) -> Vec<f32> {
    let mut v: Vec<f32> = (0..n)
        .map(|i| {
            let mag = 10f32.powi((i / 128 % 11) as i32 - 5);
            (rng.uniform() as f32 * 2.0 - 1.0) * mag
        })
        .collect();
    let i = rng.below(n);
    v[i] *= 300.0;
    v
}

#[test]
fn swiglu_split_feeds_the_gemv() {
    let Some(b) = backend() else { return };
    let k = DecodeKernels::new(b).unwrap_or_else(|e| panic!("decode kernels: {e}"));
    let seed = run_seed();
    println!("seed {seed}");
    let st = b.stream();
    let mut failures = Vec::new();
    let mut ran = 0usize;
    for format in formats_under_test() {
        let mut rng = format_rng(seed ^ 0x5_B1_17, format);
        let mut worst = 0f64;
        let mut all = shapes(format);
        all.push((40, 14336));
        for (rows, cols) in all {
            let t = tensor(format, rows, cols, &mut rng);
            let dt = b.upload(&t.view()).expect("upload");
            let Some(layout) = b.presplit_layout(&dt) else {
                continue;
            };
            ran += 1;
            let g: Vec<f32> = (0..cols)
                .map(|_| rng.uniform() as f32 * 8.0 - 4.0)
                .collect();
            let u = segmented(cols, &mut rng);
            let (gd, ud) = (
                st.clone_htod(&g).expect("upload"),
                st.clone_htod(&u).expect("upload"),
            );
            let mut out = st.clone_htod(&vec![f32::NAN; cols]).expect("upload");
            let mut split = b.split_buffers(layout).expect("split buffers");
            let mut y = b.poisoned_output(&dt, 1).expect("output");
            k.swiglu_split(
                b,
                &gd.slice(..),
                &ud.slice(..),
                &mut out.slice_mut(..),
                &mut split,
            )
            .unwrap_or_else(|e| panic!("{format} swiglu_split: {e}"));
            b.gemv_launch_presplit(&dt, &split, &mut y.slice_mut(..))
                .unwrap_or_else(|e| panic!("{format} [{rows}, {cols}] presplit: {e}"));
            let x = st.clone_dtoh(&out).expect("read back");
            let yh = st.clone_dtoh(&y).expect("read back");
            st.synchronize().expect("sync");
            // The kernel's f32 output is silu(g) u to a few ulps of the host's.
            for i in 0..cols {
                let want = g[i] / (1.0 + (-g[i]).exp()) * u[i];
                if (x[i] - want).abs() > 1e-5 * want.abs() + f32::MIN_POSITIVE {
                    failures.push(format!("{format} swiglu[{i}] = {} want {want}", x[i]));
                    break;
                }
            }
            match check(&t, &x, 1, &yh) {
                Ok(e) => worst = worst.max(e),
                Err(msg) => failures.push(format!("swiglu presplit: {msg}")),
            }
        }
        println!("{format:<22} swiglu presplit worst error {worst:.2e}");
    }
    assert_ran_clean(ran, "shapes took the presplit launch", &failures);
}

/// Chunked attention at positions inside the first chunk (its block writes the output and
/// the split) and past it (the head's last block combines the chunks and writes them), 4
/// query heads of 128 over 2 KV heads: the o projection's presplit GEMV against the oracle
/// of the attention's own f32 output.
#[test]
fn attention_split_feeds_the_gemv() {
    let Some(b) = backend() else { return };
    let k = DecodeKernels::new(b).unwrap_or_else(|e| panic!("decode kernels: {e}"));
    let seed = run_seed();
    println!("seed {seed}");
    let st = b.stream();
    let (heads, kv_heads, hd, cap) = (4usize, 2usize, 128usize, 100usize);
    let kvw = kv_heads * hd;
    let shape = AttentionShape {
        heads,
        kv_heads,
        head_dim: hd,
        cap,
    };
    let mut failures = Vec::new();
    let mut ran = 0usize;
    for format in formats_under_test() {
        let mut rng = format_rng(seed ^ 0xA77, format);
        let t = tensor(format, 37, heads * hd, &mut rng);
        let dt = b.upload(&t.view()).expect("upload");
        let Some(layout) = b.presplit_layout(&dt) else {
            continue;
        };
        if !DecodeKernels::attention_splits(k.attention_mode(), shape, layout) {
            println!(
                "{format}: skipped: attention mode {:?} writes no split",
                k.attention_mode()
            );
            continue;
        }
        let mut worst = 0f64;
        for pos in [5usize, 77] {
            ran += 1;
            // Values of each KV head at their own magnitude, so the heads' segments differ.
            let q: Vec<f32> = (0..heads * hd)
                .map(|_| rng.uniform() as f32 - 0.5)
                .collect();
            let knew: Vec<f32> = (0..kvw).map(|_| rng.uniform() as f32 - 0.5).collect();
            let vmag = |i: usize| if (i % kvw) / hd == 0 { 1e-4f32 } else { 30.0 };
            let vnew: Vec<f32> = (0..kvw)
                .map(|i| (rng.uniform() as f32 - 0.5) * vmag(i))
                .collect();
            let kcache: Vec<f32> = (0..cap * kvw).map(|_| rng.uniform() as f32 - 0.5).collect();
            let vcache: Vec<f32> = (0..cap * kvw)
                .map(|i| (rng.uniform() as f32 - 0.5) * vmag(i))
                .collect();
            let inv_freq: Vec<f32> = (0..hd / 2)
                .map(|i| 10000f32.powf(-(2.0 * i as f32) / hd as f32))
                .collect();
            let (qd, kd, vd, fd) = (
                st.clone_htod(&q).expect("upload"),
                st.clone_htod(&knew).expect("upload"),
                st.clone_htod(&vnew).expect("upload"),
                st.clone_htod(&inv_freq).expect("upload"),
            );
            let mut kc = st.clone_htod(&kcache).expect("upload");
            let mut vc = st.clone_htod(&vcache).expect("upload");
            let pd = st.clone_htod(&[pos as i32]).expect("upload");
            let mut scratch = AttentionScratch::new(b, shape).expect("scratch");
            let mut out = st.clone_htod(&vec![f32::NAN; heads * hd]).expect("upload");
            let mut split = b.split_buffers(layout).expect("split buffers");
            let mut y = b.poisoned_output(&dt, 1).expect("output");
            let rope = RopeArgs {
                norms: None,
                eps: 1e-6,
                inv_freq: &fd,
                attn_factor: 1.0,
            };
            k.attention_rope(
                b,
                &qd.slice(..),
                &kd.slice(..),
                &vd.slice(..),
                &mut kc,
                &mut vc,
                &mut scratch,
                &mut out.slice_mut(..),
                shape,
                rope,
                &pd,
                Some(&mut split),
            )
            .unwrap_or_else(|e| panic!("{format} attention at {pos}: {e}"));
            b.gemv_launch_presplit(&dt, &split, &mut y.slice_mut(..))
                .unwrap_or_else(|e| panic!("{format} presplit: {e}"));
            let x = st.clone_dtoh(&out).expect("read back");
            let yh = st.clone_dtoh(&y).expect("read back");
            st.synchronize().expect("sync");
            if let Some(i) = x.iter().position(|v| !v.is_finite()) {
                failures.push(format!("{format} at {pos}: attention out[{i}] = {}", x[i]));
                continue;
            }
            match check(&t, &x, 1, &yh) {
                Ok(e) => worst = worst.max(e),
                Err(msg) => failures.push(format!("attention presplit at {pos}: {msg}")),
            }
        }
        println!("{format:<22} attention presplit worst error {worst:.2e}");
    }
    assert_ran_clean(ran, "runs took the presplit launch", &failures);
}
