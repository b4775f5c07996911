//! bench_prologue: what the engine's RMSNorm costs in front of its GEMV on the
//! device-resident path (S = 1): for the two GEMVs of a Llama-3-8B layer that read a norm
//! (q/k/v [6144 x hidden] and gate/up [2 inter x hidden]), the GEMV alone (`tile_prep` +
//! GEMV), the norm as its own kernel before it (`add_rmsnorm`, then `tile_prep` + GEMV: the
//! engine with `TESSERA_RESIDENT_PROLOGUE=0`) and the norm inside the split (`norm_prep` +
//! GEMV: the engine's default), each as 50 launches queued and from a CUDA graph (median of
//! 9 replays), weights rotated through >= 512 MB. Also checks once that the fused and the
//! separate norm give the same outputs (to 1e-6 of the largest).
//!
//! Usage: bench_prologue [--formats int4-g64,...] [--hidden 4096] [--inter 14336]
//! Without a GPU it prints "skipped: ..." and exits 0.

mod bench_common;

use bench_common::{fail, time_graph, time_queued_host};
use kernels_cuda::resident::DecodeKernels;
use kernels_cuda::{CudaBackend, CudaError, DeviceTensor};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, Format, encode};

/// Which work goes in front of the GEMV.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Way {
    Alone,
    Separate,
    Fused,
}

fn main() {
    let b = match CudaBackend::new() {
        Ok(b) => b,
        Err(CudaError::Unavailable { why }) => {
            println!("skipped: {why}");
            return;
        }
        Err(e) => fail(e),
    };
    let mut formats = vec![Format::Int4G64];
    let (mut hidden, mut inter) = (4096usize, 14336usize);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let v = it
            .next()
            .unwrap_or_else(|| fail(format!("{a} needs a value")));
        match a.as_str() {
            "--formats" => {
                formats = v
                    .split(',')
                    .map(|n| n.parse::<Format>().unwrap_or_else(|e| fail(e)))
                    .collect()
            }
            "--hidden" => hidden = v.parse().unwrap_or_else(|e| fail(e)),
            "--inter" => inter = v.parse().unwrap_or_else(|e| fail(e)),
            other => fail(format!("unknown option {other}")),
        }
    }
    let k = DecodeKernels::new(&b).unwrap_or_else(|e| fail(e));
    println!("device {} ({})", b.device_name(), b.arch());
    println!(
        "| format | shape [O x I] | GEMV alone us queued / graph | add_rmsnorm + GEMV | norm fused into the split | fused - separate, graph |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for &format in &formats {
        for rows in [6144, 2 * inter] {
            let cols = hidden;
            if let Err(e) = run(&b, &k, format, rows, cols) {
                fail(format!("{format} [{rows} x {cols}]: {e}"));
            }
        }
    }
}

fn run(
    b: &CudaBackend,
    k: &DecodeKernels,
    format: Format,
    rows: usize,
    cols: usize,
) -> Result<(), CudaError> {
    let mut rng = Rng::new(0x5EED ^ rows as u64 ^ (cols as u64) << 20);
    let w = weights(&mut rng, rows, cols);
    let t = encode(format, rows, cols, &w, &EncodeOptions::default()).map_err(|e| {
        CudaError::Input {
            what: format!("encode: {e}"),
        }
    })?;
    let bytes = t.weights.len() + t.scales.len();
    let copies = (512usize << 20).div_ceil(bytes.max(1)).max(2);
    let dts: Vec<DeviceTensor> = (0..copies)
        .map(|_| b.upload(&t.view()))
        .collect::<Result<_, _>>()?;
    if !b.resident_prologue_fusable(&dts[0]) {
        println!("| {format} | {rows} x {cols} | not fusable here | | | |");
        return Ok(());
    }
    let st = b.stream();
    let up = |v: &[f32]| {
        st.clone_htod(v).map_err(|e| CudaError::Driver {
            during: "upload",
            detail: format!("{e:?}"),
        })
    };
    let xs = dts[0].x_stride();
    let src = up(&activations(&mut rng, 1, cols))?;
    let d = up(&activations(&mut rng, 1, cols))?;
    let nw = up(&(0..cols)
        .map(|_| 0.5 + rng.uniform() as f32)
        .collect::<Vec<_>>())?;
    let mut x = src.clone();
    let mut dst = up(&vec![0.0; cols])?;
    let mut xin = up(&vec![0.0; xs])?;
    let mut y = b.poisoned_output(&dts[0], 1)?;
    let mut launch = |way: Way,
                      i: usize,
                      y: &mut kernels_cuda::cudarc::driver::CudaSlice<f32>|
     -> Result<(), CudaError> {
        let dt = &dts[i % copies];
        match way {
            Way::Alone => b.gemv_launch_resident(dt, &xin.slice(..), 1, &mut y.slice_mut(..)),
            Way::Separate => {
                // x += d in place: it grows by d a launch (no overflow in a bench's runs).
                k.add_rmsnorm(
                    b,
                    &mut x,
                    Some(&d.slice(..)),
                    &nw,
                    &mut xin.slice_mut(..),
                    cols,
                    1e-5,
                )?;
                b.gemv_launch_resident(dt, &xin.slice(..), 1, &mut y.slice_mut(..))
            }
            Way::Fused => b.gemv_launch_resident_norm(
                dt,
                &src.slice(..),
                Some(&d.slice(..)),
                &nw.slice(..),
                &mut dst.slice_mut(..),
                cols,
                1e-5,
                &mut y.slice_mut(..),
            ),
        }
    };
    // The two norms must agree before they are timed.
    let read = |y: &kernels_cuda::cudarc::driver::CudaSlice<f32>| {
        st.clone_dtoh(y).map_err(|e| CudaError::Driver {
            during: "read back",
            detail: format!("{e:?}"),
        })
    };
    launch(Way::Separate, 0, &mut y)?;
    let ys = read(&y)?;
    launch(Way::Fused, 0, &mut y)?;
    let yf = read(&y)?;
    let big = ys.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    let diff = ys
        .iter()
        .zip(&yf)
        .fold(0f32, |m, (a, c)| m.max((a - c).abs()));
    if diff > 1e-6 * big || yf.iter().chain(&ys).any(|v| !v.is_finite()) {
        return Err(CudaError::Input {
            what: format!("fused and separate norms differ by {diff:e} (largest {big:e})"),
        });
    }
    let mut row = Vec::new();
    let mut graphs = Vec::new();
    for way in [Way::Alone, Way::Separate, Way::Fused] {
        let (q, _) = time_queued_host(b, 50, |i| launch(way, i, &mut y))?;
        let g = time_graph(b, 50, 9, |i| launch(way, i, &mut y))?;
        row.push(format!("{:.1} / {:.1}", q * 1e6, g * 1e6));
        graphs.push(g);
    }
    println!(
        "| {format} | {rows} x {cols} | {} | {} | {} | {:+.1} |",
        row[0],
        row[1],
        row[2],
        (graphs[2] - graphs[1]) * 1e6
    );
    Ok(())
}
