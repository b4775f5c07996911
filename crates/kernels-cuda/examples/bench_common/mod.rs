//! Timing helpers shared by the CUDA benchmarks (bench_gemv, bench_gemm), with the
//! conventions of ../shared/anchors/anchor_gpu.py: medians of single launches bracketed by
//! CUDA events and each followed by a synchronize, plus a "queued" figure (many launches
//! between one pair of events, without the host's launch latency); copy bandwidth as
//! 2n / t for a device-to-device copy of n bytes.

#![allow(dead_code)]

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream};
use kernels_cuda::{CudaBackend, CudaError};
use quant_core::EncodedTensor;
use std::sync::Arc;

pub fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("bench: {e}");
    std::process::exit(1)
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn drv(during: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::Driver {
        during,
        detail: format!("{e:?}"),
    }
}

/// Median seconds of `f` over `reps` single calls, each bracketed by events and synced.
pub fn time(
    b: &CudaBackend,
    reps: usize,
    warm: usize,
    mut f: impl FnMut(usize) -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    let stream: &Arc<CudaStream> = b.stream();
    for k in 0..warm {
        f(k)?;
    }
    stream.synchronize().map_err(drv("warm-up"))?;
    let mut ts = Vec::with_capacity(reps);
    for k in 0..reps {
        let a = b
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv("event"))?;
        let e = b
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv("event"))?;
        a.record(stream).map_err(drv("event record"))?;
        f(warm + k)?;
        e.record(stream).map_err(drv("event record"))?;
        stream.synchronize().map_err(drv("timed call"))?;
        ts.push(a.elapsed_ms(&e).map_err(drv("event time"))? as f64 * 1e-3);
    }
    Ok(median(ts))
}

/// Seconds per call of `n` calls of `f` queued back to back between one pair of events:
/// the GPU time without the host's launch latency (which the single-launch figure, like
/// anchor_gpu.py's, includes). Reported next to it, not instead of it.
pub fn time_queued(
    b: &CudaBackend,
    n: usize,
    f: impl FnMut(usize) -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    time_queued_host(b, n, f).map(|(gpu, _)| gpu)
}

/// [`time_queued`], and the host's seconds per call to enqueue them (wall clock from the
/// first call to the return of the last, before the synchronize): where it is as long as
/// the GPU figure, the host's launch rate, not the kernel, set the queued time.
pub fn time_queued_host(
    b: &CudaBackend,
    n: usize,
    mut f: impl FnMut(usize) -> Result<(), CudaError>,
) -> Result<(f64, f64), CudaError> {
    let stream: &Arc<CudaStream> = b.stream();
    f(0)?;
    stream.synchronize().map_err(drv("warm-up"))?;
    let a = b
        .context()
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(drv("event"))?;
    let e = b
        .context()
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(drv("event"))?;
    a.record(stream).map_err(drv("event record"))?;
    let t0 = std::time::Instant::now();
    for k in 0..n {
        f(1 + k)?;
    }
    let host = t0.elapsed().as_secs_f64() / n as f64;
    e.record(stream).map_err(drv("event record"))?;
    stream.synchronize().map_err(drv("queued calls"))?;
    let gpu = a.elapsed_ms(&e).map_err(drv("event time"))? as f64 * 1e-3 / n as f64;
    Ok((gpu, host))
}

/// Seconds per call of `n` calls of `f` captured once into a CUDA graph (on the backend's
/// own stream) and replayed: the GPU time of the same work without the host's enqueue rate,
/// which bounds the queued figure wherever a launch takes less GPU time than the host needs
/// to enqueue it. The median over `replays` replays, each bracketed by events. `f` is called
/// once outside the capture first, so modules are loaded and lazily allocated buffers exist
/// before the capture (neither may happen inside it).
pub fn time_graph(
    b: &CudaBackend,
    n: usize,
    replays: usize,
    mut f: impl FnMut(usize) -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let stream: &Arc<CudaStream> = b.stream();
    f(0)?;
    stream.synchronize().map_err(drv("warm-up"))?;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .map_err(drv("begin capture"))?;
    let mut captured = Ok(());
    for k in 0..n {
        captured = f(1 + k);
        if captured.is_err() {
            break;
        }
    }
    // The capture is ended even when a launch failed, so the stream stays usable.
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    captured?;
    let graph = graph
        .map_err(drv("end capture"))?
        .ok_or_else(|| CudaError::Driver {
            during: "end capture",
            detail: "no graph was captured".into(),
        })?;
    graph.upload().map_err(drv("graph upload"))?;
    graph.launch().map_err(drv("graph launch"))?;
    stream.synchronize().map_err(drv("graph warm-up"))?;
    let mut ts = Vec::with_capacity(replays);
    for _ in 0..replays {
        let a = b
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv("event"))?;
        let e = b
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv("event"))?;
        a.record(stream).map_err(drv("event record"))?;
        graph.launch().map_err(drv("graph launch"))?;
        e.record(stream).map_err(drv("event record"))?;
        stream.synchronize().map_err(drv("graph replay"))?;
        ts.push(a.elapsed_ms(&e).map_err(drv("event time"))? as f64 * 1e-3 / n as f64);
    }
    Ok(median(ts))
}

/// Device-to-device copy bandwidth, 2 x 1 GiB / t.
pub fn copy_bandwidth(b: &CudaBackend, reps: usize) -> Result<f64, CudaError> {
    let n = 1usize << 30;
    let src: CudaSlice<u8> = b.stream().alloc_zeros(n).map_err(drv("allocating 1 GiB"))?;
    let mut dst: CudaSlice<u8> = b.stream().alloc_zeros(n).map_err(drv("allocating 1 GiB"))?;
    let t = time(b, reps.min(20), 3, |_| {
        b.stream().memcpy_dtod(&src, &mut dst).map_err(drv("copy"))
    })?;
    Ok(2.0 * n as f64 / t / 1e9)
}

/// The first 128 rows of `t` (a whole fp8 tile band) as their own tensor, for a spot check
/// of a big-shape output against the f64 oracle.
pub fn head(t: &EncodedTensor) -> Option<EncodedTensor> {
    let n = t.rows.min(128);
    let spec = t.format.spec();
    let wr = spec.weight_range(0, n, t.cols).ok()?;
    let sr = spec.scale_range(0, n, t.rows, t.cols).ok()?;
    EncodedTensor::from_parts(
        t.format,
        n,
        t.cols,
        t.weights[wr].to_vec(),
        t.scales[sr].to_vec(),
        Some(t.rotation_seed),
    )
    .ok()
}

/// Worst error of rows 0..128 of `y` ([s, rows]) against the oracle on `t`'s head.
pub fn check_head(t: &EncodedTensor, x: &[f32], s: usize, y: &[f32]) -> f64 {
    head(t).map_or(f64::NAN, |h| {
        let r = quant_core::oracle::reference_gemm(&h.view(), x, s);
        let n = h.rows;
        let mut ys = Vec::with_capacity(s * n);
        for k in 0..s {
            ys.extend_from_slice(&y[k * t.rows..k * t.rows + n]);
        }
        quant_core::oracle::worst_error(&ys, &r).error
    })
}

/// A tuning name's tail, such as "8d3bxu32", as letter-value fields: the first value
/// belongs to `first`, then each letter opens a field whose value is the digits (or `x`,
/// "the source's default") after it: [('w', "8"), ('d', "3"), ('b', "x"), ('u', "32")].
pub fn tuning_fields(first: char, rest: &str) -> Vec<(char, String)> {
    let mut fields = vec![(first, String::new())];
    for c in rest.chars() {
        match (c.is_ascii_digit() || c == 'x', fields.last_mut()) {
            (true, Some((_, v))) => v.push(c),
            _ => fields.push((c, String::new())),
        }
    }
    fields
}

/// Parses "4096x4096,14336x4096" into shapes.
pub fn parse_shapes(list: &str) -> Result<Vec<(usize, usize)>, String> {
    list.split(',')
        .map(|s| {
            let (a, b) = s
                .split_once('x')
                .ok_or(format!("shape {s}: expected OxI"))?;
            Ok((
                a.parse().map_err(|e| format!("{e}"))?,
                b.parse().map_err(|e| format!("{e}"))?,
            ))
        })
        .collect()
}
