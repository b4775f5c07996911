//! The card's own tensor-core ceilings, and a check of the warpgroup MMA's operand layouts.
//!
//! Prints, for the device at hand:
//! - `mma.sync.m16n8k16` (f16 x f16 -> f32, the instruction the GEMM and the GEMVs issue)
//!   at full occupancy, four independent accumulators a warp: TFLOP/s;
//! - `wgmma.mma_async` m64n64k16 / m64n128k16 with A from registers and B from shared
//!   memory (sm_90a): TFLOP/s;
//! - whether one m64n64k16 with A in registers (the m16n8k16 A fragment of each warp's 16
//!   rows) and B in the no-swizzle canonical layout (core matrices of 8 columns x 16 bytes:
//!   the two k halves `lbo` bytes apart, n8 groups `sbo` bytes apart) reproduces a host
//!   product exactly, for the descriptor's two readings of those offsets.
//!
//! Why: the GEMM's target is a share of cuBLAS, which issues `wgmma`; this says how much of
//! the card `mma.sync` can reach at all, measured here rather than quoted.
//!
//! Usage: `tensor_probe` (no arguments). Without a CUDA device it says so and exits 0.
//! `tensor_probe --ptxas` only compiles the issue formats' GEMM builds, `mma.sync` and
//! warpgroup, and their 16-row GEMV builds at S = 1 and 16, to SASS with NVRTC and prints
//! ptxas's report (registers, spills, warnings);
//! it needs libnvrtc, not a device.

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg, sys};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use half::f16;

/// `{%a, %a+1, .., %b}` of an inline-asm operand list.
fn regs(a: usize, b: usize) -> String {
    let v: Vec<String> = (a..=b).map(|i| format!("%{i}")).collect();
    format!("{{{}}}", v.join(","))
}

/// One `wgmma` m64nNk16 with A in registers: a device function over `float (&d)[N / 2]`
/// (`wg<N>`, and with B transposed `wg<N>t`).
fn wgmma_fn(n: usize) -> String {
    wgmma_fn_t(n, false) + &wgmma_fn_t(n, true)
}

fn wgmma_fn_t(n: usize, trans: bool) -> String {
    let nd = n / 2;
    let outs: Vec<String> = (0..nd).map(|i| format!("\"+f\"(d[{i}])")).collect();
    format!(
        r#"
__device__ __forceinline__ void wg{n}{suffix}(float (&d)[{nd}], const u32 (&a)[4], u64 desc, int scale) {{
    asm volatile("{{ .reg .pred p; setp.ne.b32 p, %{sc}, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {d}, {a}, %{de}, p, 1, 1, {tb}; }}"
                 : {outs}
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale));
}}
"#,
        d = regs(0, nd - 1),
        a = regs(nd, nd + 3),
        de = nd + 4,
        sc = nd + 5,
        outs = outs.join(", "),
        suffix = if trans { "t" } else { "" },
        tb = u8::from(trans),
    )
}

/// `wg_peak<N>`: a warpgroup issuing m64nNk16 MMAs from one B tile, in groups of four with
/// one group left in flight while the next is issued (the GEMM's pattern).
fn peak_kernel(n: usize) -> String {
    let nd = n / 2;
    format!(
        r#"
extern "C" __global__ void wg_peak{n}(float* out, int iters) {{
    __shared__ __align__(128) u16 bs[128 * 16];
    for (int i = threadIdx.x; i < 128 * 16; i += blockDim.x) bs[i] = (u16)0x2000;
    proxy_fence();
    __syncthreads();
    u32 a[4] = {{0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u}};
    float d[{nd}];
    for (int i = 0; i < {nd}; ++i) d[i] = 0.0f;
    const u64 desc = desc_of(bs, 128, 256);
    for (int i = 0; i < iters; i += 4) {{
        wg_fence();
        wg{n}(d, a, desc, 1);
        wg{n}(d, a, desc, 1);
        wg{n}(d, a, desc, 1);
        wg{n}(d, a, desc, 1);
        wg_commit();
        wg_wait1();
    }}
    wg_wait0();
    float s = 0.0f;
    for (int i = 0; i < {nd}; ++i) s += d[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}}
"#
    )
}

fn source() -> String {
    let mut s = String::from(
        r#"
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;
__device__ __forceinline__ u64 desc_of(const void* p, u32 lbo, u32 sbo) {
    u32 a = (u32)__cvta_generic_to_shared(p);
    return (u64)((a & 0x3FFFF) >> 4) | ((u64)((lbo >> 4) & 0x3FFF) << 16) | ((u64)((sbo >> 4) & 0x3FFF) << 32);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
"#,
    );
    s += &wgmma_fn(64);
    s += &wgmma_fn(128);
    s += r#"
// B element (k, n) of a k16 x N tile at byte (k / 8) * 128 + (n / 8) * 256 + (n % 8) * 16 + (k % 8) * 2.
__device__ __forceinline__ int canon(int k, int n) { return (k >> 3) * 128 + (n >> 3) * 256 + (n & 7) * 16 + (k & 7) * 2; }

// D [64 x 64] = A [64 x 16] (row-major halves, as u32 pairs) . Bt [64 x 16]^T (row n = column n of B).
extern "C" __global__ void wg_check(const u32* A, const u16* Bt, float* D, u32 lbo, u32 sbo, int trans) {
    __shared__ __align__(128) u16 bs[64 * 16];
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    for (int i = tid; i < 64 * 16; i += 128) {
        const int n = i / 16, k = i % 16;
        bs[canon(k, n) / 2] = Bt[n * 16 + k];
    }
    proxy_fence();
    __syncthreads();
    u32 a[4];
    a[0] = A[(16 * w + g) * 8 + t];
    a[1] = A[(16 * w + g + 8) * 8 + t];
    a[2] = A[(16 * w + g) * 8 + t + 4];
    a[3] = A[(16 * w + g + 8) * 8 + t + 4];
    float d[32];
    for (int i = 0; i < 32; ++i) d[i] = 0.0f;
    wg_fence();
    if (trans)
        wg64t(d, a, desc_of(bs, lbo, sbo), 0);
    else
        wg64(d, a, desc_of(bs, lbo, sbo), 0);
    wg_commit();
    wg_wait0();
    for (int j = 0; j < 8; ++j)
        for (int e = 0; e < 4; ++e) D[(16 * w + g + 8 * (e >> 1)) * 64 + 8 * j + 2 * t + (e & 1)] = d[4 * j + e];
}

"#;
    for n in [64, 128] {
        s += &peak_kernel(n);
    }
    s += r#"
extern "C" __global__ void mma_peak(float* out, int iters) {
    const u32 a0 = 0x3c003c00u, b0 = 0x20002000u;
    float c[4][4];
    for (int k = 0; k < 4; ++k)
        for (int e = 0; e < 4; ++e) c[k][e] = 0.0f;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < 4; ++k)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
                         : "r"(a0), "r"(a0), "r"(a0), "r"(a0), "r"(b0), "r"(b0));
    }
    float s = 0.0f;
    for (int k = 0; k < 4; ++k)
        for (int e = 0; e < 4; ++e) s += c[k][e];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"#;
    s
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One NVRTC compile of `src` with `opts` plus `--ptxas-options=-v`: whether it compiled,
/// ptxas's report (registers, spills, warnings) and the cubin's size.
fn ptxas(src: &std::ffi::CStr, opts: &[String]) -> Res<(bool, String, usize)> {
    use cudarc::nvrtc::{result, sys as nv};
    let mut opts = opts.to_vec();
    opts.push("--ptxas-options=-v".into());
    let prog = result::create_program(src, None)?;
    // SAFETY: `prog` was just created from a valid source; the options are plain strings.
    let compiled = unsafe { result::compile_program(prog, &opts) };
    // SAFETY: as above; the log exists whether or not the compile succeeded.
    let log = unsafe { result::get_program_log(prog) }?;
    let mut cubin = 0usize;
    // SAFETY: `prog` is a program NVRTC created; the size is written to `cubin` (left 0
    // where the compile failed).
    let _ = unsafe { nv::nvrtcGetCUBINSize(prog, &mut cubin) };
    // SAFETY: `prog` is not used after this.
    unsafe { result::destroy_program(prog) }?;
    let log: Vec<u8> = log
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    Ok((
        compiled.is_ok(),
        String::from_utf8_lossy(&log).into_owned(),
        cubin,
    ))
}

/// ptxas's report on the issue formats' GEMM builds, with and without the warpgroup MMA,
/// and on their 16-row GEMV builds at S = 1 and 16, compiled by NVRTC to SASS.
fn ptxas_report() -> Res<()> {
    use kernels_cuda::caps::{KernelId, MmaKernel, fmt_id};
    use kernels_cuda::compile::{Build, GEMV_NVRTC_SOURCE, ModuleKey};
    // This probe's own kernels first.
    let own = std::ffi::CString::new(source())?;
    let (ok, log, _) = ptxas(&own, &["--gpu-architecture=sm_90a".to_string()])?;
    println!("== the probe's kernels: compile {ok:?}\n{log}");
    let src = std::ffi::CString::new(GEMV_NVRTC_SOURCE)?;
    let issue_formats = [
        ("int4-row", fmt_id::INT4_ROW, 0, 16),
        ("int8-row", fmt_id::INT8_ROW, 0, 16),
        ("int4-g64", fmt_id::INT4_G, 64, 8),
        ("fp8-e4m3-b128", fmt_id::FP8_F32, 0, 16),
        ("mq4-g256-v2", fmt_id::MQ4_V2, 0, 16),
    ];
    let key = |fmt, group, build, s, tuning| ModuleKey {
        kernel: KernelId { fmt, group },
        build,
        s,
        arch: "sm_90".into(),
        mutation: None,
        tuning,
    };
    for (name, fmt, group, chunk_bytes) in issue_formats {
        for precision in kernels_cuda::GemmPrecision::ALL {
            for wgmma in [false, true] {
                let build = precision.gemm_build(MmaKernel { chunk_bytes }, fmt);
                let tuning = kernels_cuda::Tuning {
                    gemm_wgmma: wgmma,
                    ..Default::default()
                };
                let (ok, log, cubin) = ptxas(&src, &key(fmt, group, build, 0, tuning).options())?;
                println!(
                    "== {name} {precision:?} wgmma={wgmma}: compile {ok:?}, cubin {cubin} bytes\n{log}"
                );
            }
        }
    }
    // The 16-row GEMV at S = 1 and 16 with the default knobs (the shape-dependent rules,
    // `layout::rows_stage` and the small-grid warps, pick other builds on some shapes).
    for (name, fmt, group, chunk_bytes) in issue_formats {
        for s in [1usize, 16] {
            let build = Build::GemvMma(MmaKernel { chunk_bytes });
            let k = key(fmt, group, build, s, kernels_cuda::Tuning::default());
            let (ok, log, _) = ptxas(&src, &k.options())?;
            println!("== {name} GEMV S={s}: compile {ok:?}\n{log}");
        }
    }
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--ptxas") {
        return ptxas_report();
    }
    // SAFETY: only asks whether the driver library can be opened.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        println!("skipped: no CUDA device (libcuda not found)");
        return Ok(());
    }
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let sms = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let clock =
        ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)? as f64 / 1e3;
    println!("device: {} ({sms} SMs, max clock {clock} MHz)", ctx.name()?);
    let opts = CompileOptions {
        options: vec!["--gpu-architecture=sm_90a".into(), "-std=c++17".into()],
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(source(), opts)?;
    let module = ctx.load_module(ptx)?;

    // Layout check: small integers, so every product and sum is exact in f32.
    let (m, n, k) = (64usize, 64usize, 16usize);
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 + 3) % 9) as f32 - 4.0).collect();
    let bt: Vec<f32> = (0..n * k).map(|i| ((i * 5 + 1) % 7) as f32 - 3.0).collect();
    let a_pairs: Vec<u32> = a
        .chunks(2)
        .map(|p| {
            u32::from(f16::from_f32(p[0]).to_bits())
                | (u32::from(f16::from_f32(p[1]).to_bits()) << 16)
        })
        .collect();
    let bt_h: Vec<u16> = bt.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
    let mut want = vec![0f32; m * n];
    for r in 0..m {
        for c in 0..n {
            want[r * n + c] = (0..k).map(|q| a[r * k + q] * bt[c * k + q]).sum();
        }
    }
    let check = module.load_function("wg_check")?;
    let a_d = stream.clone_htod(&a_pairs)?;
    let b_d = stream.clone_htod(&bt_h)?;
    for (lbo, sbo, trans) in [
        (128u32, 256u32, 0i32),
        (256, 128, 0),
        (128, 256, 1),
        (256, 128, 1),
    ] {
        let mut d_d = stream.clone_htod(&vec![f32::NAN; m * n])?;
        let mut b = stream.launch_builder(&check);
        b.arg(&a_d)
            .arg(&b_d)
            .arg(&mut d_d)
            .arg(&lbo)
            .arg(&sbo)
            .arg(&trans);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: wg_check(const u32*, const u16*, float*, u32, u32, int) with A 64 x 16 halves,
        // Bt 64 x 16 halves and D 64 x 64 floats.
        unsafe { b.launch(cfg) }?;
        let got = stream.clone_dtoh(&d_d)?;
        let bad = got.iter().zip(&want).filter(|(g, w)| g != w).count();
        println!(
            "wgmma m64n64k16 layout (lbo {lbo}, sbo {sbo}, trans-b {trans}): {} of {} outputs differ{}",
            bad,
            m * n,
            if bad == 0 { " (exact)" } else { "" }
        );
    }

    // Throughput: FLOPs over the time of one launch, after a warm-up launch.
    let time = |name: &str, blocks: u32, threads: u32, iters: i32| -> Res<f64> {
        let f = module.load_function(name)?;
        let mut out = stream.alloc_zeros::<f32>((blocks * threads) as usize)?;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut best = f64::MAX;
        for _ in 0..4 {
            let t0 = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
            let t1 = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
            t0.record(&stream)?;
            let mut b = stream.launch_builder(&f);
            b.arg(&mut out).arg(&iters);
            // SAFETY: (float*, int) with one float per thread of the grid.
            unsafe { b.launch(cfg) }?;
            t1.record(&stream)?;
            best = best.min(t0.elapsed_ms(&t1)? as f64 / 1e3);
        }
        Ok(best)
    };
    let sms = sms as u32;
    let iters = 8192;
    for per_sm in [1u32, 2, 4] {
        let blocks = sms * per_sm;
        for (name, nn) in [("wg_peak64", 64.0), ("wg_peak128", 128.0)] {
            let s = time(name, blocks, 128, iters)?;
            let flop = blocks as f64 * iters as f64 * 2.0 * 64.0 * nn * 16.0;
            println!(
                "{name}: {per_sm} warpgroups an SM, {:.1} us, {:.0} TFLOP/s",
                s * 1e6,
                flop / s / 1e12
            );
        }
    }
    for warps in [4u32, 8, 16] {
        let blocks = sms * 2;
        let s = time("mma_peak", blocks, 32 * warps, iters)?;
        let flop = blocks as f64 * warps as f64 * iters as f64 * 4.0 * 2.0 * 16.0 * 8.0 * 16.0;
        println!(
            "mma.sync m16n8k16: {} warps an SM, 4 chains a warp, {:.1} us, {:.0} TFLOP/s",
            2 * warps,
            s * 1e6,
            flop / s / 1e12
        );
    }
    Ok(())
}
