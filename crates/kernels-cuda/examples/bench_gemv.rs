//! bench_gemv: CUDA GEMV timings at the issue-4 shapes, against the device-to-device copy
//! bandwidth measured in the same process.
//!
//! Convention (the same as ../shared/anchors/anchor_gpu.py, so the figures compare with its
//! peers): a copy of n bytes moves 2n bytes (read + write), `copy GB/s = 2n / t`; a GEMV
//! must read its stored weight + scale bytes, `weight GB/s = (weight + scale bytes) / t`;
//! "% copy" is their ratio. Times are medians of single launches bracketed by CUDA events,
//! each followed by a synchronize (as anchor_gpu.py times torch). Weight copies rotate
//! through at least 512 MB so the 60 MB L2 never holds the next launch's weights.
//!
//! Usage: bench_gemv [--quick] [--formats a,b] [--batches 1,16] [--shapes 4096x4096,...]
//!                   [--tunings default,rows,t8d2b2k2,w8d3b2,...] [--cuda-cores] [--resident]
//!                   [--read 50331648,...] [--read-only]
//! `--tunings` times the tensor-core kernels once per tuning: `default`; `nopdl` (plain
//! launches), `noclass` (int4-g32/g64 in their own chunk), `base` (both, and no L2 prefetch
//! hint, 8-warp blocks everywhere); `pdlall` (programmatic launches on every grid) /
//! `pdlrule` (only where `layout::pdl_pays` says: the default); `nopf` (no L2 prefetch hint); `nowide` (8-warp blocks on
//! small grids too); `s4` (both: session 4's default); `diag1` / `diag2` (diagnostic
//! builds, wrong results by design); `rows` (the 16-row
//! tensor-core GEMV; `rowsc1` with one accumulator chain); `t<warps>d<depth>b<min blocks>k<blocks per SM>[m<min stages>][s<x
//! stages>]` (the split-K tile GEMV with these knobs); `w<warps>d<depth>b<min
//! blocks>[u<stage bytes>][p<L2 prefetch bytes, 0 for none>][c][g<diag>]` (the 16-row GEMV;
//! `x` for the source's default, `c` one contiguous k range per warp, `g` a diagnostic
//! build; see `kernels_cuda::Tuning`);
//! `persist` / `nopersist` / `pauto` (the 16-row GEMV at S <= 4 on the persistent grid always /
//! never / by `layout::rows_persistent`'s rule; `persist<n>`: always, on at most n blocks).
//! `--read <bytes,...>` first times a plain streaming read (uint4 `ld.global.nc` loads, each
//! thread U in flight, XOR-reduced, one word a block written) of buffers of these sizes, on
//! grids of SMs x k blocks (grid-stride) and of one block per 256 x U loads, with and without
//! the L2 prefetch hint, queued and from a graph: what a launch of that many bytes can reach
//! at all; `--read-only` stops after it.
//! Every row also times the same launches captured once into a CUDA graph and replayed
//! ("us graph": the GPU time without the host's enqueue rate); `--cuda-cores` adds
//! the CUDA-core kernel where the tensor cores serve the shape. Prints a markdown table;
//! with $OUT set also writes $OUT/bench_gemv.json. Without a GPU it prints "skipped: ..."
//! and exits 0.

mod bench_common;

use bench_common::{
    check_head, copy_bandwidth, fail, parse_shapes, time, time_graph, time_queued_host,
    tuning_fields,
};
use kernels_cuda::{CudaBackend, DeviceTensor, KernelPath, Tuning};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, Format, encode};

const SHAPES: [(usize, usize); 5] = [
    (4096, 4096),
    (14336, 4096),
    (4096, 14336),
    (6144, 16384),
    (16384, 6144),
];
const FORMATS: [Format; 5] = [
    Format::Int4Row,
    Format::Int4G64,
    Format::Mq4G256V2,
    Format::Fp8E4m3B128,
    Format::Int8Row,
];
const ROTATE_BYTES: usize = 512 << 20;

struct Opts {
    reps: usize,
    formats: Vec<Format>,
    batches: Vec<usize>,
    shapes: Vec<(usize, usize)>,
    /// Tensor-core GEMV tunings to compare, by name ("default", "w8d3b2", ...).
    tunings: Vec<(String, Tuning)>,
    /// Also time the CUDA-core kernel where the tensor cores serve the shape.
    cuda_cores: bool,
    /// Also time `gemv_launch_resident` (device-side split + GEMV: the engine's path) per
    /// tuning.
    resident: bool,
    /// Buffer sizes (bytes) of the plain streaming-read measurement; empty: none.
    read: Vec<usize>,
    /// Stop after the read measurement.
    read_only: bool,
}

/// "default", or w<warps>d<depth>b<min blocks> with `x` for the source's default, e.g.
/// "w8d3b2", "w16dxb1".
fn parse_tuning(name: &str) -> Result<Tuning, String> {
    if name == "default" {
        return Ok(Tuning::default());
    }
    // "diag1" / "diag2": diagnostic builds of the 16-row GEMV (decode replaced by the raw
    // word / weights only streamed); their results are wrong by design.
    if let Some(d) = name.strip_prefix("diag") {
        let t = Tuning {
            diag: d
                .parse()
                .map_err(|_| format!("tuning {name}: expected diag1 or diag2"))?,
            tiles_from_s: Some(0),
            ..Tuning::default()
        };
        t.check()?;
        return Ok(t);
    }
    // "nopdl": plain launches; "noclass": int4-g32/g64 in their own chunk at small S;
    // "base": both (the session-3 kernels and launches).
    if name == "nopdl" || name == "noclass" || name == "base" {
        return Ok(Tuning {
            pdl: name == "noclass",
            mma_classes: name == "nopdl",
            mma_l2_prefetch: if name == "base" { 0 } else { 128 },
            mma_small_grid_warps: if name == "base" { None } else { Some(12) },
            ..Tuning::default()
        });
    }
    // "persist" / "nopersist" / "pauto": the 16-row GEMV at S <= 4 on the persistent grid
    // always / never / by layout::rows_persistent's rule; "persist<n>": always, at most n
    // blocks.
    if let Some(g) = name.strip_prefix("persist")
        && (g.is_empty() || g.parse::<u32>().is_ok())
    {
        let t = Tuning {
            mma_persistent: Some(true),
            mma_persist_grid: g.parse().unwrap_or(0),
            ..Tuning::default()
        };
        t.check()?;
        return Ok(t);
    }
    if name == "nopersist" || name == "pauto" {
        return Ok(Tuning {
            mma_persistent: (name == "nopersist").then_some(false),
            ..Tuning::default()
        });
    }
    // "pdlall": a programmatic launch on every 16-row grid (Tuning::pdl_every_grid);
    // "pdlrule": only on the grids layout::pdl_pays accepts (the default).
    if name == "pdlall" || name == "pdlrule" {
        return Ok(Tuning {
            pdl_every_grid: name == "pdlall",
            ..Tuning::default()
        });
    }
    // "nopf": without the L2 prefetch hint of the 16-row GEMV's weight loads (session 4's
    // default kernel).
    if name == "nopf" {
        return Ok(Tuning {
            mma_l2_prefetch: 0,
            ..Tuning::default()
        });
    }
    // "nowide": 8-warp blocks on small grids too; "s4": neither the prefetch hint nor the
    // wide small-grid blocks (session 4's default).
    if name == "nowide" || name == "s4" {
        return Ok(Tuning {
            mma_small_grid_warps: None,
            mma_l2_prefetch: if name == "s4" { 0 } else { 128 },
            ..Tuning::default()
        });
    }
    // "rows": the 16-row tensor-core GEMV at its defaults; "rowsc1": with one accumulator
    // chain (the kernel before session 3).
    if name == "rows" || name == "rowsc1" {
        return Ok(Tuning {
            tiles_from_s: Some(0),
            mma_chains: (name == "rowsc1").then_some(1),
            ..Tuning::default()
        });
    }
    // t<warps>d<depth>b<min blocks>k<blocks per SM>[m<min stages>][s<x stages>][c<carveout %>]:
    // the split-K tile GEMV with these knobs.
    if let Some(rest) = name.strip_prefix('t') {
        let bad = || format!("tuning {name}: expected t<n>d<n>b<n>k<n>[m<n>][s<n>][c<n>]");
        let mut t = Tuning {
            tiles_from_s: Some(1),
            ..Tuning::default()
        };
        let set = |k: char, v: &str, t: &mut Tuning| -> Result<(), String> {
            let v: u32 = v.parse().map_err(|_| bad())?;
            match k {
                'w' => t.tile_warps = v,
                'd' => t.tile_depth = v,
                'b' => t.tile_min_blocks = v,
                'k' => t.tile_blocks_per_sm = v,
                'm' => t.tile_min_stages = v,
                's' => t.gemm_stages = v,
                'c' => t.shared_carveout = Some(v),
                _ => return Err(bad()),
            }
            Ok(())
        };
        for (k, v) in tuning_fields('w', rest) {
            set(k, &v, &mut t)?;
        }
        t.check()?;
        return Ok(t);
    }
    // w<warps>d<depth|x>b<min blocks|x>[u<stage bytes>][p<L2 prefetch bytes>][c]: the 16-row
    // tensor-core GEMV with these knobs (`x`: the source's default; `c`: contiguous k ranges).
    let bad = || {
        format!(
            "tuning {name}: expected default, rows, t..., or w<n>d<n|x>b<n|x>[u<n>][p<n>][c][g<diag>]"
        )
    };
    let rest = name.strip_prefix('w').ok_or_else(bad)?;
    let mut t = Tuning {
        tiles_from_s: Some(0),
        ..Tuning::default()
    };
    let fields = tuning_fields('w', rest);
    let opt = |v: &str| -> Result<Option<u32>, String> {
        if v == "x" {
            Ok(None)
        } else {
            v.parse().map(Some).map_err(|_| bad())
        }
    };
    for (k, v) in &fields {
        match k {
            'w' => t.mma_warps = opt(v)?.ok_or_else(bad)?,
            'd' => t.mma_depth = opt(v)?,
            'b' => t.mma_min_blocks = opt(v)?,
            'u' => t.mma_stage = opt(v)?,
            'p' => t.mma_l2_prefetch = opt(v)?.unwrap_or(0),
            'c' if v.is_empty() => t.mma_contig = true,
            'g' => t.diag = opt(v)?.unwrap_or(0),
            _ => return Err(bad()),
        }
    }
    t.check()?;
    Ok(t)
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        reps: 50,
        formats: FORMATS.to_vec(),
        batches: vec![1, 16],
        shapes: SHAPES.to_vec(),
        tunings: vec![("default".into(), Tuning::default())],
        cuda_cores: false,
        resident: false,
        read: Vec::new(),
        read_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => o.reps = 10,
            "--cuda-cores" => o.cuda_cores = true,
            "--resident" => o.resident = true,
            "--read-only" => o.read_only = true,
            "--read" => {
                o.read = value()?
                    .split(',')
                    .map(|s| s.parse::<usize>().map_err(|e| e.to_string()))
                    .collect::<Result<_, _>>()?
            }
            "--formats" => {
                o.formats = value()?
                    .split(',')
                    .map(|f| f.parse::<Format>().map_err(|e| e.to_string()))
                    .collect::<Result<_, _>>()?
            }
            "--batches" => {
                o.batches = value()?
                    .split(',')
                    .map(|s| s.parse::<usize>().map_err(|e| e.to_string()))
                    .collect::<Result<_, _>>()?
            }
            "--shapes" => o.shapes = parse_shapes(&value()?)?,
            "--tunings" => {
                o.tunings = value()?
                    .split(',')
                    .map(|n| parse_tuning(n).map(|t| (n.to_string(), t)))
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(o)
}

struct Row {
    rows: usize,
    cols: usize,
    format: Format,
    s: usize,
    path: String,
    secs: f64,
    queued: f64,
    /// Host seconds per launch while queueing them.
    host: f64,
    /// Seconds per launch of the same launches captured once into a CUDA graph and
    /// replayed (NaN where the capture failed).
    graph: f64,
    bytes: usize,
    check: f64,
}

fn main() {
    let opts = parse_args().unwrap_or_else(|e| fail(e));
    let b = match CudaBackend::new() {
        Ok(b) => b,
        Err(e) if e.is_unavailable() => {
            println!("skipped: {e}");
            return;
        }
        Err(e) => fail(e),
    };
    let copy = copy_bandwidth(&b, opts.reps).unwrap_or_else(|e| fail(e));
    println!(
        "device {} ({}); device-to-device copy {copy:.0} GB/s (2 x 1 GiB / t)",
        b.device_name(),
        b.arch()
    );
    if !opts.read.is_empty() {
        read_bench(&b, &opts, copy).unwrap_or_else(|e| fail(e));
        if opts.read_only {
            return;
        }
    }
    let tunings: Vec<Tuning> = opts.tunings.iter().map(|(_, t)| t.clone()).collect();
    let t0 = std::time::Instant::now();
    b.prewarm_tuned(&opts.formats, &opts.batches, &tunings)
        .unwrap_or_else(|e| fail(e));
    eprintln!("NVRTC builds ready in {:.1} s", t0.elapsed().as_secs_f64());
    let mut rng = Rng::new(0x5EED);
    let mut results = Vec::new();
    for &(rows, cols) in &opts.shapes {
        let w = weights(&mut rng, rows, cols);
        for &format in &opts.formats {
            let t = encode(format, rows, cols, &w, &EncodeOptions::default())
                .unwrap_or_else(|e| fail(e));
            let first = b.upload(&t.view()).unwrap_or_else(|e| fail(e));
            let copies = ROTATE_BYTES.div_ceil(first.stored_bytes()).max(2);
            let mut ws: Vec<DeviceTensor> = Vec::with_capacity(copies);
            for _ in 1..copies {
                ws.push(b.duplicate(&first).unwrap_or_else(|e| fail(e)));
            }
            ws.push(first);
            for &s in &opts.batches {
                let x = activations(&mut rng, s, cols);
                let xa = b
                    .upload_activations(&ws[0], &x, s)
                    .unwrap_or_else(|e| fail(e));
                // The tensor cores at each tuning where they serve the shape, and the
                // CUDA-core kernel (always where they do not, on request where they do).
                let mut paths: Vec<(KernelPath, String, Tuning)> = Vec::new();
                if ws[0].uses_tensor_cores(s) {
                    // ("fused" / "unfused" differ from "default" in the resident launch
                    // alone.)
                    for (name, tuning) in opts
                        .tunings
                        .iter()
                        .filter(|(n, _)| n != "fused" && n != "unfused")
                    {
                        paths.push((
                            KernelPath::Auto,
                            format!("tensor cores {name}"),
                            tuning.clone(),
                        ));
                    }
                }
                if paths.is_empty() || opts.cuda_cores {
                    paths.push((
                        KernelPath::CudaCores,
                        "cuda cores".into(),
                        Tuning::default(),
                    ));
                }
                // The resident launch (split on the device, then the GEMV) per tuning: x
                // already on the device in the stored domain, as the engine holds it.
                let xdev = if opts.resident && ws[0].uses_tensor_cores(s) {
                    let xp = kernels_cuda::layout::prepare_activations(
                        format,
                        cols,
                        t.rotation_seed,
                        &x,
                        s,
                        ws[0].x_stride(),
                    )
                    .unwrap_or_else(|e| fail(e));
                    Some(
                        b.stream()
                            .clone_htod(&xp)
                            .unwrap_or_else(|e| fail(format!("{e:?}"))),
                    )
                } else {
                    None
                };
                let mut all: Vec<(KernelPath, String, Tuning, bool)> = paths
                    .iter()
                    .map(|(p, n, t)| (*p, n.clone(), t.clone(), false))
                    .collect();
                if xdev.is_some() {
                    for (name, tuning) in &opts.tunings {
                        all.push((
                            KernelPath::Auto,
                            format!("resident {name}"),
                            tuning.clone(),
                            true,
                        ));
                    }
                }
                for (path, path_name, tuning, resident) in all {
                    let mut y = b.poisoned_output(&ws[0], s).unwrap_or_else(|e| fail(e));
                    let launch =
                        |k: usize, y: &mut kernels_cuda::cudarc::driver::CudaSlice<f32>| {
                            let w = &ws[k % ws.len()];
                            match (&xdev, resident) {
                                (Some(xd), true) => b.gemv_launch_resident_tuned(
                                    w,
                                    &xd.slice(..),
                                    s,
                                    &mut y.slice_mut(..),
                                    &tuning,
                                ),
                                _ => b.gemv_launch_tuned(w, &xa, y, path, &tuning),
                            }
                        };
                    // A path that cannot launch is reported and skipped, not fatal: one
                    // device call times every other path anyway.
                    let timed = time(&b, opts.reps, 5, |k| launch(k, &mut y)).and_then(|secs| {
                        time_queued_host(&b, opts.reps, |k| launch(k, &mut y))
                            .map(|(q, h)| (secs, q, h))
                    });
                    let timed = timed.map(|(secs, q, h)| {
                        let graph = time_graph(&b, opts.reps, 5, |k| launch(k, &mut y))
                            .unwrap_or_else(|e| {
                                eprintln!(
                                    "[{rows} x {cols}] {format} S={s} {path_name}: graph: {e}"
                                );
                                f64::NAN
                            });
                        (secs, q, h, graph)
                    });
                    let (secs, queued, host, graph) = match timed {
                        Ok(t) => t,
                        Err(e) => {
                            eprintln!("[{rows} x {cols}] {format} S={s} {path_name}: FAILED: {e}");
                            continue;
                        }
                    };
                    // Spot check: the first 128 rows of the last output against the oracle.
                    let yh = b
                        .stream()
                        .clone_dtoh(&y)
                        .unwrap_or_else(|e| fail(format!("{e:?}")));
                    let check = check_head(&t, &x, s, &yh);
                    let row = Row {
                        rows,
                        cols,
                        format,
                        s,
                        path: path_name,
                        secs,
                        queued,
                        host,
                        graph,
                        bytes: ws[0].stored_bytes(),
                        check,
                    };
                    let gbps = row.bytes as f64 / secs / 1e9;
                    eprintln!(
                        "[{rows} x {cols}] {format} S={s} {}: {:.1} us, {gbps:.0} GB/s ({:.0}% of copy), {copies} copies, check {check:.1e}",
                        row.path,
                        secs * 1e6,
                        100.0 * gbps / copy
                    );
                    results.push(row);
                }
            }
            drop(ws);
        }
    }
    println!();
    println!(
        "| shape | format | S | kernel | us | weight GB/s | % of copy | us queued | % of copy queued | host us / launch | us graph | % of copy graph | max err (128 rows) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in &results {
        let gbps = r.bytes as f64 / r.secs / 1e9;
        println!(
            "| {} x {} | {} | {} | {} | {:.1} | {:.0} | {:.0}% | {:.1} | {:.0}% | {:.1} | {:.1} | {:.0}% | {:.1e} |",
            r.rows,
            r.cols,
            r.format,
            r.s,
            r.path,
            r.secs * 1e6,
            gbps,
            100.0 * gbps / copy,
            r.queued * 1e6,
            100.0 * (r.bytes as f64 / r.queued / 1e9) / copy,
            r.host * 1e6,
            r.graph * 1e6,
            100.0 * (r.bytes as f64 / r.graph / 1e9) / copy,
            r.check
        );
    }
    if let Ok(dir) = std::env::var("OUT") {
        let mut json = format!(
            "{{\n \"device\": \"{}\",\n \"arch\": \"{}\",\n \"copy_GBps\": {copy},\n \"rows\": [\n",
            b.device_name(),
            b.arch()
        );
        for (k, r) in results.iter().enumerate() {
            json.push_str(&format!(
                "  {{\"O\": {}, \"I\": {}, \"format\": \"{}\", \"S\": {}, \"kernel\": \"{}\", \"us\": {}, \"us_queued\": {}, \"host_us_per_launch\": {}, \"us_graph\": {}, \"bytes\": {}, \"GBps\": {}, \"max_err_head\": {}}}{}\n",
                r.rows,
                r.cols,
                r.format,
                r.s,
                r.path,
                r.secs * 1e6,
                r.queued * 1e6,
                r.host * 1e6,
                if r.graph.is_finite() { format!("{}", r.graph * 1e6) } else { "null".into() },
                r.bytes,
                r.bytes as f64 / r.secs / 1e9,
                if r.check.is_finite() { format!("{}", r.check) } else { "null".into() },
                if k + 1 < results.len() { "," } else { "" }
            ));
        }
        json.push_str(" ]\n}\n");
        let path = std::path::Path::new(&dir).join("bench_gemv.json");
        if let Err(e) = std::fs::write(&path, json) {
            eprintln!("bench_gemv: writing {}: {e}", path.display());
        }
    }
}

/// The plain streaming read: `read_u<U>[p]` reads n uint4 with U loads in flight a thread
/// (grid-stride), XORs them and writes one word a block; `p`: with the L2 prefetch hint.
const READ_SOURCE: &str = r#"
typedef unsigned int u32;
template <bool PF>
__device__ __forceinline__ void ld(const uint4* p, uint4& q) {
    if (PF) {
        asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w) : "l"(p));
    } else {
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w) : "l"(p));
    }
}
template <int U, bool PF>
__device__ __forceinline__ void body(const uint4* __restrict__ p, long long n, u32* __restrict__ out) {
    u32 v = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        uint4 q[U];
#pragma unroll
        for (int k = 0; k < U; ++k) ld<PF>(p + i + k * stride, q[k]);
#pragma unroll
        for (int k = 0; k < U; ++k) v ^= q[k].x ^ q[k].y ^ q[k].z ^ q[k].w;
    }
    for (; i < n; i += stride) {
        uint4 q;
        ld<PF>(p + i, q);
        v ^= q.x ^ q.y ^ q.z ^ q.w;
    }
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) v ^= __shfl_xor_sync(0xffffffffu, v, k);
    __shared__ u32 sm[32];
    if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 r = 0;
        for (int k = 0; k < (int)(blockDim.x >> 5); ++k) r ^= sm[k];
        out[blockIdx.x] = r;
    }
}
#define K(U_, PF_, NAME)                                                                            \
    extern "C" __global__ void __launch_bounds__(256) NAME(const uint4* __restrict__ p, long long n, \
                                                           u32* __restrict__ out) {                 \
        body<U_, PF_>(p, n, out);                                                                   \
    }
K(1, false, read_u1)
K(2, false, read_u2)
K(4, false, read_u4)
K(8, false, read_u8)
K(1, true, read_u1p)
K(2, true, read_u2p)
K(4, true, read_u4p)
K(8, true, read_u8p)
"#;

/// Times the plain streaming read of each size in `opts.read` (rotating over copies that
/// exceed 512 MB together, as the GEMV's weights do), queued and from a graph, and prints
/// one table row per (size, loads in flight, grid, hint) with its share of `copy`.
fn read_bench(b: &CudaBackend, opts: &Opts, copy: f64) -> Result<(), String> {
    use kernels_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
    use kernels_cuda::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
    let ptx = compile_ptx_with_opts(
        READ_SOURCE,
        CompileOptions {
            options: vec![
                format!("--gpu-architecture={}", b.arch()),
                "-std=c++17".to_string(),
            ],
            ..Default::default()
        },
    )
    .map_err(|e| format!("read kernel: {e:?}"))?;
    let module = b
        .context()
        .load_module(ptx)
        .map_err(|e| format!("read module: {e:?}"))?;
    let sms = b
        .context()
        .attribute(
            kernels_cuda::cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
        .map_err(|e| format!("{e:?}"))? as u32;
    let st = b.stream();
    let mut out = st
        .alloc_zeros::<u32>(1 << 22)
        .map_err(|e| format!("{e:?}"))?;
    println!();
    println!(
        "| read bytes | copies | loads a thread | grid | L2 hint | us queued | GB/s queued | % of copy queued | us graph | GB/s graph | % of copy graph |"
    );
    println!("| ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for &bytes in &opts.read {
        let n16 = bytes / 16;
        let copies = ROTATE_BYTES.div_ceil(bytes.max(1)).max(1);
        let bufs: Vec<_> = (0..copies)
            .map(|_| st.alloc_zeros::<u8>(n16 * 16).map_err(|e| format!("{e:?}")))
            .collect::<Result<_, _>>()?;
        for u in [1u32, 2, 4, 8] {
            for pf in [false, true] {
                let name = format!("read_u{u}{}", if pf { "p" } else { "" });
                let f = module
                    .load_function(&name)
                    .map_err(|e| format!("{name}: {e:?}"))?;
                // Grid-stride grids of k blocks a SM, and 0: one block per 256 x U loads.
                for k in [1u32, 2, 4, 8, 0] {
                    let grid = if k == 0 {
                        u32::try_from(n16.div_ceil(256 * u as usize)).map_err(|e| e.to_string())?
                    } else {
                        sms * k
                    };
                    if grid as usize > (1 << 22) {
                        continue;
                    }
                    let cfg = LaunchConfig {
                        grid_dim: (grid, 1, 1),
                        block_dim: (256, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    let n = n16 as i64;
                    let mut launch = |i: usize| -> Result<(), kernels_cuda::CudaError> {
                        let mut l = st.launch_builder(&f);
                        l.arg(&bufs[i % bufs.len()]).arg(&n).arg(&mut out);
                        // SAFETY: read_u<U>(const uint4*, long long, u32*): the buffer holds
                        // n uint4 (16-byte aligned device allocation), `out` 2^22 words, at
                        // least one per block (grids past that are skipped above).
                        unsafe { l.launch(cfg) }.map(|_| ()).map_err(|e| {
                            kernels_cuda::CudaError::Driver {
                                during: "read kernel",
                                detail: format!("{e:?}"),
                            }
                        })
                    };
                    let (q, _) =
                        time_queued_host(b, opts.reps, &mut launch).map_err(|e| e.to_string())?;
                    let g = time_graph(b, opts.reps, 5, &mut launch).unwrap_or(f64::NAN);
                    let moved = (n16 * 16) as f64;
                    let grid_name = if k == 0 {
                        format!("{grid} (one pass)")
                    } else {
                        format!("{k} x {sms} SMs")
                    };
                    println!(
                        "| {} | {copies} | {u} | {grid_name} | {} | {:.1} | {:.0} | {:.1}% | {:.1} | {:.0} | {:.1}% |",
                        n16 * 16,
                        if pf { "128B" } else { "none" },
                        q * 1e6,
                        moved / q / 1e9,
                        100.0 * moved / q / 1e9 / copy,
                        g * 1e6,
                        moved / g / 1e9,
                        100.0 * moved / g / 1e9 / copy
                    );
                }
            }
        }
    }
    Ok(())
}
