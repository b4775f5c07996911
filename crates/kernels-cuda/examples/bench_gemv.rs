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
//! `--tunings` times the tensor-core kernels once per tuning: `default`; `nopdl` (plain
//! launches), `fused` / `unfused` (`--resident` with the split inside the GEMV at S <= 4,
//! or tile_prep + GEMV: the default),
//! `noclass` (int4-g32/g64 in their own chunk), `base` (both, and no L2 prefetch
//! hint, 8-warp blocks everywhere); `nopf` (no L2 prefetch hint); `nowide` (8-warp blocks on
//! small grids too); `s4` (both: session 4's default); `k<n>` / `kauto` (the 16-row GEMV
//! split over k n ways / by `layout::rows_splits`' rule); `diag1` / `diag2` (diagnostic
//! builds, wrong results by design); `rows` (the 16-row
//! tensor-core GEMV; `rowsc1` with one accumulator chain); `t<warps>d<depth>b<min blocks>k<blocks per SM>[m<min stages>][s<x
//! stages>]` (the split-K tile GEMV with these knobs); `w<warps>d<depth>b<min
//! blocks>[u<stage bytes>][p<L2 prefetch bytes, 0 for none>][c]` (the 16-row GEMV; `x` for
//! the source's default, `c` one contiguous k range per warp; see `kernels_cuda::Tuning`).
//! Every row also times the same launches captured once into a CUDA graph and replayed
//! ("us graph": the GPU time without the host's enqueue rate); `--cuda-cores` adds
//! the CUDA-core kernel where the tensor cores serve the shape. Prints a markdown table;
//! with $OUT set also writes $OUT/bench_gemv.json. Without a GPU it prints "skipped: ..."
//! and exits 0.

mod bench_common;

use bench_common::{
    check_head, copy_bandwidth, fail, parse_shapes, time, time_graph, time_queued_host,
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
    // "fused" / "unfused": `gemv_launch_resident` with the split inside the 16-row GEMV at
    // S <= 4 (one launch), or as tile_prep + GEMV (the default); the other columns are the
    // default's kernels.
    if name == "fused" || name == "unfused" {
        return Ok(Tuning {
            resident_fused: name == "fused",
            ..Tuning::default()
        });
    }
    // "kauto": the 16-row GEMV split over k by layout::rows_splits' rule; "k<n>" (2..=8):
    // every 16-row launch split n ways (`Tuning::mma_split_k`).
    if let Some(k) = name.strip_prefix('k')
        && (k == "auto" || k.parse::<u32>().is_ok())
    {
        let t = Tuning {
            mma_split_k: Some(if k == "auto" {
                0
            } else {
                k.parse().unwrap_or(1)
            }),
            ..Tuning::default()
        };
        t.check()?;
        return Ok(t);
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
    // t<warps>d<depth>b<min blocks>k<blocks per SM>[m<min stages>][s<x stages>]: the
    // split-K tile GEMV with these knobs.
    if let Some(rest) = name.strip_prefix('t') {
        let bad = || format!("tuning {name}: expected t<n>d<n>b<n>k<n>[m<n>][s<n>]");
        let mut t = Tuning {
            tiles_from_s: Some(1),
            ..Tuning::default()
        };
        let mut key = 'w';
        let mut num = String::new();
        let set = |k: char, v: &str, t: &mut Tuning| -> Result<(), String> {
            let v: u32 = v.parse().map_err(|_| bad())?;
            match k {
                'w' => t.tile_warps = v,
                'd' => t.tile_depth = v,
                'b' => t.tile_min_blocks = v,
                'k' => t.tile_blocks_per_sm = v,
                'm' => t.tile_min_stages = v,
                's' => t.gemm_stages = v,
                _ => return Err(bad()),
            }
            Ok(())
        };
        for c in rest.chars() {
            if c.is_ascii_digit() {
                num.push(c);
            } else {
                set(key, &num, &mut t)?;
                key = c;
                num.clear();
            }
        }
        set(key, &num, &mut t)?;
        t.check()?;
        return Ok(t);
    }
    // w<warps>d<depth|x>b<min blocks|x>[u<stage bytes>][p<L2 prefetch bytes>][c]: the 16-row
    // tensor-core GEMV with these knobs (`x`: the source's default; `c`: contiguous k ranges).
    let bad = || {
        format!("tuning {name}: expected default, rows, t..., or w<n>d<n|x>b<n|x>[u<n>][p<n>][c]")
    };
    let rest = name.strip_prefix('w').ok_or_else(bad)?;
    let mut t = Tuning {
        tiles_from_s: Some(0),
        ..Tuning::default()
    };
    let mut fields: Vec<(char, String)> = vec![('w', String::new())];
    for c in rest.chars() {
        match (c.is_ascii_digit() || c == 'x', fields.last_mut()) {
            (true, Some((_, v))) => v.push(c),
            _ => fields.push((c, String::new())),
        }
    }
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
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => o.reps = 10,
            "--cuda-cores" => o.cuda_cores = true,
            "--resident" => o.resident = true,
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
