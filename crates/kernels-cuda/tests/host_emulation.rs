//! Runs shaders/cuda/gemv.cu on the CPU: the kernel source compiled as host C++ (TS_HOST,
//! tests/emu/harness.cpp), every lane of every warp executed in turn, every format of the
//! capability table checked against the f64 oracle on the same shapes and batches as the
//! device suite. It exercises all format-specific decoding and indexing without a GPU (the
//! warp shuffle reduction and the launch itself are covered only on the device).
//!
//! The GEMM kernel runs the same way: each block's activation stages copied in turn, each
//! warp's 32 lanes at once, the MMA fragments gathered and multiplied in C++.
//!
//! It also shows, here, that each deliberate defect the device mutation runs use
//! (TS_MUTATE_*) makes the comparison fail for every format it applies to, on the GEMV
//! kernels and on the GEMM.
//!
//! Needs a C++17 compiler (`$CXX`, else `c++`); without one it prints "skipped" and passes.

mod common;

use common::{
    S_LIST, TOLERANCE, check, check_at, format_rng, formats_under_test, gemm_formats_under_test,
    gemm_shapes, inputs, run_seed, shapes, tensor,
};
use kernels_cuda::caps::{self, Op, fmt_id};
use kernels_cuda::layout::{self, GemmLayout};
use kernels_cuda::{GemmPrecision, Tuning};
use quant_core::oracle::{POISON, reference_gemm, worst_error};
use quant_core::{EncodedTensor, Format, ScaleLayout};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

type EmuFn = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    *const u8,
    i64,
    *const u8,
    i64,
    *const f32,
    i64,
    *mut f32,
    i64,
    i32,
    i32,
    i32,
    i32,
) -> i32;

type EmuMmaFn = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    i32,
    *const u8,
    i64,
    *const u8,
    i64,
    *const u16,
    i64,
    *const f32,
    i64,
    *mut f32,
    i64,
    i32,
    i32,
    i32,
) -> i32;

type EmuGemmFn = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    i32,
    i32,
    *const u8,
    i64,
    *const u8,
    i64,
    *const u16,
    i64,
    *const f32,
    i64,
    *mut f32,
    i64,
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
) -> i32;

struct Emulator {
    /// Built with TS_SEG_P: the tensor-core GEMV reads a split with one p per segment
    /// (`layout::split_activations` with `SplitScale::Segment`, what presplit producers write).
    segment_p: bool,
    _lib: libloading::Library,
    f: EmuFn,
    mma: EmuMmaFn,
    gemm: EmuGemmFn,
}

impl Emulator {
    /// The process's emulator of `tag`, built on first use. Tests run in parallel and share
    /// one build per tag: two compilers writing the same library at once would race.
    fn get(tag: &str, defines: &[&str]) -> Option<&'static Emulator> {
        static BUILT: Mutex<Vec<(String, Option<&'static Emulator>)>> = Mutex::new(Vec::new());
        let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, e)) = built.iter().find(|(t, _)| t == tag) {
            return *e;
        }
        let e = Emulator::build(tag, defines).map(|e| &*Box::leak(Box::new(e)));
        built.push((tag.to_string(), e));
        e
    }

    /// Builds the harness with the given extra `-D` symbols; `None` when no compiler exists.
    fn build(tag: &str, defines: &[&str]) -> Option<Emulator> {
        let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let shaders = manifest.join("../../shaders/cuda");
        let harness = manifest.join("tests/emu/harness.cpp");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gemv_emu_{tag}.so"));
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
        let mut cmd = Command::new(&cxx);
        cmd.args([
            "-std=c++17",
            "-O1",
            "-fPIC",
            "-shared",
            "-Wall",
            "-Wno-unknown-pragmas",
            "-Werror",
        ])
        .arg("-I")
        .arg(&shaders)
        .arg(&harness)
        .arg("-o")
        .arg(&out);
        for d in defines {
            cmd.arg(format!("-D{d}"));
        }
        let output = match cmd.output() {
            Ok(o) => o,
            Err(e) => {
                println!("skipped: no C++ compiler ({cxx}: {e})");
                return None;
            }
        };
        assert!(
            output.status.success(),
            "compiling gemv.cu as host C++ failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // SAFETY: the library is the harness just compiled from this repository's sources;
        // its initialisers are the C++ runtime's.
        let lib = unsafe { libloading::Library::new(&out) }.expect("load the emulator");
        // SAFETY: ts_emu_gemv is declared `extern "C"` in harness.cpp with exactly EmuFn's
        // parameter list.
        let f = unsafe {
            *lib.get::<EmuFn>(b"ts_emu_gemv\0")
                .expect("ts_emu_gemv symbol")
        };
        // SAFETY: ts_emu_gemv_mma is declared `extern "C"` in harness.cpp with exactly
        // EmuMmaFn's parameter list.
        let mma = unsafe {
            *lib.get::<EmuMmaFn>(b"ts_emu_gemv_mma\0")
                .expect("ts_emu_gemv_mma symbol")
        };
        // SAFETY: ts_emu_gemm is declared `extern "C"` in harness.cpp with exactly
        // EmuGemmFn's parameter list.
        let gemm = unsafe {
            *lib.get::<EmuGemmFn>(b"ts_emu_gemm\0")
                .expect("ts_emu_gemm symbol")
        };
        Some(Emulator {
            segment_p: defines.contains(&"TS_SEG_P"),
            _lib: lib,
            f,
            mma,
            gemm,
        })
    }

    /// y[S, O] of `t` at activations `x` (logical domain), through the kernels' own host
    /// preparation (layout.rs) and the kernel source.
    fn gemv(&self, t: &EncodedTensor, x: &[f32], s: usize) -> Vec<f32> {
        let cap = caps::lookup(Op::Gemv, t.format, s).expect("in the table");
        let sh = layout::launch_shape(t.format, t.rows, t.cols).expect("shape");
        let xp = layout::prepare_activations(
            t.format,
            t.cols,
            t.rotation_seed,
            x,
            s,
            sh.x_stride as usize,
        )
        .expect("activations");
        let mut y = vec![POISON; s * t.rows];
        // SAFETY: every pointer comes with its length; the harness copies the inputs into
        // aligned buffers and writes exactly S * O outputs into `y`.
        let rc = unsafe {
            (self.f)(
                cap.kernel.fmt as i32,
                cap.kernel.group as i32,
                s as i32,
                t.weights.as_ptr(),
                t.weights.len() as i64,
                t.scales.as_ptr(),
                t.scales.len() as i64,
                xp.as_ptr(),
                xp.len() as i64,
                y.as_mut_ptr(),
                sh.row_bytes,
                sh.rows,
                sh.cols,
                sh.x_stride,
                sh.sc_row,
            )
        };
        assert_eq!(rc, 0, "emulator refused {} S={s}", t.format);
        y
    }

    /// The tensor-core kernel's y, where the capability row has one for this shape; with
    /// `classes`, the group-class chunk of the 16-row GEMV (`caps::rows_chunk`), only where
    /// it differs from the row's own chunk.
    fn gemv_mma(&self, t: &EncodedTensor, x: &[f32], s: usize, classes: bool) -> Option<Vec<f32>> {
        let cap = caps::lookup(Op::Gemv, t.format, s).expect("in the table");
        let sh = layout::launch_shape(t.format, t.rows, t.cols).expect("shape");
        let base = cap.mma_for(sh.row_bytes as usize)?;
        let m = if classes {
            let c = caps::rows_chunk(cap.kernel, base, s, sh.row_bytes as usize);
            if c == base {
                return None;
            }
            c
        } else {
            base
        };
        let xs = sh.x_stride as usize;
        let xp = layout::prepare_activations(t.format, t.cols, t.rotation_seed, x, s, xs)
            .expect("activations");
        let nib = caps::nibble_codes(cap.kernel.fmt);
        let scale = if self.segment_p {
            layout::SplitScale::Segment
        } else {
            layout::SplitScale::Row
        };
        let (xh, xa) = layout::split_activations(&xp, s, xs, nib, scale).expect("split");
        let mut y = vec![POISON; s * t.rows];
        // SAFETY: every pointer comes with its length; the harness copies the inputs into
        // aligned buffers and writes exactly S * O outputs into `y`.
        let rc = unsafe {
            (self.mma)(
                cap.kernel.fmt as i32,
                cap.kernel.group as i32,
                m.chunk_bytes as i32,
                s as i32,
                t.weights.as_ptr(),
                t.weights.len() as i64,
                t.scales.as_ptr(),
                t.scales.len() as i64,
                xh.as_ptr(),
                xh.len() as i64,
                xa.as_ptr(),
                xa.len() as i64,
                y.as_mut_ptr(),
                sh.row_bytes,
                sh.rows,
                sh.x_stride,
                sh.sc_row,
            )
        };
        assert_eq!(rc, 0, "emulator refused the tensor-core {} S={s}", t.format);
        Some(y)
    }

    /// The GEMM kernel's y at `precision` with `nt` n8 tiles a block, the activations in the
    /// warpgroup MMA's core matrices (`canonical`) or in fragment order, where the capability
    /// table has a GEMM row and the shape takes the tensor-core kernel.
    fn gemm(
        &self,
        t: &EncodedTensor,
        x: &[f32],
        s: usize,
        precision: GemmPrecision,
        nt: usize,
        canonical: bool,
    ) -> Option<Vec<f32>> {
        let cap = caps::lookup(Op::Gemm, t.format, s).ok()?;
        let sh = layout::launch_shape(t.format, t.rows, t.cols).expect("shape");
        let m = cap.mma_for(sh.row_bytes as usize)?;
        let xs = sh.x_stride as usize;
        let xp = layout::prepare_activations(t.format, t.cols, t.rotation_seed, x, s, xs)
            .expect("activations");
        let l = GemmLayout {
            chunk_bytes: m.chunk_bytes as usize,
            nibbles: caps::nibble_codes(cap.kernel.fmt),
            parts: precision.parts() as usize,
            nt,
            canonical,
        };
        let (xg, xa) = layout::gemm_activations(&xp, s, xs, &l).expect("GEMM layout");
        let mut y = vec![POISON; s * t.rows];
        // SAFETY: every pointer comes with its length; the harness copies the inputs into
        // aligned buffers and writes exactly S * O outputs into `y`.
        let rc = unsafe {
            (self.gemm)(
                cap.kernel.fmt as i32,
                cap.kernel.group as i32,
                m.chunk_bytes as i32,
                // 3: one part, dequantized decoding (harness.cpp's TS_EMU_GEMM_DQ).
                if precision.dequantizes(cap.kernel.fmt) {
                    3
                } else {
                    l.parts as i32
                },
                nt as i32,
                t.weights.as_ptr(),
                t.weights.len() as i64,
                t.scales.as_ptr(),
                t.scales.len() as i64,
                xg.as_ptr(),
                xg.len() as i64,
                xa.as_ptr(),
                xa.len() as i64,
                y.as_mut_ptr(),
                sh.row_bytes,
                sh.rows,
                s as i32,
                sh.x_stride,
                sh.sc_row,
                l.tiles(s) as i32,
                l.padded(s) as i32,
            )
        };
        assert_eq!(rc, 0, "emulator refused the GEMM of {} S={s}", t.format);
        Some(y)
    }

    /// Every kernel that serves this shape: the CUDA-core one, and the tensor-core one
    /// where it applies.
    fn all_paths(&self, t: &EncodedTensor, x: &[f32], s: usize) -> Vec<(&'static str, Vec<f32>)> {
        let mut out = vec![("cuda-cores", self.gemv(t, x, s))];
        if let Some(y) = self.gemv_mma(t, x, s, false) {
            out.push(("tensor-cores", y));
        }
        if let Some(y) = self.gemv_mma(t, x, s, true) {
            out.push(("tensor-cores, group classes", y));
        }
        out
    }
}

#[test]
fn every_format_matches_the_oracle() {
    every_format_matches_the_oracle_with("clean", &[]);
}

/// The 16-row tensor-core GEMV's optional schedules: 16-byte pipeline stages four deep
/// (`Tuning::mma_stage`: one k-block a stage instead of two) and one contiguous range of
/// k-blocks per warp (`Tuning::mma_contig`) instead of every warps-th k-block.
#[test]
fn every_format_matches_the_oracle_with_other_schedules() {
    every_format_matches_the_oracle_with(
        "stage16",
        &["TS_MMA_STAGE=16", "TS_MMA_DEPTH=4", "TS_MMA_CONTIG"],
    );
}

/// The 16-row tensor-core GEMV with 12 warps a block (small grids at S <= 4,
/// `Tuning::mma_small_grid_warps`): k-blocks split over a number of warps that does not
/// divide them.
#[test]
fn every_format_matches_the_oracle_with_12_warps() {
    every_format_matches_the_oracle_with("warps12", &["TS_MMA_WARPS=12"]);
}

/// The persistent 16-row GEMV (`Build::GemvMmaPersist`, `Tuning::mma_persistent`, S <= 4):
/// grids of 3, 5 and 7 blocks walking equal shares of the (tile, round) units, so tiles are
/// split between blocks (partials summed in part order) and blocks span tiles (the warps'
/// rings run across the boundary); 2-warp blocks make a tile several rounds long, 12-warp
/// ones leave warps without k-blocks in a tile's last round; a grid of 100000 gives every
/// unit its own block.
/// The 16-row tensor-core GEMV built with TS_SEG_P (`Tuning::mma_segment_p`, the presplit
/// launch) on a split with one p per 128-column segment, which it folds per k-block.
#[test]
fn every_format_matches_the_oracle_segment_p() {
    every_format_matches_the_oracle_with("segp", &["TS_SEG_P"]);
}

#[test]
fn every_format_matches_the_oracle_persistent() {
    every_format_matches_the_oracle_with("persist5w2", &["TS_EMU_PERSIST=5", "TS_MMA_WARPS=2"]);
    every_format_matches_the_oracle_with("persist3", &["TS_EMU_PERSIST=3"]);
    every_format_matches_the_oracle_with("persist7w12", &["TS_EMU_PERSIST=7", "TS_MMA_WARPS=12"]);
    every_format_matches_the_oracle_with(
        "persist3w1s16",
        &[
            "TS_EMU_PERSIST=3",
            "TS_MMA_WARPS=1",
            "TS_MMA_STAGE=16",
            "TS_MMA_DEPTH=3",
        ],
    );
    every_format_matches_the_oracle_with("persistall", &["TS_EMU_PERSIST=100000"]);
}

fn every_format_matches_the_oracle_with(tag: &str, defines: &[&str]) {
    let Some(emu) = Emulator::get(tag, defines) else {
        return;
    };
    let seed = run_seed();
    println!("seed {seed} (replay with TESSERA_SEED={seed})");
    let mut failures = Vec::new();
    let mut runs = 0;
    for format in formats_under_test() {
        let mut rng = format_rng(seed, format);
        let mut worst = [0f64; 3];
        let mut mma_runs = 0;
        for (rows, cols) in shapes(format) {
            let t = tensor(format, rows, cols, &mut rng);
            for s in S_LIST {
                let x = inputs(s, cols, &mut rng);
                for (k, (path, y)) in emu.all_paths(&t, &x, s).into_iter().enumerate() {
                    runs += 1;
                    mma_runs += usize::from(k > 0);
                    match check(&t, &x, s, &y) {
                        Ok(e) => worst[k] = worst[k].max(e),
                        Err(msg) => failures.push(format!("{msg} ({path})")),
                    }
                }
            }
        }
        println!(
            "{format:<22} worst error {:.2e} (cuda cores), {:.2e} (tensor cores, {mma_runs} runs), {:.2e} (group classes)",
            worst[0], worst[1], worst[2]
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn fp8_nan_poisons_exactly_its_row() {
    let Some(emu) = Emulator::get("clean", &[]) else {
        return;
    };
    let seed = run_seed();
    println!("seed {seed}");
    for format in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0] {
        let mut rng = format_rng(seed, format);
        // I = 300: CUDA cores only; I = 1024: both kernels.
        for (rows, cols) in [(131, 300), (131, 1024)] {
            let mut t = tensor(format, rows, cols, &mut rng);
            t.weights[5 * cols + 17] = 0x7F;
            t.weights[130 * cols + cols - 1] = 0xFF;
            for s in [1, 3, 16] {
                let x = inputs(s, cols, &mut rng);
                for (path, y) in emu.all_paths(&t, &x, s) {
                    check(&t, &x, s, &y).unwrap();
                    for k in 0..s {
                        for o in 0..rows {
                            assert_eq!(
                                y[k * rows + o].is_nan(),
                                o == 5 || o == 130,
                                "{format} {path} [{rows}, {cols}] s={k} o={o}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Whether the tensor-core GEMM serves this tensor (else the CUDA-core fallback would).
fn takes_tensor_core_gemm(t: &EncodedTensor) -> bool {
    let sh = layout::launch_shape(t.format, t.rows, t.cols).expect("shape");
    caps::lookup(Op::Gemm, t.format, 17).is_ok_and(|c| c.mma_for(sh.row_bytes as usize).is_some())
}

/// The GEMM configurations the emulator runs: the library's default tiling for every
/// precision, and every precision with 4 n8 tiles a block (the F16 default before
/// session 19).
fn gemm_configs() -> Vec<(GemmPrecision, usize)> {
    let t = Tuning::default();
    let default = GemmPrecision::ALL.map(|p| (p, t.gemm_nt(p.parts()) as usize));
    let four = GemmPrecision::ALL.map(|p| (p, 4));
    default.into_iter().chain(four).collect()
}

#[test]
fn gemm_matches_the_oracle() {
    let Some(emu) = Emulator::get("clean", &[]) else {
        return;
    };
    let seed = run_seed();
    println!("seed {seed} (replay with TESSERA_SEED={seed})");
    let mut failures = Vec::new();
    let mut runs = 0;
    for format in gemm_formats_under_test() {
        let mut rng = format_rng(seed, format);
        let mut worst = [0f64; 2 * GemmPrecision::ALL.len()];
        let mut shapes_run = 0;
        for (rows, cols) in gemm_shapes(format) {
            let t = tensor(format, rows, cols, &mut rng);
            if !takes_tensor_core_gemm(&t) {
                continue;
            }
            shapes_run += 1;
            for s in [17, 100] {
                let x = inputs(s, cols, &mut rng);
                for (k, (precision, nt)) in gemm_configs().into_iter().enumerate() {
                    let y = emu
                        .gemm(&t, &x, s, precision, nt, false)
                        .unwrap_or_else(|| {
                            panic!("{format} [{rows}, {cols}]: no tensor-core GEMM")
                        });
                    runs += 1;
                    match check_at(&t, &x, s, &y, precision.tolerance()) {
                        Ok(e) => worst[k] = worst[k].max(e),
                        Err(msg) => failures.push(format!("{msg} ({precision:?}, nt {nt})")),
                    }
                }
            }
        }
        assert!(shapes_run >= 3, "{format}: only {shapes_run} GEMM shapes");
        println!(
            "{format:<22} GEMM worst error {:.2e} / {:.2e} / {:.2e} (split / f16 / f16 dequantized), nt 4: {:.2e} / {:.2e} / {:.2e}",
            worst[0], worst[1], worst[2], worst[3], worst[4], worst[5]
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The dequantized GEMM (`GemmPrecision::F16Dequant`) on rows whose weights sit far below
/// or above f16's range (1e-9 and 1e7 times the others): each row's power of two keeps its
/// decoded weights finite and normal, so every row stays within the declared bound. With
/// every power forced to 1 (`TS_MUTATE_ROW_POW_ONE`) the formats with f32 or UE8M0 scales
/// fail on the same tensors: the test sees the powers. (mq4-g256-v2 and mq4c-g256 store f16
/// scales, so their rows stay inside f16's range by construction; they must pass.)
#[test]
fn dequantized_gemm_keeps_tiny_and_huge_rows() {
    let (Some(emu), Some(ones)) = (
        Emulator::get("wgmma", &["TS_WGMMA"]),
        Emulator::get("rowpow1", &["TS_WGMMA", "TS_MUTATE_ROW_POW_ONE"]),
    ) else {
        return;
    };
    let seed = run_seed();
    println!("seed {seed} (replay with TESSERA_SEED={seed})");
    let precision = GemmPrecision::F16Dequant;
    let mut ran = 0;
    for format in gemm_formats_under_test() {
        let fmt = caps::lookup(Op::Gemm, format, 17).map(|c| c.kernel.fmt);
        if !fmt.is_ok_and(|f| precision.dequantizes(f)) {
            continue;
        }
        let mut rng = format_rng(seed ^ 0x7159, format);
        let (rows, cols) = gemm_shapes(format)[0];
        let mut w = quant_core::testdata::weights(&mut rng, rows, cols);
        // Rows 0 mod 3 tiny, 1 mod 3 huge; the f16-scaled formats (mq4-g256-v2, mq4c-g256)
        // keep their headers within f16's normals: 1e-3 and 1e2 (at 1e3 an outlier row, 20
        // times the others and spread by the rotation, passed f16's 65504 in a run).
        let f16_scales = matches!(format, Format::Mq4G256V2 | Format::Mq4cG256);
        let (tiny, huge) = if f16_scales { (1e-3, 1e2) } else { (1e-9, 1e7) };
        for (r, row) in w.chunks_mut(cols).enumerate() {
            let k = match r % 3 {
                0 => tiny,
                1 => huge,
                _ => 1.0,
            };
            row.iter_mut().for_each(|v| *v *= k);
        }
        let opts = quant_core::EncodeOptions {
            rotation_seed: rng.next_u64(),
            ..Default::default()
        };
        let t = quant_core::encode(format, rows, cols, &w, &opts).expect("encode");
        if !takes_tensor_core_gemm(&t) {
            continue;
        }
        let s = 17;
        let x = inputs(s, cols, &mut rng);
        let y = emu.gemm(&t, &x, s, precision, 8, true).expect("GEMM");
        let e = check_at(&t, &x, s, &y, precision.tolerance()).unwrap_or_else(|m| panic!("{m}"));
        let bad = ones.gemm(&t, &x, s, precision, 8, true).expect("GEMM");
        let r = reference_gemm(&t.view(), &x, s);
        let without = worst_error(&bad, &r).error;
        println!("{format:<22} worst error {e:.2e}; every power 1: {without:.2e}");
        assert!(
            f16_scales || without > precision.tolerance(),
            "{format}: rows out of f16's range passed without their powers ({without:.2e})"
        );
        ran += 1;
    }
    assert!(ran >= 4, "only {ran} formats ran");
}

/// The warpgroup-MMA GEMM (`-DTS_WGMMA`: every GEMM format on activations laid out as core
/// matrices; the scaled ones fold each k-block's products from a second accumulator), each
/// warp's m64n64k16 share emulated alone, against the oracle; and the same build fed the
/// fragment-order layout fails, so the test sees the layout.
#[test]
fn wgmma_gemm_matches_the_oracle() {
    let Some(emu) = Emulator::get("wgmma", &["TS_WGMMA"]) else {
        return;
    };
    let seed = run_seed();
    println!("seed {seed} (replay with TESSERA_SEED={seed})");
    let mut failures = Vec::new();
    let mut runs = 0;
    for format in gemm_formats_under_test() {
        let mut rng = format_rng(seed ^ 0x3767, format);
        let mut worst = [0f64; GemmPrecision::ALL.len()];
        for (rows, cols) in gemm_shapes(format) {
            let t = tensor(format, rows, cols, &mut rng);
            if !takes_tensor_core_gemm(&t) {
                continue;
            }
            for s in [17, 100] {
                let x = inputs(s, cols, &mut rng);
                for (k, precision) in GemmPrecision::ALL.into_iter().enumerate() {
                    let y = emu
                        .gemm(&t, &x, s, precision, 8, true)
                        .expect("tensor-core GEMM");
                    runs += 1;
                    match check_at(&t, &x, s, &y, precision.tolerance()) {
                        Ok(e) => worst[k] = worst[k].max(e),
                        Err(msg) => failures.push(format!("{msg} ({precision:?})")),
                    }
                    let wrong = emu
                        .gemm(&t, &x, s, precision, 8, false)
                        .expect("tensor-core GEMM");
                    assert!(
                        check_at(&t, &x, s, &wrong, precision.tolerance()).is_err(),
                        "{format} [{rows}, {cols}] S={s}: the fragment-order layout passed"
                    );
                }
            }
        }
        println!(
            "{format:<22} warpgroup GEMM worst error {:.2e} (split), {:.2e} (f16), {:.2e} (f16 dequantized)",
            worst[0], worst[1], worst[2]
        );
    }
    assert!(runs >= 12, "only {runs} runs");
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn gemm_fp8_nan_poisons_exactly_its_row() {
    let Some(emu) = Emulator::get("clean", &[]) else {
        return;
    };
    let seed = run_seed();
    println!("seed {seed}");
    for format in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0] {
        let mut rng = format_rng(seed, format);
        let (rows, cols) = (131, 1024);
        let mut t = tensor(format, rows, cols, &mut rng);
        t.weights[5 * cols + 17] = 0x7F;
        t.weights[130 * cols + cols - 1] = 0xFF;
        let s = 20;
        let x = inputs(s, cols, &mut rng);
        for (precision, nt) in gemm_configs() {
            let y = emu
                .gemm(&t, &x, s, precision, nt, false)
                .expect("tensor-core GEMM");
            check_at(&t, &x, s, &y, precision.tolerance()).unwrap();
            for k in 0..s {
                for o in 0..rows {
                    assert_eq!(
                        y[k * rows + o].is_nan(),
                        o == 5 || o == 130,
                        "{format} {precision:?} s={k} o={o}"
                    );
                }
            }
        }
    }
}

/// Which formats a mutation must break, and a shape on which it can: more than one group,
/// tile column or block per row, so "the next group" is a different one.
fn mutation_applies(define: &str, format: Format) -> bool {
    let kernel = caps::lookup(Op::Gemv, format, 1).unwrap().kernel.fmt;
    let nibbles = matches!(
        kernel,
        fmt_id::INT4_ROW
            | fmt_id::INT4_G
            | fmt_id::HFQ4
            | fmt_id::MQ4_V2
            | fmt_id::MQ4C
            | fmt_id::MQ4K
            | fmt_id::MXFP4
    );
    match define {
        "TS_MUTATE_SWAP_NIBBLES" => nibbles,
        "TS_MUTATE_GROUP_OFF_BY_ONE" => !matches!(
            format.spec().scales,
            ScaleLayout::None | ScaleLayout::PerRow(_)
        ),
        "TS_MUTATE_SCALE_1PCT" => format.spec().scales != ScaleLayout::None,
        other => panic!("unknown mutation {other}"),
    }
}

#[test]
fn each_mutation_breaks_every_format_it_touches() {
    let seed = run_seed();
    println!("seed {seed}");
    for define in [
        "TS_MUTATE_SWAP_NIBBLES",
        "TS_MUTATE_GROUP_OFF_BY_ONE",
        "TS_MUTATE_SCALE_1PCT",
    ] {
        let Some(emu) = Emulator::get(&define.to_lowercase(), &[define]) else {
            return;
        };
        // The warpgroup-MMA build (the GEMM's default on sm_90) under the same defect.
        let Some(emu_wg) = Emulator::get(
            &format!("{}_wgmma", define.to_lowercase()),
            &[define, "TS_WGMMA"],
        ) else {
            return;
        };
        for format in formats_under_test()
            .into_iter()
            .filter(|&f| mutation_applies(define, f))
        {
            let mut rng = format_rng(seed, format);
            let (rows, cols) = (130, 1024);
            let t = tensor(format, rows, cols, &mut rng);
            let x = inputs(2, cols, &mut rng);
            for (path, y) in emu.all_paths(&t, &x, 2) {
                let w = worst_error(&y, &reference_gemm(&t.view(), &x, 2));
                println!("{define} {format:<22} {path:<12} error {:.2e}", w.error);
                assert!(
                    w.error > TOLERANCE,
                    "{define} went unnoticed on {format} ({path}, error {:.2e})",
                    w.error
                );
            }
            // The GEMM, where the format has one, at every precision.
            let s = 20;
            let x = inputs(s, cols, &mut rng);
            let reference = reference_gemm(&t.view(), &x, s);
            // The mma.sync build in the library's tilings, then the warpgroup build.
            let runs = gemm_configs()
                .into_iter()
                .map(|(precision, nt)| (emu, precision, nt, false, "gemm"))
                .chain(
                    GemmPrecision::ALL
                        .map(|precision| (emu_wg, precision, 8, true, "warpgroup gemm")),
                );
            for (e, precision, nt, canonical, path) in runs {
                let Some(y) = e.gemm(&t, &x, s, precision, nt, canonical) else {
                    continue;
                };
                let w = worst_error(&y, &reference);
                println!(
                    "{define} {format:<22} {path} {precision:?}/{nt} error {:.2e}",
                    w.error
                );
                assert!(
                    w.error > precision.tolerance(),
                    "{define} went unnoticed on {format} ({path} {precision:?}/{nt}, error {:.2e})",
                    w.error
                );
            }
        }
    }
}
